// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <QAbstractTableModel>

#include <cstdint>
#include <vector>

namespace optscope::ui {

/// A window of a tensor's values: rows along dim 0 from a row offset, columns the first elements of each row (the
/// rest of the dims flattened). 0-dim tensors are one cell, 1-dim ones one column.
class ValuesPreviewModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Roles { SortRole = Qt::UserRole, ValueRole };

    struct Slice
    {
        DType dtype = DType::Unknown;
        std::vector<int64_t> shape;
        int64_t rowOffset = 0;
        int64_t rows = 0;
        int64_t columns = 0; ///< shown per row
        int64_t rowLength = 0; ///< elements per row in the tensor
        int64_t firstElement = -1; ///< readElements(): the flat index of values[0]; -1 for a window of rows
        std::vector<double> values; ///< rows * columns, row-major
        std::vector<double> imag; ///< complex dtypes only
    };

    /// Reads the window [rowOffset, rowOffset + rows) x [0, maxColumns) of @p entry (a box, streamed by the core).
    static Slice read(const Checkpoint& checkpoint, const Entry& entry, int64_t rowOffset, int64_t rows,
        int64_t maxColumns, const Progress& progress = {});

    /// Reads the elements [first, first + count) of @p entry in row-major order (clamped to the tensor): a page of
    /// its values whatever its shape, every element of a row included.
    static Slice readElements(
        const Checkpoint& checkpoint, const Entry& entry, int64_t first, int64_t count, const Progress& progress = {});

    explicit ValuesPreviewModel(QObject* parent = nullptr);

    void setData(Slice slice);
    void clear();
    const Slice& slice() const { return m_slice; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    Slice m_slice;
};

} // namespace optscope::ui
