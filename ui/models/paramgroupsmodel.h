// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/optim/param_groups_table.h"

#include <QAbstractTableModel>

namespace optscope::ui {

/// An optimizer's param_groups, groups × hyperparameters (core's ParamGroupsTable); with a comparison, the cells that
/// differ from the other checkpoint's are marked (bold, tinted, the other value in the tooltip).
class ParamGroupsModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Roles { DiffersRole = Qt::UserRole }; ///< bool: the cell differs from the comparison's

    explicit ParamGroupsModel(QObject* parent = nullptr);

    /// @p other: the same optimizer's table in the compared checkpoint, or null without a comparison
    void setData(ParamGroupsTable table, const ParamGroupsTable* other);
    const ParamGroupsTable& table() const { return m_table; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    ParamGroupsTable m_table;
    ParamGroupsTable m_other;
    bool m_compared = false;
    std::vector<std::vector<bool>> m_differs;
};

} // namespace optscope::ui
