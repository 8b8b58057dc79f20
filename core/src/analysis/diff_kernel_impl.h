// SPDX-License-Identifier: GPL-3.0-or-later
// Internal: the fused diff kernel's loops, included once per instruction set (diff_kernel.cpp for the baseline,
// diff_kernel_avx2.cpp compiled with -mavx2) inside a namespace of its own. No FMA: a fused multiply-add would round
// atol + rtol * |b| differently from the ATen kernel this one is tested against. (No include guard: that is the
// point.)
#include "optscope/analysis/diff_kernel.h"
#include "optscope/base/integer_difference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace optscope::detail::OPTSCOPE_DIFF_KERNEL_NS {

namespace {

/// float16 -> float32, exact (a table: conversions are rare enough that 256 KiB once is the simple way)
const float* halfTable()
{
    static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t h = 0; h < 65536; ++h) {
            const uint32_t sign = (h & 0x8000u) << 16;
            const uint32_t exp = (h >> 10) & 0x1fu;
            const uint32_t man = h & 0x3ffu;
            uint32_t bits;
            if (exp == 0) {
                const float v = static_cast<float>(man) * 5.9604644775390625e-8f; // man * 2^-24: zero or subnormal
                std::memcpy(&bits, &v, 4);
                bits |= sign;
            } else if (exp == 31) {
                bits = sign | 0x7f800000u | (man << 13);
            } else {
                bits = sign | ((exp + 112) << 23) | (man << 13);
            }
            std::memcpy(&t[h], &bits, 4);
        }
        return t;
    }();
    return table.data();
}

struct Float32Traits
{
    using Bits = uint32_t;
    using Compute = float;
    static constexpr bool kSpecials = true; ///< NaN and infinities exist
    static constexpr Bits kExpMask = 0x7f800000u;
    static Compute value(Bits b, const float*)
    {
        float f;
        std::memcpy(&f, &b, 4);
        return f;
    }
};

struct Float64Traits
{
    using Bits = uint64_t;
    using Compute = double;
    static constexpr bool kSpecials = true;
    static constexpr Bits kExpMask = 0x7ff0000000000000ull;
    static Compute value(Bits b, const float*)
    {
        double f;
        std::memcpy(&f, &b, 8);
        return f;
    }
};

struct BFloat16Traits
{
    using Bits = uint16_t;
    using Compute = float;
    static constexpr bool kSpecials = true;
    static constexpr Bits kExpMask = 0x7f80u;
    static Compute value(Bits b, const float*)
    {
        const uint32_t w = static_cast<uint32_t>(b) << 16;
        float f;
        std::memcpy(&f, &w, 4);
        return f;
    }
};

struct Float16Traits
{
    using Bits = uint16_t;
    using Compute = float;
    static constexpr bool kSpecials = true;
    static constexpr Bits kExpMask = 0x7c00u;
    static Compute value(Bits b, const float* table) { return table[b]; }
};

/// An integer dtype: values taken as float64, as the ATen kernel takes them (int64 beyond 2^53 rounded to nearest
/// alike), but a - b taken exactly and rounded once (difference); no NaN or infinity, so no sub-block takes the slow
/// path.
template<typename I> struct IntTraits
{
    using Bits = std::make_unsigned_t<I>;
    using Compute = double;
    static constexpr bool kSpecials = false;
    static constexpr Bits kExpMask = 0;
    static Compute value(Bits b, const float*) { return static_cast<double>(static_cast<I>(b)); }
    static Compute difference(Bits ba, Bits bb) { return integerDifference(static_cast<I>(ba), static_cast<I>(bb)); }
};

/// a - b in the compute type: the values' difference for floating point (the traits with NaN and infinities), the
/// exact one for integers
template<typename T>
typename T::Compute differenceOf(typename T::Bits ba, typename T::Bits bb, typename T::Compute x, typename T::Compute y)
{
    if constexpr (T::kSpecials)
        return x - y;
    else
        return T::difference(ba, bb);
}

/// products below this are near the underflow range, where rounding is not bounded relatively
template<typename C> constexpr C kTinyProduct = std::numeric_limits<C>::min() * 4;

