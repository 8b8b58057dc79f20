// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/valuespreviewmodel.h"

#include "common/format.h"
#include "optscope/model/element_decoder.h"

#include "optscope/tensor/tensor_assembler.h"

#include <QStringList>

#include <algorithm>

namespace optscope::ui {

namespace {
/// the values (and imaginary parts) of @p bytes, elements of the slice's dtype
void decodeInto(ValuesPreviewModel::Slice& s, const std::vector<uint8_t>& bytes)
{
    const size_t elem = dtypeSize(s.dtype);
    const size_t count = bytes.size() / elem;
    s.values = ElementDecoder::decode(bytes.data(), count, s.dtype);
    if (dtypeIsComplex(s.dtype)) {
        s.imag.resize(count);
        for (size_t i = 0; i < count; ++i)
            s.imag[i] = ElementDecoder::imaginary(bytes.data() + i * elem, s.dtype);
    }
}
} // namespace

ValuesPreviewModel::Slice ValuesPreviewModel::read(const Checkpoint& checkpoint, const Entry& entry, int64_t rowOffset,
    int64_t rows, int64_t maxColumns, const Progress& progress)
{
    Slice s;
    const TensorEntry& t = *entry.tensor;
    s.dtype = t.dtype;
    s.shape = t.shape;
    const size_t ndim = t.shape.size();
    std::vector<int64_t> offsets(ndim, 0), sizes(t.shape);
    if (ndim == 0) {
        s.rows = t.numel() > 0 ? 1 : 0;
        s.columns = s.rowLength = 1;
    } else {
        const int64_t dim0 = t.shape[0];
        s.rowOffset = std::clamp<int64_t>(rowOffset, 0, std::max<int64_t>(dim0 - 1, 0));
        s.rows = std::clamp<int64_t>(rows, 0, dim0 - s.rowOffset);
        offsets[0] = s.rowOffset;
        sizes[0] = s.rows;
        s.rowLength = 1;
        for (size_t d = 1; d < ndim; ++d)
            s.rowLength *= t.shape[d];
        // the first maxColumns elements of a row as a box: full trailing dims, then one partial dim, then 1s
        int64_t product = 1;
        size_t d = ndim;
        while (d > 1 && product * t.shape[d - 1] <= maxColumns) {
            product *= t.shape[d - 1];
            --d;
        }
        if (d > 1) {
            const int64_t partial
                = std::max<int64_t>(1, std::min(t.shape[d - 1], maxColumns / std::max<int64_t>(product, 1)));
            sizes[d - 1] = partial;
            product *= partial;
            for (size_t k = 1; k + 1 < d; ++k)
                sizes[k] = 1;
        }
        s.columns = ndim == 1 ? 1 : product;
        if (t.numel() == 0) s.rows = 0;
    }
    if (s.rows == 0 || s.columns == 0) return s;
    const size_t elem = dtypeSize(t.dtype);
    std::vector<uint8_t> bytes;
    bytes.reserve(static_cast<size_t>(s.rows * s.columns) * elem);
    TensorAssembler(checkpoint, entry)
        .streamBox(
            offsets, sizes, [&](const uint8_t* p, size_t n) { bytes.insert(bytes.end(), p, p + n); }, progress);
    decodeInto(s, bytes);
    s.values.resize(static_cast<size_t>(s.rows * s.columns));
    return s;
}

ValuesPreviewModel::Slice ValuesPreviewModel::readElements(
    const Checkpoint& checkpoint, const Entry& entry, int64_t first, int64_t count, const Progress& progress)
{
    Slice s;
    const TensorEntry& t = *entry.tensor;
    s.dtype = t.dtype;
    s.shape = t.shape;
    s.rowLength = 1;
    for (size_t d = 1; d < t.shape.size(); ++d)
        s.rowLength *= t.shape[d];
    const int64_t numel = t.numel();
    s.firstElement = std::clamp<int64_t>(first, 0, numel);
    const int64_t n = std::clamp<int64_t>(count, 0, numel - s.firstElement);
    s.rows = n;
    s.columns = 1;
    if (n == 0) return s;
    const size_t elem = dtypeSize(t.dtype);
    std::vector<uint8_t> bytes;
    bytes.reserve(static_cast<size_t>(n) * elem);
    TensorAssembler(checkpoint, entry)
        .streamElements(
            s.firstElement, n, [&](const uint8_t* p, size_t size) { bytes.insert(bytes.end(), p, p + size); },
            progress);
    decodeInto(s, bytes);
    return s;
}

ValuesPreviewModel::ValuesPreviewModel(QObject* parent)
    : QAbstractTableModel(parent)
{ }

void ValuesPreviewModel::setData(Slice slice)
{
    beginResetModel();
    m_slice = std::move(slice);
    endResetModel();
}

void ValuesPreviewModel::clear()
{
    setData({});
}

int ValuesPreviewModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_slice.rows);
}

int ValuesPreviewModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_slice.columns);
}

QVariant ValuesPreviewModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid()) return {};
    const size_t i = static_cast<size_t>(index.row() * m_slice.columns + index.column());
    if (i >= m_slice.values.size()) return {};
    const double v = m_slice.values[i];
    switch (role) {
    case Qt::DisplayRole: {
        if (m_slice.dtype == DType::Bool) return v != 0.0 ? QStringLiteral("True") : QStringLiteral("False");
        if (!m_slice.imag.empty()) {
            const double im = m_slice.imag[i];
            return QStringLiteral("%1%2%3j").arg(
                Format::number(v), im < 0 ? QStringLiteral("-") : QStringLiteral("+"), Format::number(std::abs(im)));
        }
        if (!dtypeIsFloatingPoint(m_slice.dtype)) return QString::number(v, 'f', 0);
        return Format::number(v, 7);
    }
    case SortRole:
    case ValueRole:
        return v;
    case Qt::TextAlignmentRole:
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    default:
        return {};
    }
}

QVariant ValuesPreviewModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (role != Qt::DisplayRole) return {};
    const size_t ndim = m_slice.shape.size();
    if (orientation == Qt::Vertical) return ndim == 0 ? QString() : QString::number(m_slice.rowOffset + section);
    if (ndim <= 1) return tr("value");
    if (ndim == 2) return QString::number(section);
    // multi-index of the flattened trailing dims
    QStringList idx;
    int64_t rest = section;
    for (size_t d = ndim; d-- > 1;) {
        idx.prepend(QString::number(rest % m_slice.shape[d]));
        rest /= m_slice.shape[d];
    }
    return idx.join(QLatin1Char(','));
}

} // namespace optscope::ui
