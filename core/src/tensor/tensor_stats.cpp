// SPDX-License-Identifier: GPL-3.0-or-later
// Tensor statistics over streamed blocks: each block is reduced by the ATen kernels (aten_stats_kernels.cpp, in
// liboptscope_aten.so); per-block moments are merged here with Chan et al.'s parallel variance formula.
#include "optscope/tensor/tensor_stats.h"
#include "optscope/base/error.h"
#include "optscope/io/byte_source.h"
#include "optscope/model/element_decoder.h"
#include "optscope/model/read_guard.h"
#include "optscope/tensor/aten_bridge.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_values.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace optscope {

namespace {

/// Calls @p onBlock with each run of whole elements of the streamed bytes (a block boundary may split an element:
/// never for row blocks, but cheap to allow).
class ElementBlocks
{
public:
    ElementBlocks(size_t elementSize, std::function<void(const uint8_t*, int64_t)> onBlock)
        : m_elem(elementSize)
        , m_onBlock(std::move(onBlock))
    { }

    void feed(const uint8_t* data, size_t size)
    {
        if (m_carried) {
            const size_t take = std::min(size, m_elem - m_carried);
            std::memcpy(m_carry.data() + m_carried, data, take);
            m_carried += take;
            data += take;
            size -= take;
            if (m_carried < m_elem) return;
            m_onBlock(m_carry.data(), 1);
            m_carried = 0;
        }
        const size_t whole = size / m_elem;
        if (whole) m_onBlock(data, static_cast<int64_t>(whole));
        m_carried = size - whole * m_elem; // less than one element
        std::memcpy(m_carry.data(), data + whole * m_elem, m_carried);
    }

private:
    size_t m_elem; ///< at most 16 (complex128)
    std::function<void(const uint8_t*, int64_t)> m_onBlock;
    std::array<uint8_t, 16> m_carry {}; ///< the start of an element split by a block boundary
    size_t m_carried = 0;
};

/// IEEE binary formats of @p Bits wide words with @p Man mantissa bits: exponent all ones is inf (mantissa 0) or
/// NaN (float16, bfloat16, float32, float64 bit patterns, decoded as ElementDecoder does)
template<typename Word, int Man> void countIeee(const uint8_t* data, int64_t n, NonFiniteCounts& c)
{
    constexpr int bits = static_cast<int>(sizeof(Word) * 8);
    constexpr Word sign = Word(1) << (bits - 1);
    constexpr Word expMask = static_cast<Word>(~sign & ~((Word(1) << Man) - 1));
    constexpr Word manMask = (Word(1) << Man) - 1;
    int64_t nan = 0, pos = 0, neg = 0;
    for (int64_t i = 0; i < n; ++i) {
        Word w;
        std::memcpy(&w, data + static_cast<size_t>(i) * sizeof(Word), sizeof(Word));
        if ((w & expMask) != expMask) continue;
        if (w & manMask)
            ++nan;
        else if (w & sign)
            ++neg;
        else
            ++pos;
    }
    c.nan += nan;
    c.posInf += pos;
    c.negInf += neg;
}

} // namespace

bool dtypeHasNonFinite(DType dtype)
{
    return dtypeIsFloatingPoint(dtype); // every floating dtype has a NaN (float8 e4m3fn and e8m0fnu have no inf)
}

NonFiniteCounts countNonFinite(const uint8_t* data, int64_t n, DType dtype)
{
    NonFiniteCounts c;
    c.numel = n;
    switch (dtype) {
    case DType::Float64:
        countIeee<uint64_t, 52>(data, n, c);
        break;
    case DType::Float32:
        countIeee<uint32_t, 23>(data, n, c);
        break;
    case DType::Float16:
        countIeee<uint16_t, 10>(data, n, c);
        break;
    case DType::BFloat16:
        countIeee<uint16_t, 7>(data, n, c);
        break;
    case DType::Complex32:
    case DType::Complex64:
    case DType::Complex128:
    case DType::Float8_e5m2:
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2fnuz:
    case DType::Float8_e4m3fnuz:
    case DType::Float8_e8m0fnu: {
        // one byte each (complex: the real part, as the statistics take it): the decoder's own NaN and inf
        const size_t elem = dtypeSize(dtype);
        for (int64_t i = 0; i < n; ++i) {
            const double v = ElementDecoder::decode(data + static_cast<size_t>(i) * elem, dtype);
            if (std::isnan(v))
                ++c.nan;
            else if (std::isinf(v))
                ++(v > 0 ? c.posInf : c.negInf);
        }
        break;
    }
    default:
        break;
    }
    return c;
}

