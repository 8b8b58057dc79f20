// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: the fused comparison kernel behind diff.
//
// The ATen kernel (aten::diffBlock) expresses a block comparison as some twenty tensor ops, each a pass over the
// block with its own temporaries; on two 2 GB checkpoints that is slower than PyTorch's own max |a - b|. This kernel
// computes the same accumulator in one pass per block for the dtypes optimizer state is stored in (float32,
// float64, bfloat16, float16) and the integer ones (steps, quantized weights packed in uint8), both sides the same
// dtype, without libtorch. Sub-blocks that hold a NaN or an infinity
// take a scalar path with the ATen kernel's exact rules; aten::diffBlock stays the reference it is tested against
// and the path for every other dtype pair.

#include "optscope/tensor/aten_bridge.h"

namespace optscope::detail {

/// Whether diffBlockFused handles blocks of dtype @p a against dtype @p b.
bool fusedDiffSupports(DType a, DType b);

/// The instruction sets the kernel is built for (Avx2 only on x86-64 builds); the fastest available one is used.
enum class DiffKernelIsa { Baseline, Avx2 };
bool diffKernelAvailable(DiffKernelIsa isa);

/// Adds the comparison of @p n elements of @p a and @p b (both of @p dtype, dense little-endian) to @p acc, with the
/// semantics of aten::diffBlock: values computed in float32 (float64 for float64 and integers), bit-identical elements
/// equal, with a tolerance |a - b| <= atol + rtol * |b| equal, two NaNs equal, infinities equal when they match; max |a
/// - b|, max relative difference and the sum of squares over pairs where both are finite.
void diffBlockFused(
    const uint8_t* a, const uint8_t* b, DType dtype, int64_t n, double rtol, double atol, aten::DiffAccumulator& acc);
/// diffBlockFused with a given instruction set (tests compare each with the ATen kernel); it must be available
void diffBlockFusedWith(DiffKernelIsa isa, const uint8_t* a, const uint8_t* b, DType dtype, int64_t n, double rtol,
    double atol, aten::DiffAccumulator& acc);

/// one variant's entry point (diff_kernel_impl.h)
namespace baseline {
bool takesDtype(DType dtype); ///< the dtypes diffBlockFused takes (one list, in diff_kernel_impl.h)
void diffBlockFused(
    const uint8_t* a, const uint8_t* b, DType dtype, int64_t n, double rtol, double atol, aten::DiffAccumulator& acc);
} // namespace baseline
namespace avx2 {
bool takesDtype(DType dtype);
void diffBlockFused(
    const uint8_t* a, const uint8_t* b, DType dtype, int64_t n, double rtol, double atol, aten::DiffAccumulator& acc);
} // namespace avx2

} // namespace optscope::detail
