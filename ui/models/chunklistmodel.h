// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"

#include <QAbstractTableModel>

namespace optscope::ui {

/// The chunks of one tensor entry: which rank wrote which box, and where its bytes are.
class ChunkListModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Columns { RankColumn, OffsetsColumn, SizesColumn, NumelColumn, BytesColumn, FileColumn, ColumnCount };
    enum Roles { SortRole = Qt::UserRole };

    explicit ChunkListModel(QObject* parent = nullptr);

    /// @p checkpoint keeps @p entry alive; null clears
    void setData(CheckpointPtr checkpoint, const Entry* entry);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    CheckpointPtr m_checkpoint;
    const Entry* m_entry = nullptr;
};

} // namespace optscope::ui
