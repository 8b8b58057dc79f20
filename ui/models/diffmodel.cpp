// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/diffmodel.h"

#include "common/format.h"

#include <QColor>

#include <cmath>

namespace optscope::ui {

namespace {

QColor statusColor(DiffStatus s)
{
    if (s == DiffStatus::Equal) return {0x2e, 0x7d, 0x32};
    if (s == DiffStatus::Changed) return {0xd6, 0x27, 0x28};
    return {0xb3, 0x59, 0x00};
}

QString statusText(DiffStatus s)
{
    if (s == DiffStatus::OnlyA) return QObject::tr("only in A");
    if (s == DiffStatus::OnlyB) return QObject::tr("only in B");
    return QString::fromLatin1(diffStatusName(s));
}

} // namespace

DiffModel::DiffModel(QObject* parent)
    : QAbstractTableModel(parent)
{ }

void DiffModel::setData(DiffReport report)
{
    beginResetModel();
    m_report = std::move(report);
    endResetModel();
}

void DiffModel::appendEntries(std::vector<DiffEntry> entries)
{
    if (entries.empty()) return;
    const int first = static_cast<int>(m_report.entries.size());
    beginInsertRows({}, first, first + static_cast<int>(entries.size()) - 1);
    for (auto& e : entries)
        m_report.entries.push_back(std::move(e));
    endInsertRows();
}

int DiffModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_report.entries.size());
}

int DiffModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant DiffModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid()) return {};
    const DiffEntry& e = m_report.entries[static_cast<size_t>(index.row())];
    const int col = index.column();
    const bool tensor = e.tensor;
    // numbers only where values were compared (not across a shape or stored-part change)
    const bool numbers = tensor && e.valuesCompared;
    if (role == StatusRole) return QString::fromLatin1(diffStatusName(e.status));
    if (role == EntryIndexRole) return index.row();
    if (role == Qt::ForegroundRole && col == StatusColumn) return statusColor(e.status);
    if (role == Qt::TextAlignmentRole && col >= MaxAbsColumn && col <= NumelColumn)
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole) {
        QString tip = QString::fromStdString(e.keyA.empty() ? e.keyB : e.keyA);
        if (!e.keyB.empty() && e.keyB != e.keyA) tip += QStringLiteral(" ↔ ") + QString::fromStdString(e.keyB);
        if (!e.reason.empty()) tip += QLatin1Char('\n') + QString::fromStdString(e.reason);
        if (!tensor && (!e.valueA.empty() || !e.valueB.empty()))
            tip += QStringLiteral("\nA: %1\nB: %2")
                       .arg(QString::fromStdString(e.valueA), QString::fromStdString(e.valueB));
        if (e.nanA || e.nanB || e.infA || e.infB)
            tip += tr("\nNaN A/B: %1/%2, inf A/B: %3/%4").arg(e.nanA).arg(e.nanB).arg(e.infA).arg(e.infB);
        return tip;
    }
    if (role == SortRole) {
        // numeric columns rank tensors by their number, then one-element counters (a `step` that moved by 1 is no
        // news next to a moment that moved), then rows without numbers: descending order reads most different first
        const bool counter = numbers && e.numel <= 1;
        const auto rank = [&](double v) {
            if (!numbers) return -2.0;
            if (!counter) return v;
            const double m = std::isfinite(v) ? std::fabs(v) : 1e300;
            return -1.0 + 0.5 * m / (1.0 + m); // (-1, -0.5]: apart from, and below, every tensor
        };
        switch (col) {
        case KeyColumn:
            return QString::fromStdString(e.key());
        case StatusColumn:
            return QString::fromLatin1(diffStatusName(e.status));
        case MaxAbsColumn:
            return rank(e.maxAbsDiff);
        case MaxRelColumn:
            return rank(e.maxRelDiff);
        case RmsColumn:
            return rank(e.rmsDiff);
        case NumDiffColumn:
            return rank(static_cast<double>(e.numDiff));
        case NumelColumn:
            return qlonglong(e.numel);
        default:
            break;
        }
    }
    if (role != Qt::DisplayRole && role != SortRole) return {};
    switch (col) {
    case KeyColumn:
        return Format::text(e.key());
    case StatusColumn:
        return statusText(e.status);
    case MaxAbsColumn:
        return numbers ? Format::number(e.maxAbsDiff, 4) : QString();
    case MaxRelColumn:
        return numbers ? Format::number(e.maxRelDiff, 4) : QString();
    case RmsColumn:
        return numbers ? Format::number(e.rmsDiff, 4) : QString();
    case NumDiffColumn:
        return numbers ? Format::count(e.numDiff) : QString();
    case NumelColumn:
        return tensor ? Format::count(e.numel) : QString();
    case ReasonColumn: {
        if (!tensor && e.status == DiffStatus::Changed && e.reason.empty())
            return QStringLiteral("%1 → %2").arg(QString::fromStdString(e.valueA), QString::fromStdString(e.valueB));
        return QString::fromStdString(e.reason);
    }
    case MatchColumn:
        return QString::fromStdString(e.match);
    default:
        return {};
    }
}

QVariant DiffModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal) return {};
    // the first click on a number column sorts it largest first, as a profiler's cost columns do
    if (role == Qt::InitialSortOrderRole)
        return section >= MaxAbsColumn && section <= NumelColumn ? Qt::DescendingOrder : Qt::AscendingOrder;
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case MaxAbsColumn:
            return tr("max |a − b|");
        case MaxRelColumn:
            return tr("max |a − b| / |b| over elements with b ≠ 0");
        case RmsColumn:
            return tr("sqrt(mean((a − b)²))");
        case NumDiffColumn:
            return tr("elements outside the tolerance (bitwise different at rtol = atol = 0)");
        case MatchColumn:
            return tr("how the keys of A and B were paired");
        default:
            return {};
        }
    }
    if (role != Qt::DisplayRole) return {};
    switch (section) {
    case KeyColumn:
        return tr("Key");
    case StatusColumn:
        return tr("Status");
    case MaxAbsColumn:
        return tr("max |Δ|");
    case MaxRelColumn:
        return tr("max rel");
    case RmsColumn:
        return tr("RMS");
    case NumDiffColumn:
        return tr("#diff");
    case NumelColumn:
        return tr("Numel");
    case ReasonColumn:
        return tr("Reason");
    case MatchColumn:
        return tr("Match");
    default:
        return {};
    }
}

} // namespace optscope::ui