template<typename T> typename T::Bits load(const uint8_t* p, int64_t i)
{
    typename T::Bits b;
    std::memcpy(&b, p + static_cast<size_t>(i) * sizeof b, sizeof b);
    return b;
}

/// One sub-block that holds a NaN or an infinity: element by element, with aten::diffBlock's rules.
template<typename T>
void slowPath(const uint8_t* a, const uint8_t* b, int64_t begin, int64_t end, bool exact, typename T::Compute rtol,
    typename T::Compute atol, const float* table, aten::DiffAccumulator& acc)
{
    using C = typename T::Compute;
    for (int64_t i = begin; i < end; ++i) {
        const auto ba = load<T>(a, i), bb = load<T>(b, i);
        const C x = T::value(ba, table), y = T::value(bb, table);
        const bool fa = std::isfinite(x), fb = std::isfinite(y);
        acc.nanA += std::isnan(x);
        acc.nanB += std::isnan(y);
        acc.infA += std::isinf(x);
        acc.infB += std::isinf(y);
        bool close = false;
        if (fa && fb) {
            const C d = differenceOf<T>(ba, bb, x, y);
            const C ad = std::fabs(d);
            const C ab = std::fabs(y);
            acc.maxAbs = std::max(acc.maxAbs, static_cast<double>(ad));
            if (ab != 0) acc.maxRel = std::max(acc.maxRel, static_cast<double>(ad / ab));
            acc.sumSq += static_cast<double>(d) * static_cast<double>(d);
            ++acc.finitePairs;
            close = ad <= atol + rtol * ab;
        }
        if (exact)
            acc.numDiff += ba != bb;
        else
            acc.numDiff += !(close || (std::isnan(x) && std::isnan(y)) || (std::isinf(x) && x == y));
    }
}

template<typename T, bool Exact>
void fused(const uint8_t* a, const uint8_t* b, int64_t n, double rtolD, double atolD, aten::DiffAccumulator& acc)
{
    using C = typename T::Compute;
    using Bits = typename T::Bits;
    // ATen computes atol + rtol * |b| in the compute dtype
    const C rtol = static_cast<C>(rtolD), atol = static_cast<C>(atolD);
    const float* table = std::is_same_v<T, Float16Traits> ? halfTable() : nullptr;
    constexpr int64_t kSub = 2048;
    // seeded with the maxima so far: fewer elements pass the relative-difference filter below
    C maxAbs = static_cast<C>(acc.maxAbs), maxRel = static_cast<C>(acc.maxRel);
    double sumSq = 0;
    int64_t numDiff = 0, finite = 0;
    for (int64_t s = 0; s < n; s += kSub) {
        const int64_t e = std::min(n, s + kSub);
        Bits special = 0; // nonzero when the sub-block holds a NaN or an infinity
        if constexpr (T::kSpecials) {
#pragma omp simd reduction(| : special)
            for (int64_t i = s; i < e; ++i) {
                const Bits x = load<T>(a, i) & T::kExpMask, y = load<T>(b, i) & T::kExpMask;
                special |= static_cast<Bits>((x == T::kExpMask) | (y == T::kExpMask));
            }
        }
        if (special) {
            aten::DiffAccumulator part;
            slowPath<T>(a, b, s, e, Exact, rtol, atol, table, part);
            acc.nanA += part.nanA;
            acc.nanB += part.nanB;
            acc.infA += part.infA;
            acc.infB += part.infB;
            maxAbs = std::max(maxAbs, static_cast<C>(part.maxAbs));
            maxRel = std::max(maxRel, static_cast<C>(part.maxRel));
            sumSq += part.sumSq;
            numDiff += part.numDiff;
            finite += part.finitePairs;
            continue;
        }
        // max |a - b| / |b| without a division per element: an element can raise the maximum t only if
        // |a - b| > t * |b|; the product is taken with t shrunk by 2^-20 so that its rounding can only let more
        // elements through, and products near the underflow range always pass. Passing elements are divided below.
        const C shrunk = maxRel * (C(1) - C(1.0 / (1 << 20)));
        C mx = 0;
        double ss = 0;
        int64_t nd = 0;
        int relCandidates = 0;
#pragma omp simd reduction(max : mx) reduction(+ : ss, nd) reduction(| : relCandidates)
        for (int64_t i = s; i < e; ++i) {
            const Bits ba = load<T>(a, i), bb = load<T>(b, i);
            const C x = T::value(ba, table), y = T::value(bb, table);
            const C d = differenceOf<T>(ba, bb, x, y);
            const C ad = d < 0 ? -d : d;
            const C ab = y < 0 ? -y : y;
            mx = ad > mx ? ad : mx;
            const C bound = shrunk * ab;
            // (>=: a difference that overflows to inf against a bound that does too still raises the maximum to inf)
            relCandidates |= (ab != 0) & ((ad >= bound) | (bound < kTinyProduct<C>));
            ss += static_cast<double>(d) * static_cast<double>(d);
            if constexpr (Exact)
                nd += ba != bb;
            else
                nd += !(ad <= atol + rtol * ab);
        }
        if (relCandidates) {
            for (int64_t i = s; i < e; ++i) {
                const Bits ba = load<T>(a, i), bb = load<T>(b, i);
                const C x = T::value(ba, table), y = T::value(bb, table);
                const C ab = std::fabs(y);
                if (ab != 0) maxRel = std::max(maxRel, std::fabs(differenceOf<T>(ba, bb, x, y)) / ab);
            }
        }
        maxAbs = std::max(maxAbs, mx);
        sumSq += ss;
        numDiff += nd;
        finite += e - s;
    }
    acc.numel += n;
    acc.maxAbs = std::max(acc.maxAbs, static_cast<double>(maxAbs));
    acc.maxRel = std::max(acc.maxRel, static_cast<double>(maxRel));
    acc.sumSq += sumSq;
    acc.numDiff += numDiff;
    acc.finitePairs += finite;
}

