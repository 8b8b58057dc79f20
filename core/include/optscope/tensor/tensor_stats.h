// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Summary statistics of one tensor entry, streamed block by block (never the whole tensor in memory), for the
// Tensor details view: range, moments, norm, special-value counts and a histogram.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace optscope {

/// NaN and infinities among elements, as torch.isnan / isposinf / isneginf count them (complex: of the real parts).
struct NonFiniteCounts
{
    int64_t numel = 0; ///< elements looked at
    int64_t nan = 0;
    int64_t posInf = 0;
    int64_t negInf = 0;
    bool any() const { return nan || posInf || negInf; }
    NonFiniteCounts& operator+=(const NonFiniteCounts& o)
    {
        numel += o.numel;
        nan += o.nan;
        posInf += o.posInf;
        negInf += o.negInf;
        return *this;
    }
};

/// The counts of @p n dense little-endian elements of @p dtype at @p data, without ATen (check reads every tensor
/// and must not load libtorch): the one rule for which values are NaN or ±inf, shared by the statistics and check.
/// Integer, bool, quantized and packed types count none.
NonFiniteCounts countNonFinite(const uint8_t* data, int64_t n, DType dtype);

/// true for the real floating types (float64/32/16, bfloat16, the float8s), the ones that hold NaN or ±inf
bool dtypeHasNonFinite(DType dtype);

struct TensorStats
{
    DType dtype = DType::Unknown;
    int64_t numel = 0; ///< elements in the tensor
    int64_t finite = 0; ///< elements that are neither NaN nor ±inf
    int64_t nanCount = 0;
    int64_t infCount = 0; ///< +inf and -inf
    int64_t posInfCount = 0;
    int64_t negInfCount = 0;
    int64_t zeroCount = 0; ///< elements equal to 0 (and -0)
    // over the finite elements only (NaN when there are none)
    double min = 0.0;
    double max = 0.0;
    double sum = 0.0;
    double mean = 0.0;
    double std = 0.0; ///< unbiased (N - 1), as torch.std(); 0 for a single element
    double l2Norm = 0.0; ///< sqrt(sum of squares)
    /// histogram of the finite elements: histogramCounts.size() bins over [min, max] (widened by 0.5 on each side
    /// when min == max); histogramEdges has one more element than histogramCounts. Empty when no bins were asked
    /// for or there is no finite element.
    std::vector<double> histogramEdges;
    std::vector<int64_t> histogramCounts;
    bool complexRealPart = false; ///< complex tensor: the statistics are of the real parts
};

/// Streams @p entry's tensor with TensorAssembler (two passes when @p histogramBins > 0: moments, then histogram)
/// and computes its statistics in float64 with ATen. Bool counts as 0/1, complex as the real part. Throws Error if
/// the entry is not a tensor, its data cannot be read, or @p progress asks to cancel.
TensorStats computeTensorStats(
    const Checkpoint& checkpoint, const Entry& entry, size_t histogramBins, const Progress& progress = {});

} // namespace optscope
