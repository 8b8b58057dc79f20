// SPDX-License-Identifier: GPL-3.0-or-later
// The numeric kernel of diff: ATen ops over blocks of two tensors (never whole tensors).
#include "optscope/aten/aten_impl.h"
#include "optscope/aten/aten_scalar_type.h"
#include "optscope/base/integer_difference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

namespace optscope::aten::impl {

namespace {

/// the block as a tensor of @p compute type; complex numbers as pairs of reals
at::Tensor values(const uint8_t* p, DType d, int64_t n, at::ScalarType compute, std::vector<double>& scratch)
{
    if (dtypeIsComplex(d)) {
        // interleaved (real, imag) of half the element size each
        const DType part = d == DType::Complex128 ? DType::Float64
            : d == DType::Complex64               ? DType::Float32
                                                  : DType::Float16;
        return values(p, part, 2 * n, compute, scratch);
    }
    if (auto st = realScalarType(d))
        return at::from_blob(const_cast<uint8_t*>(p), {n}, at::TensorOptions().dtype(*st)).to(compute);
    scratch = toDoubles(p, d, n); // float8 and uint16-64, which libtorch 1.13 lacks
    return at::from_blob(scratch.data(), {n}, at::TensorOptions().dtype(at::kDouble)).to(compute);
}

int64_t lanes(DType d, int64_t n)
{
    return dtypeIsComplex(d) ? 2 * n : n;
}

at::ScalarType computeType(DType a, DType b)
{
    const bool wide = a == DType::Float64 || b == DType::Float64 || a == DType::Complex128 || b == DType::Complex128
        || (!dtypeIsFloatingPoint(a) && !dtypeIsComplex(a)) || (!dtypeIsFloatingPoint(b) && !dtypeIsComplex(b));
    return wide ? at::kDouble : at::kFloat;
}

/// Bytes of elements that differ, for two blocks of the same dtype: the comparison without a tolerance
int64_t bitwiseDiffs(const uint8_t* a, const uint8_t* b, size_t elem, int64_t n)
{
    // the bytes of each element, as an integer of the element's size where one exists
    const at::ScalarType it = elem == 8 ? at::kLong : elem == 4 ? at::kInt : elem == 2 ? at::kShort : at::kByte;
    if (elem == 1 || elem == 2 || elem == 4 || elem == 8) {
        const at::Tensor x = at::from_blob(const_cast<uint8_t*>(a), {n}, at::TensorOptions().dtype(it));
        const at::Tensor y = at::from_blob(const_cast<uint8_t*>(b), {n}, at::TensorOptions().dtype(it));
        return x.ne(y).sum().item<int64_t>();
    }
    const auto e = static_cast<int64_t>(elem);
    const at::Tensor x = at::from_blob(const_cast<uint8_t*>(a), {n, e}, at::TensorOptions().dtype(at::kByte));
    const at::Tensor y = at::from_blob(const_cast<uint8_t*>(b), {n, e}, at::TensorOptions().dtype(at::kByte));
    return x.ne(y).any(1).sum().item<int64_t>();
}

/// max |a - b|, max |a - b| / |b| and the sum of squares of the differences @p d (zero where not @p both finite),
/// given |a - b| as @p ad and |b| as @p absB per element
void accumulateDifferences(
    const at::Tensor& d, const at::Tensor& ad, const at::Tensor& absB, const at::Tensor& both, DiffAccumulator& acc)
{
    acc.maxAbs = std::max(acc.maxAbs, ad.max().item<double>());
    const at::Tensor relOk = both.logical_and(absB.ne(0));
    if (relOk.any().item<bool>())
        acc.maxRel = std::max(acc.maxRel,
            (ad / absB.masked_fill(relOk.logical_not(), 1)).masked_fill(relOk.logical_not(), 0).max().item<double>());
    acc.sumSq += d.to(at::kDouble).square().sum().item<double>();
    acc.finitePairs += both.sum().item<int64_t>();
}

/// Complex blocks as torch compares complex tensors: A and B are [n, 2] (real, imaginary); |a - b| and |b| are
/// moduli, an element is NaN or infinite when either part is, and with a tolerance it is equal when torch.isclose
/// (equal_nan=True) says so: equal, both NaN, or a finite |a - b| <= atol + rtol * |b|. Taken part by part, max |a - b|
/// was the larger part's difference, and an element could pass the tolerance in each part but not as a whole.
void diffComplex(const at::Tensor& A, const at::Tensor& B, DType da, DType db, int64_t n, double rtol, double atol,
    bool exact, const uint8_t* a, const uint8_t* b, DiffAccumulator& acc)
{
    const at::Tensor nanA = at::isnan(A).any(1);
    const at::Tensor nanB = at::isnan(B).any(1);
    acc.nanA += nanA.sum().item<int64_t>();
    acc.nanB += nanB.sum().item<int64_t>();
    acc.infA += at::isinf(A).any(1).sum().item<int64_t>();
    acc.infB += at::isinf(B).any(1).sum().item<int64_t>();
    const at::Tensor both = at::isfinite(A).all(1).logical_and(at::isfinite(B).all(1));
    const at::Tensor d = (A - B).masked_fill(both.logical_not().unsqueeze(1), 0);
    const at::Tensor ad = at::hypot(d.select(1, 0), d.select(1, 1));
    const at::Tensor absB = at::hypot(B.select(1, 0), B.select(1, 1));
    accumulateDifferences(d, ad, absB, both, acc);
    if (da == db && exact) {
        acc.numDiff += bitwiseDiffs(a, b, dtypeSize(da), n);
        return;
    }
    const at::Tensor same = A.eq(B).all(1);
    const at::Tensor close = ad.le(atol + rtol * absB).logical_and(both);
    const at::Tensor ok = same.logical_or(nanA.logical_and(nanB)).logical_or(close);
    acc.numDiff += n - ok.sum().item<int64_t>();
}

/// two blocks of 64-bit integers, whose a - b is taken exactly (integerDifference), not as a difference of doubles
bool wideIntegers(DType da, DType db)
{
    return da == db && (da == DType::Int64 || da == DType::UInt64);
}

template<typename T> T load64(const uint8_t* p, int64_t i)
{
    T v;
    std::memcpy(&v, p + i * 8, 8);
    return v;
}

template<typename T>
void diffInt64(
    const uint8_t* a, const uint8_t* b, int64_t n, bool exact, double rtol, double atol, DiffAccumulator& acc)
{
    for (int64_t i = 0; i < n; ++i) {
        const T x = load64<T>(a, i), y = load64<T>(b, i);
        const double ad = std::fabs(integerDifference(x, y));
        const double absB = std::fabs(static_cast<double>(y));
        acc.maxAbs = std::max(acc.maxAbs, ad);
        if (y != 0) acc.maxRel = std::max(acc.maxRel, ad / absB);
        acc.sumSq += ad * ad;
        acc.numDiff += exact ? x != y : !(ad <= atol + rtol * absB);
    }
    acc.finitePairs += n;
}

} // namespace

void diffBlock(
    const uint8_t* a, DType da, const uint8_t* b, DType db, int64_t n, double rtol, double atol, DiffAccumulator& acc)
{
    if (n <= 0) return;
    acc.numel += n;
    const bool exact = rtol == 0.0 && atol == 0.0;
    if (wideIntegers(da, db)) {
        da == DType::Int64 ? diffInt64<int64_t>(a, b, n, exact, rtol, atol, acc)
                           : diffInt64<uint64_t>(a, b, n, exact, rtol, atol, acc);
        return;
    }
    const size_t elem = dtypeSize(da);
    std::vector<double> sa, sb;
    const at::ScalarType ct = computeType(da, db);
    at::Tensor A = values(a, da, n, ct, sa);
    at::Tensor B = values(b, db, n, ct, sb);
    if (lanes(da, n) != lanes(db, n)) {
        acc.numDiff += n;
        return;
    }
    if (dtypeIsComplex(da) || dtypeIsComplex(db)) {
        diffComplex(A.reshape({n, 2}), B.reshape({n, 2}), da, db, n, rtol, atol, exact, a, b, acc);
        return;
    }
    const at::Tensor finA = at::isfinite(A);
    const at::Tensor finB = at::isfinite(B);
    acc.nanA += at::isnan(A).sum().item<int64_t>();
    acc.nanB += at::isnan(B).sum().item<int64_t>();
    acc.infA += at::isinf(A).sum().item<int64_t>();
    acc.infB += at::isinf(B).sum().item<int64_t>();

    const at::Tensor both = finA.logical_and(finB);
    const at::Tensor d = (A - B).masked_fill(both.logical_not(), 0);
    const at::Tensor ad = d.abs();
    const at::Tensor absB = B.abs();
    accumulateDifferences(d, ad, absB, both, acc);

    int64_t diff = 0;
    if (da == db && exact) {
        diff = bitwiseDiffs(a, b, elem, n);
    } else {
        // numerically: within tolerance, or both NaN, or the same infinity
        const at::Tensor close = ad.le(atol + rtol * absB).logical_and(both);
        const at::Tensor nanPair = at::isnan(A).logical_and(at::isnan(B));
        const at::Tensor infPair = at::isinf(A).logical_and(A.eq(B));
        at::Tensor ok = close.logical_or(nanPair).logical_or(infPair);
        diff = n - ok.sum().item<int64_t>();
    }
    acc.numDiff += diff;
}

void diffHistogram(const uint8_t* a, DType da, const uint8_t* b, DType db, int64_t n, double lo, double hi,
    std::vector<int64_t>& counts)
{
    if (n <= 0 || counts.empty() || lanes(da, n) != lanes(db, n)) return;
    std::vector<double> sa, sb;
    at::Tensor d;
    if (wideIntegers(da, db)) { // as diffBlock takes them
        sa.resize(static_cast<size_t>(n));
        const auto fill = [&](auto width) {
            using T = decltype(width);
            for (int64_t i = 0; i < n; ++i)
                sa[static_cast<size_t>(i)] = integerDifference(load64<T>(a, i), load64<T>(b, i));
        };
        da == DType::Int64 ? fill(int64_t()) : fill(uint64_t());
        d = at::from_blob(sa.data(), {n}, at::TensorOptions().dtype(at::kDouble));
    } else {
        d = values(a, da, n, at::kDouble, sa) - values(b, db, n, at::kDouble, sb);
    }
    d = d.masked_select(at::isfinite(d));
    if (d.numel() == 0) return;
    if (hi <= lo) hi = lo + 1.0;
    // the range comes from max|a-b| taken in the compute dtype (float32 for float32 pairs), which can round below
    // the float64 difference of the same two values: clamp so that every finite difference lands in a bin
    d = d.clamp(lo, hi);
    const at::Tensor h = at::histc(d, static_cast<int64_t>(counts.size()), lo, hi);
    const at::Tensor hl = h.to(at::kLong).contiguous();
    const int64_t* p = hl.data_ptr<int64_t>();
    for (size_t i = 0; i < counts.size(); ++i)
        counts[i] += p[i];
}

} // namespace optscope::aten::impl