template<typename T>
void dispatch(const uint8_t* a, const uint8_t* b, int64_t n, double rtol, double atol, aten::DiffAccumulator& acc)
{
    if (rtol == 0.0 && atol == 0.0)
        fused<T, true>(a, b, n, rtol, atol, acc);
    else
        fused<T, false>(a, b, n, rtol, atol, acc);
}

/// The one list of the dtypes the kernel takes: calls @p f with the traits of @p dtype (a value of that type) and
/// returns true, or returns false for a dtype it does not take (fusedDiffSupports asks the same list)
template<typename F> bool withTraits(DType dtype, F&& f)
{
    switch (dtype) {
    case DType::Float32:
        f(Float32Traits {});
        return true;
    case DType::Float64:
        f(Float64Traits {});
        return true;
    case DType::BFloat16:
        f(BFloat16Traits {});
        return true;
    case DType::Float16:
        f(Float16Traits {});
        return true;
    case DType::Int8:
        f(IntTraits<int8_t> {});
        return true;
    case DType::Int16:
        f(IntTraits<int16_t> {});
        return true;
    case DType::Int32:
        f(IntTraits<int32_t> {});
        return true;
    case DType::Int64:
        f(IntTraits<int64_t> {});
        return true;
    case DType::UInt8:
        f(IntTraits<uint8_t> {});
        return true;
    case DType::UInt16:
        f(IntTraits<uint16_t> {});
        return true;
    case DType::UInt32:
        f(IntTraits<uint32_t> {});
        return true;
    case DType::UInt64:
        f(IntTraits<uint64_t> {});
        return true;
    default:
        return false;
    }
}

} // namespace

bool takesDtype(DType dtype)
{
    return withTraits(dtype, [](auto) {});
}

void diffBlockFused(
    const uint8_t* a, const uint8_t* b, DType dtype, int64_t n, double rtol, double atol, aten::DiffAccumulator& acc)
{
    withTraits(dtype, [&](auto traits) { dispatch<decltype(traits)>(a, b, n, rtol, atol, acc); });
}

} // namespace optscope::detail::OPTSCOPE_DIFF_KERNEL_NS
