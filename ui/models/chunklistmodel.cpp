// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/chunklistmodel.h"

#include "common/format.h"

namespace optscope::ui {

ChunkListModel::ChunkListModel(QObject* parent)
    : QAbstractTableModel(parent)
{ }

void ChunkListModel::setData(CheckpointPtr checkpoint, const Entry* entry)
{
    beginResetModel();
    m_checkpoint = std::move(checkpoint);
    m_entry = m_checkpoint && entry && entry->isTensor() ? entry : nullptr;
    endResetModel();
}

int ChunkListModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() || !m_entry ? 0 : static_cast<int>(m_entry->tensor->chunks.size());
}

int ChunkListModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ChunkListModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || !m_entry) return {};
    const TensorChunk& c = m_entry->tensor->chunks[static_cast<size_t>(index.row())];
    const uint64_t bytes = static_cast<uint64_t>(c.numel()) * dtypeSize(m_entry->tensor->dtype);
    if (role == SortRole) {
        switch (index.column()) {
        case RankColumn:
            return c.rank;
        case OffsetsColumn:
            return c.offsets.empty() ? qlonglong(0) : qlonglong(c.offsets[0]);
        case SizesColumn:
            return c.sizes.empty() ? qlonglong(1) : qlonglong(c.sizes[0]);
        case NumelColumn:
            return qlonglong(c.numel());
        case BytesColumn:
            return qulonglong(bytes);
        case FileColumn:
            return QString::fromStdString(c.source.file);
        default:
            return {};
        }
    }
    if (role == Qt::TextAlignmentRole && (index.column() == NumelColumn || index.column() == BytesColumn))
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole)
        return tr("rank %1 holds %2 of %3\nfile %4, byte %5")
            .arg(c.rank)
            .arg(Format::box(c.offsets, c.sizes), Format::shape(m_entry->tensor->shape),
                QString::fromStdString(c.source.file))
            .arg(c.source.offset);
    if (role != Qt::DisplayRole) return {};
    switch (index.column()) {
    case RankColumn:
        return c.rank < 0 ? QStringLiteral("—") : QString::number(c.rank);
    case OffsetsColumn:
        return Format::shape(c.offsets);
    case SizesColumn:
        return Format::shape(c.sizes);
    case NumelColumn:
        return Format::count(c.numel());
    case BytesColumn:
        return Format::bytes(bytes);
    case FileColumn:
        return QString::fromStdString(c.source.file);
    default:
        return {};
    }
}

QVariant ChunkListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case RankColumn:
        return tr("Rank");
    case OffsetsColumn:
        return tr("Offsets");
    case SizesColumn:
        return tr("Sizes");
    case NumelColumn:
        return tr("Numel");
    case BytesColumn:
        return tr("Bytes");
    case FileColumn:
        return tr("File");
    default:
        return {};
    }
}

} // namespace optscope::ui
