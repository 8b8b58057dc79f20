// SPDX-License-Identifier: GPL-3.0-or-later
// Statistics kernels: one block of elements, wrapped with at::from_blob, converted to float64 and reduced with ATen
// ops (computeTensorStats in tensor_stats.cpp streams the blocks and merges the results).
#include "optscope/aten/aten_impl.h"
#include "optscope/aten/aten_scalar_type.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h> // NoGradGuard: libtorch 2.x no longer brings it in with ATen, nor an at:: alias

#include <cmath>
#include <limits>
#include <optional>

namespace optscope::aten::impl {

namespace {

/// ATen scalar types that from_blob + to(kDouble) handle in libtorch 1.13 and 2.x alike
std::optional<at::ScalarType> nativeType(DType d)
{
    if (d == DType::Complex64) return at::kComplexFloat;
    if (d == DType::Complex128) return at::kComplexDouble;
    return realScalarType(d);
}

/// dtypes toDoubles decodes by hand (libtorch 1.13 has no such type)
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

at::Tensor asDoubles(const uint8_t* data, DType dtype, int64_t n, std::vector<double>& scratch)
{
    if (auto st = nativeType(dtype)) {
        // read-only use: the bytes may be a PROT_READ mapping; every op below allocates its result
        at::Tensor raw = at::from_blob(const_cast<uint8_t*>(data), {n}, at::TensorOptions().dtype(*st));
        if (raw.is_complex()) raw = at::real(raw);
        return raw.to(at::kDouble);
    }
    scratch = toDoubles(data, dtype, n);
    return at::from_blob(scratch.data(), {n}, at::TensorOptions().dtype(at::kDouble));
}

} // namespace

bool statsSupported(DType dtype)
{
    return nativeType(dtype).has_value() || decodedType(dtype);
}

StatsBlock statsBlock(const uint8_t* data, DType dtype, int64_t n)
{
    c10::NoGradGuard noGrad;
    std::vector<double> scratch;
    const at::Tensor x = asDoubles(data, dtype, n, scratch);
    StatsBlock b;
    b.numel = n;
    const at::Tensor finiteMask = at::isfinite(x);
    b.finite = finiteMask.sum().item<int64_t>();
    b.nan = at::isnan(x).sum().item<int64_t>();
    b.inf = at::isinf(x).sum().item<int64_t>();
    b.zero = x.eq(0).sum().item<int64_t>();
    if (b.finite == 0) return b;
    const at::Tensor f = b.finite == x.numel() ? x : x.masked_select(finiteMask);
    b.min = f.min().item<double>();
    b.max = f.max().item<double>();
    b.sum = f.sum().item<double>();
    const double mean = b.sum / static_cast<double>(b.finite);
    b.m2 = (f - mean).pow(2).sum().item<double>();
    b.sumSquares = f.pow(2).sum().item<double>();
    return b;
}

void statsHistogram(
    const uint8_t* data, DType dtype, int64_t n, double scale, double lo, double hi, std::vector<double>& counts)
{
    c10::NoGradGuard noGrad;
    std::vector<double> scratch;
    const at::Tensor x = asDoubles(data, dtype, n, scratch);
    const at::Tensor finiteMask = at::isfinite(x);
    const at::Tensor f = finiteMask.all().item<bool>() ? x : x.masked_select(finiteMask);
    if (f.numel() == 0 || counts.empty()) return;
    const auto bins = static_cast<int64_t>(counts.size());
    const at::Tensor h = (scale == 1.0 ? at::histc(f, bins, lo, hi) : at::histc(f * scale, bins, lo, hi)).contiguous();
    const double* p = h.data_ptr<double>();
    for (size_t i = 0; i < counts.size(); ++i)
        counts[i] += p[i];
}

std::vector<double> linspace(double lo, double hi, int64_t n)
{
    const at::Tensor e = at::linspace(lo, hi, n, at::TensorOptions().dtype(at::kDouble)).contiguous();
    return {e.data_ptr<double>(), e.data_ptr<double>() + n};
}

} // namespace optscope::aten::impl
