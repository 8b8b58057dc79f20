// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/tensorstatsmodel.h"

#include "common/format.h"

#include <QColor>

namespace optscope::ui {

TensorStatsModel::TensorStatsModel(QObject* parent)
    : QAbstractTableModel(parent)
{ }

void TensorStatsModel::setData(std::optional<TensorStats> stats)
{
    beginResetModel();
    m_stats = std::move(stats);
    endResetModel();
}

int TensorStatsModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() || !m_stats ? 0 : RowCount;
}

int TensorStatsModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

double TensorStatsModel::value(int row) const
{
    const TensorStats& s = *m_stats;
    switch (row) {
    case Min:
        return s.min;
    case Max:
        return s.max;
    case Mean:
        return s.mean;
    case Std:
        return s.std;
    case L2Norm:
        return s.l2Norm;
    case Sum:
        return s.sum;
    case Finite:
        return static_cast<double>(s.finite);
    case NaNs:
        return static_cast<double>(s.nanCount);
    case Infs:
        return static_cast<double>(s.infCount);
    case Zeros:
        return static_cast<double>(s.zeroCount);
    default:
        return 0.0;
    }
}

QVariant TensorStatsModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || !m_stats) return {};
    const int row = index.row();
    const bool isCount = row >= Finite;
    if (role == SortRole || role == ValueRole)
        return index.column() == NameColumn ? QVariant(row) : QVariant(value(row));
    if (role == Qt::ForegroundRole && index.column() == ValueColumn && (row == NaNs || row == Infs) && value(row) > 0)
        return QColor(Qt::red);
    if (role == Qt::TextAlignmentRole && index.column() == ValueColumn)
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole && index.column() == ValueColumn && !isCount)
        return QString::number(value(row), 'g', 17);
    if (role != Qt::DisplayRole) return {};
    if (index.column() == NameColumn) {
        switch (row) {
        case Min:
            return tr("min");
        case Max:
            return tr("max");
        case Mean:
            return tr("mean");
        case Std:
            return tr("std");
        case L2Norm:
            return tr("L2 norm");
        case Sum:
            return tr("sum");
        case Finite:
            return tr("finite");
        case NaNs:
            return tr("NaN");
        case Infs:
            return tr("±inf");
        case Zeros:
            return tr("zeros");
        default:
            return {};
        }
    }
    if (!isCount) return Format::number(value(row), 7);
    const int64_t n = static_cast<int64_t>(value(row));
    if (m_stats->numel > 0 && row != Finite && n > 0)
        return QStringLiteral("%1 (%2%)")
            .arg(Format::count(n))
            .arg(100.0 * static_cast<double>(n) / static_cast<double>(m_stats->numel), 0, 'g', 3);
    return Format::count(n);
}

QVariant TensorStatsModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    return section == NameColumn ? tr("Statistic") : tr("Value");
}

} // namespace optscope::ui
