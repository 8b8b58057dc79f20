// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/verify_report.h"

#include <QAbstractItemModel>

namespace optscope::ui {

/// A VerifyReport as a tree: one row per key, its per-rank results as children.
class VerifyModel : public QAbstractItemModel
{
    Q_OBJECT
public:
    enum Columns {
        KeyColumn,
        StatusColumn,
        ElementsColumn,
        DifferingColumn,
        FirstDiffColumn,
        DetailColumn,
        ColumnCount
    };
    enum Roles { SortRole = Qt::UserRole, StatusRole };

    explicit VerifyModel(QObject* parent = nullptr);

    void setData(VerifyReport report);
    const VerifyReport& report() const { return m_report; }
    bool hasReport() const { return !m_report.entries.empty(); }

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    static constexpr quintptr TopLevel = ~quintptr(0);
    VerifyReport m_report;
};

} // namespace optscope::ui
