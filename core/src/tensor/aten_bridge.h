// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal seam to ATen (libtorch's tensor library). The kernels behind these functions live in a shared library of
// their own, liboptscope_aten.so (aten_bridge.cpp, aten_diff.cpp, aten_stats_kernels.cpp: the only files that include
// torch headers), which the core loads on first use (aten_loader.cpp). libtorch's start-up (operator registration in
// hundreds of static initialisers, ~0.4 s) is then only paid by runs that need a tensor operation; reading,
// inspecting, hashing and streaming dim-0 shards never do. Everything else calls these functions with plain
// pointers and shapes.

#include "optscope/tensor/chunk_reader.h"

#include <cstdint>
#include <vector>

namespace optscope::aten {

/// Copies the block [srcBegin, srcBegin + extent) of a chunk (coordinates inside the chunk) into the dense
/// row-major array @p dst of shape @p dstShape at @p dstBegin, converting to little-endian. An at::Tensor view over
/// the mapped bytes (from_blob) is narrowed and copy_'d; element types are moved as bytes, so every dtype works.
void copyBlock(const ChunkData& src, const std::vector<int64_t>& srcBegin, const std::vector<int64_t>& extent,
    uint8_t* dst, const std::vector<int64_t>& dstShape, const std::vector<int64_t>& dstBegin);

} // namespace optscope::aten

namespace optscope::aten {

/// @p n elements of @p dtype at @p data (dense, little-endian) as doubles: ATen's to(kDouble) for the types it has
/// in every supported libtorch version, exact decoding for float8 and uint16-64 otherwise. Complex: the real part.
std::vector<double> toDoubles(const uint8_t* data, DType dtype, int64_t n);

} // namespace optscope::aten

namespace optscope::aten {

/// Running comparison of two tensors, block by block.
struct DiffAccumulator
{
    int64_t numel = 0;
    int64_t numDiff = 0; ///< bitwise (rtol = atol = 0) or outside the tolerance
    int64_t nanA = 0, nanB = 0, infA = 0, infB = 0;
    double maxAbs = 0.0; ///< over pairs where both are finite
    double maxRel = 0.0; ///< |a - b| / |b| over finite pairs with b != 0
    double sumSq = 0.0; ///< of (a - b) over finite pairs
    int64_t finitePairs = 0;
};

/// Compares @p n elements of @p a (dtype @p da) with @p n elements of @p b (dtype @p db), dense little-endian, with
/// ATen ops (values as float32, or float64 when either side is float64 or an integer type). Bit-identical elements
/// always count as equal (NaN == NaN with the same bits); with a tolerance, |a - b| <= atol + rtol * |b| is equal,
/// two NaNs are equal, infinities must match.
void diffBlock(
    const uint8_t* a, DType da, const uint8_t* b, DType db, int64_t n, double rtol, double atol, DiffAccumulator& acc);

/// Adds the finite differences (a - b) of the block to a histogram of @p counts.size() bins over [lo, hi].
void diffHistogram(const uint8_t* a, DType da, const uint8_t* b, DType db, int64_t n, double lo, double hi,
    std::vector<int64_t>& counts);

} // namespace optscope::aten

namespace optscope::aten {

/// Reductions of one block of elements (values as float64; complex: real parts), merged by the caller.
struct StatsBlock
{
    int64_t numel = 0;
    int64_t finite = 0;
    int64_t nan = 0;
    int64_t inf = 0;
    int64_t zero = 0;
    double min = 0.0, max = 0.0; ///< over finite elements (finite > 0)
    double sum = 0.0; ///< of finite elements
    double m2 = 0.0; ///< sum of squared deviations from the block's own mean, finite elements
    double sumSquares = 0.0;
};
StatsBlock statsBlock(const uint8_t* data, DType dtype, int64_t n);

/// Adds the block's finite values, multiplied by @p scale, to @p counts (histc over [lo, hi], counts.size() bins).
void statsHistogram(
    const uint8_t* data, DType dtype, int64_t n, double scale, double lo, double hi, std::vector<double>& counts);

/// at::linspace(lo, hi, n) (bin edges exactly as torch computes them)
std::vector<double> linspace(double lo, double hi, int64_t n);

/// true if statsBlock can reduce @p dtype (everything but quantized and packed-bit types)
bool statsSupported(DType dtype);

/// The function table liboptscope_aten.so exports (optscope_aten_ops_v1). The version changes with any signature.
struct Ops
{
    uint32_t abiVersion;
    void (*copyBlock)(const ChunkData&, const std::vector<int64_t>&, const std::vector<int64_t>&, uint8_t*,
        const std::vector<int64_t>&, const std::vector<int64_t>&);
    std::vector<double> (*toDoubles)(const uint8_t*, DType, int64_t);
    void (*diffBlock)(const uint8_t*, DType, const uint8_t*, DType, int64_t, double, double, DiffAccumulator&);
    void (*diffHistogram)(const uint8_t*, DType, const uint8_t*, DType, int64_t, double, double, std::vector<int64_t>&);
    StatsBlock (*statsBlock)(const uint8_t*, DType, int64_t);
    void (*statsHistogram)(const uint8_t*, DType, int64_t, double, double, double, std::vector<double>&);
    std::vector<double> (*linspace)(double, double, int64_t);
    bool (*statsSupported)(DType);
};
constexpr uint32_t kOpsAbiVersion = 1;

/// the loaded table; throws Error(Unsupported) naming what could not be loaded
const Ops& ops();

} // namespace optscope::aten
