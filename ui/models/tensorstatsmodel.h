// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/tensor/tensor_stats.h"

#include <QAbstractTableModel>

#include <optional>

namespace optscope::ui {

/// The statistics of one tensor as a two-column table (statistic, value).
class TensorStatsModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Columns { NameColumn, ValueColumn, ColumnCount };
    enum Rows { Min, Max, Mean, Std, L2Norm, Sum, Finite, NaNs, Infs, Zeros, RowCount };
    enum Roles { SortRole = Qt::UserRole, ValueRole };

    explicit TensorStatsModel(QObject* parent = nullptr);

    void setData(std::optional<TensorStats> stats);
    const std::optional<TensorStats>& stats() const { return m_stats; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    double value(int row) const;

    std::optional<TensorStats> m_stats;
};

} // namespace optscope::ui