NonFiniteCounts countNonFinite(const ChunkData& d)
{
    NonFiniteCounts total;
    const int64_t n = d.numel();
    if (n <= 0 || (!dtypeHasNonFinite(d.dtype) && !dtypeIsComplex(d.dtype))) {
        total.numel = std::max<int64_t>(n, 0);
        return total;
    }
    const size_t elem = d.elementSize();
    if (d.isContiguous() && (!d.bigEndian || elem == 1)) {
        const uint64_t bytes = d.nbytes();
        const uint64_t block = std::max<uint64_t>((64u << 20) / elem, 1) * elem;
        const uint64_t fileOffset = d.owned ? 0 : d.file->offsetOf(d.data());
        for (uint64_t at = 0; at < bytes; at += block) {
            const uint64_t len = std::min(block, bytes - at);
            total += countNonFinite(d.data() + at, static_cast<int64_t>(len / elem), d.dtype);
            if (bytes > block && !d.owned) d.file->release(fileOffset + at, len);
        }
        return total;
    }
    // the dims that step through memory; a broadcast one (stride 0) repeats what the others hold
    std::vector<int64_t> sizes, strides;
    int64_t repeat = 1;
    for (size_t i = 0; i < d.sizes.size(); ++i) {
        if (d.sizes[i] == 1) continue;
        if (d.strides[i] == 0) {
            repeat *= d.sizes[i];
            continue;
        }
        sizes.push_back(d.sizes[i]);
        strides.push_back(d.strides[i]);
    }
    if (sizes.empty()) { // one element, repeated
        sizes.push_back(1);
        strides.push_back(1);
    }
    // an odometer over all but the last dim; the last in runs copied (byte-swapped when big-endian) into a buffer
    const size_t last = sizes.size() - 1;
    const int64_t run = std::min<int64_t>(sizes[last], 1 << 16);
    std::vector<uint8_t> buffer(static_cast<size_t>(run) * elem);
    std::vector<int64_t> index(sizes.size(), 0);
    NonFiniteCounts once;
    while (true) {
        int64_t base = d.storageOffset;
        for (size_t i = 0; i < last; ++i)
            base += index[i] * strides[i];
        for (int64_t j0 = 0; j0 < sizes[last]; j0 += run) {
            const int64_t count = std::min(run, sizes[last] - j0);
            for (int64_t j = 0; j < count; ++j) {
                const uint8_t* src = d.storage + static_cast<uint64_t>(base + (j0 + j) * strides[last]) * elem;
                uint8_t* dst = buffer.data() + static_cast<size_t>(j) * elem;
                if (!d.bigEndian || elem == 1) {
                    std::memcpy(dst, src, elem);
                } else if (dtypeIsComplex(d.dtype)) { // two floats, each swapped on its own
                    std::reverse_copy(src, src + elem / 2, dst);
                    std::reverse_copy(src + elem / 2, src + elem, dst + elem / 2);
                } else {
                    std::reverse_copy(src, src + elem, dst);
                }
            }
            once += countNonFinite(buffer.data(), count, d.dtype);
        }
        size_t i = last;
        while (i > 0 && ++index[i - 1] == sizes[i - 1])
            index[--i] = 0;
        if (i == 0) break;
    }
    total.numel = n;
    total.nan = once.nan * repeat;
    total.posInf = once.posInf * repeat;
    total.negInf = once.negInf * repeat;
    return total;
}

