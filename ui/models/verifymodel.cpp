// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/verifymodel.h"

#include "common/format.h"

#include <QColor>

namespace optscope::ui {

namespace {

QColor statusColor(VerifyStatus status)
{
    if (status == VerifyStatus::Identical) return {0x2e, 0x7d, 0x32};
    if (status == VerifyStatus::Different || status == VerifyStatus::Error) return {0xd6, 0x27, 0x28};
    if (status == VerifyStatus::LeftOut) return QColor(Qt::gray); // by design, said in its detail
    return {0xb3, 0x59, 0x00};
}

} // namespace

VerifyModel::VerifyModel(QObject* parent)
    : QAbstractItemModel(parent)
{ }

void VerifyModel::setData(VerifyReport report)
{
    beginResetModel();
    m_report = std::move(report);
    endResetModel();
}

QModelIndex VerifyModel::index(int row, int column, const QModelIndex& parent) const
{
    if (row < 0 || column < 0 || column >= ColumnCount) return {};
    if (!parent.isValid()) {
        if (row >= static_cast<int>(m_report.entries.size())) return {};
        return createIndex(row, column, TopLevel);
    }
    if (parent.internalId() != TopLevel || parent.column() != 0) return {};
    const auto& e = m_report.entries[static_cast<size_t>(parent.row())];
    if (row >= static_cast<int>(e.ranks.size())) return {};
    return createIndex(row, column, static_cast<quintptr>(parent.row()));
}

QModelIndex VerifyModel::parent(const QModelIndex& child) const
{
    if (!child.isValid() || child.internalId() == TopLevel) return {};
    return createIndex(static_cast<int>(child.internalId()), 0, TopLevel);
}

int VerifyModel::rowCount(const QModelIndex& parent) const
{
    if (!parent.isValid()) return static_cast<int>(m_report.entries.size());
    if (parent.internalId() != TopLevel || parent.column() != 0) return 0;
    return static_cast<int>(m_report.entries[static_cast<size_t>(parent.row())].ranks.size());
}

int VerifyModel::columnCount(const QModelIndex& parent) const
{
    return parent.column() > 0 ? 0 : ColumnCount;
}

QVariant VerifyModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid()) return {};
    const int col = index.column();
    if (index.internalId() != TopLevel) {
        const auto& e = m_report.entries[index.internalId()];
        const auto& r = e.ranks[static_cast<size_t>(index.row())];
        const VerifyStatus status = r.differing > 0 ? VerifyStatus::Different : VerifyStatus::Identical;
        if (role == StatusRole) return QString::fromLatin1(verifyStatusName(status));
        if (role == Qt::ForegroundRole && col == StatusColumn) return statusColor(status);
        if (role == Qt::TextAlignmentRole && col >= ElementsColumn && col <= FirstDiffColumn)
            return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
        if (role == SortRole) {
            switch (col) {
            case KeyColumn:
                return r.rank;
            case ElementsColumn:
                return qlonglong(r.elements);
            case DifferingColumn:
                return qlonglong(r.differing);
            case FirstDiffColumn:
                return qlonglong(r.firstDiff);
            default:
                break;
            }
        }
        if (role != Qt::DisplayRole && role != SortRole) return {};
        switch (col) {
        case KeyColumn:
            return tr("rank %1").arg(r.rank);
        case StatusColumn:
            return QString::fromLatin1(verifyStatusName(status));
        case ElementsColumn:
            return Format::count(r.elements);
        case DifferingColumn:
            return Format::count(r.differing);
        case FirstDiffColumn:
            return r.firstDiff < 0 ? QString() : Format::count(r.firstDiff);
        default:
            return {};
        }
    }
    const auto& e = m_report.entries[static_cast<size_t>(index.row())];
    if (role == StatusRole) return QString::fromLatin1(verifyStatusName(e.status));
    if (role == Qt::ForegroundRole && col == StatusColumn) return statusColor(e.status);
    if (role == Qt::TextAlignmentRole && col >= ElementsColumn && col <= FirstDiffColumn)
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole && !e.detail.empty()) return QString::fromStdString(e.detail);
    int64_t firstDiff = -1;
    for (const auto& r : e.ranks)
        if (r.firstDiff >= 0 && (firstDiff < 0 || r.firstDiff < firstDiff)) firstDiff = r.firstDiff;
    if (role == SortRole) {
        switch (col) {
        case ElementsColumn:
            return qlonglong(e.elements);
        case DifferingColumn:
            return qlonglong(e.differing);
        case FirstDiffColumn:
            return qlonglong(firstDiff);
        default:
            break;
        }
    }
    if (role != Qt::DisplayRole && role != SortRole) return {};
    switch (col) {
    case KeyColumn:
        return Format::text(e.key);
    case StatusColumn:
        return QString::fromLatin1(verifyStatusName(e.status));
    case ElementsColumn:
        return e.type == "tensor" ? Format::count(e.elements) : QString();
    case DifferingColumn:
        return e.type == "tensor" ? Format::count(e.differing) : QString();
    case FirstDiffColumn:
        return firstDiff < 0 ? QString() : Format::count(firstDiff);
    case DetailColumn: {
        QString d = QString::fromStdString(e.detail);
        if (e.type == "tensor" && d.isEmpty())
            d = Format::shape(e.shape) + tr(" on %n rank(s)", nullptr, static_cast<int>(e.ranks.size()));
        return d;
    }
    default:
        return {};
    }
}

QVariant VerifyModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case KeyColumn:
        return tr("Key / rank");
    case StatusColumn:
        return tr("Status");
    case ElementsColumn:
        return tr("Elements");
    case DifferingColumn:
        return tr("Differing");
    case FirstDiffColumn:
        return tr("First diff");
    case DetailColumn:
        return tr("Detail");
    default:
        return {};
    }
}

} // namespace optscope::ui
