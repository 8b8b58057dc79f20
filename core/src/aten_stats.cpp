// SPDX-License-Identifier: GPL-3.0-or-later
// Tensor statistics with ATen over streamed blocks: each block is wrapped with at::from_blob, converted to float64
// and reduced with ATen ops; per-block moments are merged with Chan et al.'s parallel variance formula.
#include "aten_bridge.h"
#include "optscope/error.h"
#include "optscope/tensor_assembler.h"
#include "optscope/tensor_stats.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace optscope {

namespace {

/// ATen scalar types that from_blob + to(kDouble) handle in libtorch 1.13 and 2.x alike
std::optional<at::ScalarType> nativeType(DType d)
{
    switch (d) {
    case DType::Float64:
        return at::kDouble;
    case DType::Float32:
        return at::kFloat;
    case DType::Float16:
        return at::kHalf;
    case DType::BFloat16:
        return at::kBFloat16;
    case DType::Int8:
        return at::kChar;
    case DType::Int16:
        return at::kShort;
    case DType::Int32:
        return at::kInt;
    case DType::Int64:
        return at::kLong;
    case DType::UInt8:
        return at::kByte;
    case DType::Bool:
        return at::kBool;
    case DType::Complex64:
        return at::kComplexFloat;
    case DType::Complex128:
        return at::kComplexDouble;
    default:
        return std::nullopt;
    }
}

/// decoded by aten::toDoubles (element types ATen 1.13 lacks)
bool decodedType(DType d)
{
    switch (d) {
    case DType::Float8_e5m2:
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2fnuz:
    case DType::Float8_e4m3fnuz:
    case DType::Float8_e8m0fnu:
    case DType::UInt16:
    case DType::UInt32:
    case DType::UInt64:
    case DType::Complex32:
        return true;
    default:
        return false;
    }
}

/// Calls @p onBlock with each run of whole elements of the streamed bytes, as a 1-D float64 tensor.
class BlockConverter
{
public:
    BlockConverter(DType dtype, std::function<void(const at::Tensor&)> onBlock)
        : m_dtype(dtype)
        , m_elem(dtypeSize(dtype))
        , m_native(nativeType(dtype))
        , m_onBlock(std::move(onBlock))
    { }

    void feed(const uint8_t* data, size_t size)
    {
        // a block boundary inside an element (never for row blocks, but cheap to allow): complete it first
        if (!m_carry.empty()) {
            const size_t take = std::min(size, m_elem - m_carry.size());
            m_carry.insert(m_carry.end(), data, data + take);
            data += take;
            size -= take;
            if (m_carry.size() < m_elem) return;
            convert(m_carry.data(), 1);
            m_carry.clear();
        }
        const size_t whole = size / m_elem;
        if (whole) convert(data, static_cast<int64_t>(whole));
        m_carry.assign(data + whole * m_elem, data + size);
    }

private:
    void convert(const uint8_t* data, int64_t n)
    {
        if (m_native) {
            // read-only use: the bytes may be a PROT_READ mapping; every op below allocates its result
            at::Tensor raw = at::from_blob(const_cast<uint8_t*>(data), {n}, at::TensorOptions().dtype(*m_native));
            if (raw.is_complex()) raw = at::real(raw);
            m_onBlock(raw.to(at::kDouble));
            return;
        }
        std::vector<double> values = aten::toDoubles(data, m_dtype, n);
        m_onBlock(at::from_blob(values.data(), {n}, at::TensorOptions().dtype(at::kDouble)).clone());
    }

    DType m_dtype;
    size_t m_elem;
    std::optional<at::ScalarType> m_native;
    std::function<void(const at::Tensor&)> m_onBlock;
    std::vector<uint8_t> m_carry;
};

} // namespace

