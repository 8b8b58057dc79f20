// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "session/fqnmapping.h"

#include <QAbstractTableModel>

namespace optscope::ui {

/// FqnMapping rows as a table (sort and search through a QSortFilterProxyModel on SortRole).
class FqnMappingModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Columns {
        IdColumn,
        ConfidenceColumn,
        FqnColumn,
        NormalizedColumn,
        FlatParamColumn,
        FlatOffsetColumn,
        NumelColumn,
        ShapeColumn,
        StatesColumn,
        GroupColumn,
        NoteColumn,
        ColumnCount
    };
    enum Roles { SortRole = Qt::UserRole, JumpKeyRole };

    explicit FqnMappingModel(QObject* parent = nullptr);

    void setData(FqnMapping mapping);
    const FqnMapping& mapping() const { return m_mapping; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    FqnMapping m_mapping;
};

} // namespace optscope::ui