static TensorStats computeTensorStatsUnguarded(
    const Checkpoint& checkpoint, const Entry& entry, size_t histogramBins, const Progress& progress)
{
    const std::string where = checkpoint.path + ": '" + entry.key + "'";
    if (!entry.isTensor()) throw Error(ErrorKind::Usage, where, "statistics need a tensor entry");
    const TensorEntry& t = *entry.tensor;
    if (!aten::statsSupported(t.dtype))
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
    const size_t elem = dtypeSize(t.dtype);

    // pass 1: counts, range and moments (mean and M2 merged per block)
    double mean = 0.0, m2 = 0.0, sumSquares = 0.0, sum = 0.0;
    double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
    int64_t n = 0;
    {
        ElementBlocks blocks(elem, [&](const uint8_t* p, int64_t count) {
            const aten::StatsBlock b = aten::statsBlock(p, t.dtype, count);
            // NaN and inf by the rule check uses too (the same as ATen's isnan and isinf of the values as doubles)
            const NonFiniteCounts nf = countNonFinite(p, count, t.dtype);
            s.nanCount += nf.nan;
            s.posInfCount += nf.posInf;
            s.negInfCount += nf.negInf;
            s.infCount += nf.posInf + nf.negInf;
            s.zeroCount += b.zero;
            if (b.finite == 0) return;
            lo = std::min(lo, b.min);
            hi = std::max(hi, b.max);
            const double blockMean = b.sum / static_cast<double>(b.finite);
            sumSquares += b.sumSquares;
            sum += b.sum;
            const int64_t merged = n + b.finite;
            const double delta = blockMean - mean;
            mean += delta * static_cast<double>(b.finite) / static_cast<double>(merged);
            m2 += b.m2
                + delta * delta * static_cast<double>(n) * static_cast<double>(b.finite) / static_cast<double>(merged);
            n = merged;
        });
        TensorAssembler(checkpoint, entry, 16u << 20)
            .stream([&](const uint8_t* p, size_t size) { blocks.feed(p, size); }, progress,
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
    double histLo = lo == hi ? lo - 0.5 : lo;
    double histHi = lo == hi ? hi + 0.5 : hi;
    if (!(histLo < histHi)) {
        // |lo| >= 2^53: 0.5 is below the precision, widen by one step of the representation instead
        histLo = std::nextafter(lo, -std::numeric_limits<double>::infinity());
        histHi = std::nextafter(hi, std::numeric_limits<double>::infinity());
        if (!std::isfinite(histLo)) histLo = lo;
        if (!std::isfinite(histHi)) histHi = hi;
    }
    const auto bins = static_cast<int64_t>(histogramBins);
    // histc computes (x - lo) * bins / (hi - lo): a range near the largest doubles overflows to inf (and NaN, an
    // out-of-range bin index inside ATen); scaling everything by a power of two keeps every bin exactly the same
    double scale = 1.0;
    while (!std::isfinite((histHi * scale - histLo * scale) * static_cast<double>(bins)))
        scale *= 0.5;
    std::vector<double> counts(histogramBins, 0.0);
    {
        ElementBlocks blocks(elem, [&](const uint8_t* p, int64_t count) {
            aten::statsHistogram(p, t.dtype, count, scale, histLo * scale, histHi * scale, counts);
        });
        TensorAssembler(checkpoint, entry, 16u << 20)
            .stream([&](const uint8_t* p, size_t size) { blocks.feed(p, size); }, progress,
                [&](uint64_t bytes) {
                    progress((1.0 + static_cast<double>(bytes) / totalBytes) / passes, "histogram");
                });
    }
    s.histogramEdges = aten::linspace(histLo * scale, histHi * scale, bins + 1);
    for (double& e : s.histogramEdges)
        e /= scale;
    s.histogramCounts.reserve(counts.size());
    for (double c : counts)
        s.histogramCounts.push_back(static_cast<int64_t>(std::llround(c)));
    progress(1.0, "histogram");
    return s;
}

/// the statistics of @p once's elements each repeated @p repeats times (a broadcast view's, from its storage's)
static TensorStats repeated(TensorStats once, int64_t repeats)
{
    TensorStats s = std::move(once);
    const auto k = static_cast<double>(repeats);
    const int64_t finiteOnce = s.finite;
    for (int64_t* count : {&s.numel, &s.finite, &s.nanCount, &s.infCount, &s.posInfCount, &s.negInfCount, &s.zeroCount})
        *count *= repeats; // at most the view's numel, which fits
    for (int64_t& c : s.histogramCounts)
        c *= repeats;
    s.sum *= k;
    s.l2Norm *= std::sqrt(k);
    // the squared deviations repeat too: M2 = k * M2(once), over N - 1 = k * n - 1
    const double m2 = finiteOnce > 1 ? s.std * s.std * static_cast<double>(finiteOnce - 1) : 0.0;
    if (s.finite > 1) s.std = std::sqrt(m2 * k / static_cast<double>(s.finite - 1));
    return s;
}

TensorStats computeTensorStats(
    const Checkpoint& checkpoint, const Entry& entry, size_t histogramBins, const Progress& progress)
{
    return readGuarded({&checkpoint}, [&] {
        if (const auto view = broadcastStorageOf(entry))
            return repeated(
                computeTensorStatsUnguarded(checkpoint, view->stored, histogramBins, progress), view->repeats);
        return computeTensorStatsUnguarded(checkpoint, entry, histogramBins, progress);
    });
}

} // namespace optscope