TensorStats computeTensorStats(
    const Checkpoint& checkpoint, const Entry& entry, size_t histogramBins, const Progress& progress)
{
    const std::string where = checkpoint.path + ": '" + entry.key + "'";
    if (!entry.isTensor()) throw Error(ErrorKind::Usage, where, "statistics need a tensor entry");
    const TensorEntry& t = entry.tensor;
    if (!nativeType(t.dtype) && !decodedType(t.dtype))
        throw Error(ErrorKind::Unsupported, where,
            "no statistics for dtype " + std::string(dtypeName(t.dtype)) + " (quantized or packed bits)");

    TensorStats s;
    s.dtype = t.dtype;
    s.numel = t.numel();
    s.complexRealPart = dtypeIsComplex(t.dtype);
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    s.min = s.max = s.mean = s.std = nan;
    if (s.numel == 0) return s;

    const bool histogram = histogramBins > 0;
    const double passes = histogram ? 2.0 : 1.0;
    const double totalBytes = static_cast<double>(std::max<uint64_t>(t.nbytes(), 1));
    at::NoGradGuard noGrad;

    // pass 1: counts, range and moments (mean and M2 merged per block)
    double mean = 0.0, m2 = 0.0, sumSquares = 0.0, sum = 0.0;
    double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
    int64_t n = 0;
    {
        BlockConverter conv(t.dtype, [&](const at::Tensor& x) {
            const at::Tensor finiteMask = at::isfinite(x);
            const int64_t blockFinite = finiteMask.sum().item<int64_t>();
            s.nanCount += at::isnan(x).sum().item<int64_t>();
            s.infCount += at::isinf(x).sum().item<int64_t>();
            s.zeroCount += x.eq(0).sum().item<int64_t>();
            if (blockFinite == 0) return;
            const at::Tensor f = blockFinite == x.numel() ? x : x.masked_select(finiteMask);
            lo = std::min(lo, f.min().item<double>());
            hi = std::max(hi, f.max().item<double>());
            const double blockSum = f.sum().item<double>();
            const double blockMean = blockSum / static_cast<double>(blockFinite);
            const double blockM2 = (f - blockMean).pow(2).sum().item<double>();
            sumSquares += f.pow(2).sum().item<double>();
            sum += blockSum;
            const int64_t merged = n + blockFinite;
            const double delta = blockMean - mean;
            mean += delta * static_cast<double>(blockFinite) / static_cast<double>(merged);
            m2 += blockM2
                + delta * delta * static_cast<double>(n) * static_cast<double>(blockFinite)
                    / static_cast<double>(merged);
            n = merged;
        });
        TensorAssembler(checkpoint, entry, 16u << 20)
            .stream([&](const uint8_t* p, size_t size) { conv.feed(p, size); }, progress,
                [&](uint64_t bytes) { progress(static_cast<double>(bytes) / totalBytes / passes, "statistics"); });
    }
    s.finite = n;
    if (n == 0) return s;
    s.min = lo;
    s.max = hi;
    s.sum = sum;
    s.mean = mean;
    s.std = n > 1 ? std::sqrt(m2 / static_cast<double>(n - 1)) : 0.0;
    s.l2Norm = std::sqrt(sumSquares);
    if (!histogram) return s;

    // pass 2: histogram of the finite values over the range found in pass 1
    const double histLo = lo == hi ? lo - 0.5 : lo;
    const double histHi = lo == hi ? hi + 0.5 : hi;
    const int64_t bins = static_cast<int64_t>(histogramBins);
    at::Tensor counts = at::zeros({bins}, at::TensorOptions().dtype(at::kDouble));
    {
        BlockConverter conv(t.dtype, [&](const at::Tensor& x) {
            const at::Tensor finiteMask = at::isfinite(x);
            const at::Tensor f = finiteMask.all().item<bool>() ? x : x.masked_select(finiteMask);
            if (f.numel() > 0) counts += at::histc(f, bins, histLo, histHi);
        });
        TensorAssembler(checkpoint, entry, 16u << 20)
            .stream([&](const uint8_t* p, size_t size) { conv.feed(p, size); }, progress,
                [&](uint64_t bytes) {
                    progress((1.0 + static_cast<double>(bytes) / totalBytes) / passes, "histogram");
                });
    }
    const at::Tensor edges = at::linspace(histLo, histHi, bins + 1, at::TensorOptions().dtype(at::kDouble));
    s.histogramEdges.assign(edges.data_ptr<double>(), edges.data_ptr<double>() + bins + 1);
    const at::Tensor counts64 = counts.round().to(at::kLong).contiguous();
    s.histogramCounts.assign(counts64.data_ptr<int64_t>(), counts64.data_ptr<int64_t>() + bins);
    progress(1.0, "histogram");
    return s;
}

} // namespace optscope
