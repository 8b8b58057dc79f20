// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/diff_report.h"

#include <QAbstractTableModel>

namespace optscope::ui {

/// The keys of a DiffReport with their status and numbers; sort through a QSortFilterProxyModel on SortRole.
class DiffModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Columns {
        KeyColumn,
        StatusColumn,
        MaxAbsColumn,
        MaxRelColumn,
        RmsColumn,
        NumDiffColumn,
        NumelColumn,
        ReasonColumn,
        MatchColumn,
        ColumnCount
    };
    enum Roles { SortRole = Qt::UserRole, StatusRole, EntryIndexRole };

    explicit DiffModel(QObject* parent = nullptr);

    void setData(DiffReport report);
    /// rows as a running comparison finishes them (the final report replaces them, in its order)
    void appendEntries(std::vector<DiffEntry> entries);
    const DiffReport& report() const { return m_report; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    DiffReport m_report;
};

} // namespace optscope::ui
