// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/valuecomparemodel.h"

#include "common/format.h"

#include <QColor>

#include <cmath>

namespace optscope::ui {

ValueCompareModel::ValueCompareModel(QObject* parent)
    : QAbstractTableModel(parent)
{ }

void ValueCompareModel::setData(ValuesPreviewModel::Slice a, ValuesPreviewModel::Slice b, double rtol, double atol)
{
    beginResetModel();
    m_a = std::move(a);
    m_b = std::move(b);
    const size_t n = std::min(m_a.values.size(), m_b.values.size());
    m_differs.assign(n, 0);
    m_differing = 0;
    for (size_t i = 0; i < n; ++i) {
        const double x = m_a.values[i], y = m_b.values[i];
        bool same;
        if (std::isnan(x) || std::isnan(y))
            same = std::isnan(x) && std::isnan(y);
        else if (std::isinf(x) || std::isinf(y))
            same = x == y;
        else
            same = std::fabs(x - y) <= atol + rtol * std::fabs(y);
        m_differs[i] = same ? 0 : 1;
        m_differing += same ? 0 : 1;
    }
    rebuildRows();
    endResetModel();
}

void ValueCompareModel::clear()
{
    setData({}, {}, 0, 0);
}

void ValueCompareModel::setOnlyDiffering(bool on)
{
    if (on == m_onlyDiffering) return;
    beginResetModel();
    m_onlyDiffering = on;
    rebuildRows();
    endResetModel();
}

void ValueCompareModel::rebuildRows()
{
    m_rows.clear();
    for (size_t i = 0; i < m_differs.size(); ++i)
        if (!m_onlyDiffering || m_differs[i]) m_rows.push_back(i);
}

QString ValueCompareModel::indexText(size_t element) const
{
    if (m_a.shape.empty()) return QStringLiteral("[]");
    if (m_a.firstElement >= 0) {
        // a page of elements: the row along dim 0, then the element within the row (the rest of the dims flattened)
        const int64_t flat = m_a.firstElement + static_cast<int64_t>(element);
        if (m_a.shape.size() == 1) return QStringLiteral("[%1]").arg(flat);
        const int64_t rowLength = std::max<int64_t>(m_a.rowLength, 1);
        return QStringLiteral("[%1, %2]").arg(flat / rowLength).arg(flat % rowLength);
    }
    const int64_t columns = std::max<int64_t>(m_a.columns, 1);
    const int64_t row = m_a.rowOffset + static_cast<int64_t>(element) / columns;
    if (m_a.shape.size() == 1) return QStringLiteral("[%1]").arg(row);
    // the rest of the dims, flattened within the row (as the Values tab numbers its columns)
    return QStringLiteral("[%1, %2]").arg(row).arg(static_cast<int64_t>(element) % columns);
}

int ValueCompareModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int ValueCompareModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ValueCompareModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= static_cast<int>(m_rows.size())) return {};
    const size_t e = m_rows[static_cast<size_t>(index.row())];
    const double a = m_a.values[e], b = m_b.values[e];
    const bool differs = m_differs[e] != 0;
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case IndexColumn:
            return indexText(e);
        case AColumn:
            return Format::number(a, 8);
        case BColumn:
            return Format::number(b, 8);
        case DeltaColumn:
            return differs ? Format::number(a - b, 4) : QString();
        default:
            return {};
        }
    case SortRole:
        switch (index.column()) {
        case IndexColumn:
            return static_cast<qlonglong>(e);
        case AColumn:
            return a;
        case BColumn:
            return b;
        default:
            return differs ? std::fabs(a - b) : 0.0;
        }
    case DiffersRole:
        return differs;
    case Qt::BackgroundRole:
        if (differs && index.column() != IndexColumn) return QColor(0xfd, 0xe0, 0xdd);
        return {};
    case Qt::TextAlignmentRole:
        return index.column() == IndexColumn ? QVariant() : QVariant(Qt::AlignRight | Qt::AlignVCenter);
    default:
        return {};
    }
}

QVariant ValueCompareModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case IndexColumn:
        return tr("Index");
    case AColumn:
        return tr("A");
    case BColumn:
        return tr("B");
    case DeltaColumn:
        return tr("Δ = A − B");
    default:
        return {};
    }
}

} // namespace optscope::ui
