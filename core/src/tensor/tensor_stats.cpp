// SPDX-License-Identifier: GPL-3.0-or-later
// Tensor statistics over streamed blocks: each block is reduced by the ATen kernels (aten_stats_kernels.cpp, in
// liboptscope_aten.so); per-block moments are merged here with Chan et al.'s parallel variance formula.
#include "optscope/tensor_stats.h"
#include "aten_bridge.h"
#include "optscope/error.h"
#include "optscope/tensor_assembler.h"
#include "read_guard.h"

#include <cmath>
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
        if (!m_carry.empty()) {
            const size_t take = std::min(size, m_elem - m_carry.size());
            m_carry.insert(m_carry.end(), data, data + take);
            data += take;
            size -= take;
            if (m_carry.size() < m_elem) return;
            m_onBlock(m_carry.data(), 1);
            m_carry.clear();
        }
        const size_t whole = size / m_elem;
        if (whole) m_onBlock(data, static_cast<int64_t>(whole));
        m_carry.assign(data + whole * m_elem, data + size);
    }

private:
    size_t m_elem;
    std::function<void(const uint8_t*, int64_t)> m_onBlock;
    std::vector<uint8_t> m_carry;
};

} // namespace

static TensorStats computeTensorStatsUnguarded(
    const Checkpoint& checkpoint, const Entry& entry, size_t histogramBins, const Progress& progress)
{
    const std::string where = checkpoint.path + ": '" + entry.key + "'";
    if (!entry.isTensor()) throw Error(ErrorKind::Usage, where, "statistics need a tensor entry");
    const TensorEntry& t = entry.tensor;
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
            s.nanCount += b.nan;
            s.infCount += b.inf;
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

TensorStats computeTensorStats(
    const Checkpoint& checkpoint, const Entry& entry, size_t histogramBins, const Progress& progress)
{
    return readGuarded(
        {&checkpoint}, [&] { return computeTensorStatsUnguarded(checkpoint, entry, histogramBins, progress); });
}

} // namespace optscope
