// SPDX-License-Identifier: GPL-3.0-or-later
#define OPTSCOPE_DIFF_KERNEL_NS baseline
#include "optscope/analysis/diff_kernel_impl.h"

namespace optscope::detail {

bool fusedDiffSupports(DType a, DType b)
{
    return a == b && baseline::takesDtype(a);
}

bool diffKernelAvailable(DiffKernelIsa isa)
{
    if (isa == DiffKernelIsa::Baseline) return true;
#if defined(OPTSCOPE_DIFF_KERNEL_AVX2)
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

void diffBlockFusedWith(DiffKernelIsa isa, const uint8_t* a, const uint8_t* b, DType dtype, int64_t n, double rtol,
    double atol, aten::DiffAccumulator& acc)
{
    if (n <= 0) return;
#if defined(OPTSCOPE_DIFF_KERNEL_AVX2)
    if (isa == DiffKernelIsa::Avx2) {
        avx2::diffBlockFused(a, b, dtype, n, rtol, atol, acc);
        return;
    }
#endif
    (void)isa;
    baseline::diffBlockFused(a, b, dtype, n, rtol, atol, acc);
}

void diffBlockFused(
    const uint8_t* a, const uint8_t* b, DType dtype, int64_t n, double rtol, double atol, aten::DiffAccumulator& acc)
{
    static const DiffKernelIsa best
        = diffKernelAvailable(DiffKernelIsa::Avx2) ? DiffKernelIsa::Avx2 : DiffKernelIsa::Baseline;
    diffBlockFusedWith(best, a, b, dtype, n, rtol, atol, acc);
}

} // namespace optscope::detail
