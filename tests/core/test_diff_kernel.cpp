// SPDX-License-Identifier: GPL-3.0-or-later
// The fused diff kernel against the ATen kernel it replaces on the hot path: the same accumulator, field by field,
// for every dtype it handles, with and without a tolerance, over data that exercises its fast path (finite
// sub-blocks) and its exact path (NaN, infinities), zeros, signed zeros, subnormals and float32 overflow of a - b.
#include "optscope/analysis/diff_kernel.h"
#include "optscope/tensor/aten_bridge.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <limits>
#include <random>

using namespace optscope;

namespace {

/// raw little-endian elements of one dtype, made from doubles
std::vector<uint8_t> encode(const std::vector<double>& v, DType d)
{
    std::vector<uint8_t> out(v.size() * dtypeSize(d));
    for (size_t i = 0; i < v.size(); ++i) {
        uint8_t* p = out.data() + i * dtypeSize(d);
        if (d == DType::Float64) {
            std::memcpy(p, &v[i], 8);
            continue;
        }
        const float f = static_cast<float>(v[i]);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        if (d == DType::Float32) {
            std::memcpy(p, &bits, 4);
        } else if (d == DType::BFloat16) {
            const uint16_t h = static_cast<uint16_t>(bits >> 16); // truncation is fine: any bf16 value will do
            std::memcpy(p, &h, 2);
        } else { // float16, through the same float: round toward zero on the mantissa, saturate to inf
            const uint32_t sign = (bits >> 16) & 0x8000u;
            const int exp = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
            uint16_t h;
            if (std::isnan(f))
                h = static_cast<uint16_t>(sign | 0x7e00u);
            else if (exp >= 31)
                h = static_cast<uint16_t>(sign | 0x7c00u);
            else if (exp <= 0)
                h = static_cast<uint16_t>(sign | (exp < -10 ? 0 : ((bits & 0x7fffffu) | 0x800000u) >> (14 - exp)));
            else
                h = static_cast<uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3ffu));
            std::memcpy(p, &h, 2);
        }
    }
    return out;
}

struct Data
{
    std::vector<double> a, b;
};

/// b is a nearby a, with the special cases placed in some sub-blocks (2048 elements) and not in others
Data makeData(size_t n, unsigned seed, bool specials)
{
    std::mt19937 g(seed);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    Data d;
    d.a.resize(n);
    d.b.resize(n);
    for (size_t i = 0; i < n; ++i) {
        d.a[i] = normal(g);
        const double r = unit(g);
        if (r < 0.2)
            d.b[i] = d.a[i]; // equal
        else if (r < 0.25)
            d.b[i] = 0.0; // b == 0: no relative difference
        else if (r < 0.3)
            d.b[i] = d.a[i] * 1e-3; // large relative differences
        else
            d.b[i] = d.a[i] + 1e-3 * normal(g);
    }
    d.a[7] = 0.0;
    d.b[7] = -0.0; // equal numerically, not bitwise
    d.a[9] = 1e-40; // subnormal in float32
    d.b[9] = 3e-41;
    if (specials) {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        const double inf = std::numeric_limits<double>::infinity();
        // all in the second sub-block, plus one lone NaN far away
        d.a[2100] = nan;
        d.b[2101] = nan;
        d.a[2102] = nan;
        d.b[2102] = nan;
        d.a[2103] = inf;
        d.b[2103] = inf;
        d.a[2104] = inf;
        d.b[2104] = -inf;
        d.a[2105] = -inf;
        d.b[2106] = inf;
        d.a[n - 3] = nan;
        // finite values whose float32 difference overflows
        d.a[2107] = 3e38;
        d.b[2107] = -3e38;
    }
    return d;
}

void expectSame(const aten::DiffAccumulator& fused, const aten::DiffAccumulator& ref, const std::string& what)
{
    EXPECT_EQ(fused.numel, ref.numel) << what;
    EXPECT_EQ(fused.numDiff, ref.numDiff) << what;
    EXPECT_EQ(fused.nanA, ref.nanA) << what;
    EXPECT_EQ(fused.nanB, ref.nanB) << what;
    EXPECT_EQ(fused.infA, ref.infA) << what;
    EXPECT_EQ(fused.infB, ref.infB) << what;
    EXPECT_EQ(fused.finitePairs, ref.finitePairs) << what;
    EXPECT_EQ(fused.maxAbs, ref.maxAbs) << what;
    EXPECT_EQ(fused.maxRel, ref.maxRel) << what;
    if (std::isinf(ref.sumSq))
        EXPECT_EQ(fused.sumSq, ref.sumSq) << what;
    else // the summation order differs
        EXPECT_NEAR(fused.sumSq, ref.sumSq, 1e-12 * std::max(1.0, ref.sumSq)) << what;
}

} // namespace

TEST(DiffKernel, MatchesTheAtenKernelForEveryDtypeToleranceAndInstructionSet)
{
    int variants = 0;
    for (auto isa : {detail::DiffKernelIsa::Baseline, detail::DiffKernelIsa::Avx2}) {
        if (!detail::diffKernelAvailable(isa)) continue;
        ++variants;
        for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
            ASSERT_TRUE(detail::fusedDiffSupports(dt, dt));
            for (bool specials : {false, true}) {
                const Data d = makeData(10007, 42 + static_cast<unsigned>(dt), specials);
                const auto a = encode(d.a, dt), b = encode(d.b, dt);
                for (auto [rtol, atol] : {std::pair {0.0, 0.0}, std::pair {1e-3, 1e-5}, std::pair {0.5, 0.0}}) {
                    const std::string what = std::string(dtypeName(dt)) + (specials ? " with NaN/inf" : "") + " rtol "
                        + std::to_string(rtol) + " atol " + std::to_string(atol) + " isa "
                        + std::to_string(static_cast<int>(isa));
                    // in several blocks, as diff feeds them: the accumulator carries over
                    aten::DiffAccumulator fused, ref;
                    const size_t elem = dtypeSize(dt);
                    for (size_t s = 0; s < d.a.size(); s += 4000) {
                        const int64_t n = static_cast<int64_t>(std::min<size_t>(4000, d.a.size() - s));
                        detail::diffBlockFusedWith(
                            isa, a.data() + s * elem, b.data() + s * elem, dt, n, rtol, atol, fused);
                        aten::diffBlock(a.data() + s * elem, dt, b.data() + s * elem, dt, n, rtol, atol, ref);
                    }
                    expectSame(fused, ref, what);
                    EXPECT_GT(ref.numDiff, 0) << what; // the data must differ for the comparison to mean anything
                    if (specials) {
                        EXPECT_GT(ref.nanA, 0) << what;
                        EXPECT_GT(ref.infB, 0) << what;
                    }
                }
            }
        }
    }
    EXPECT_GE(variants, 1);
}

TEST(DiffKernel, TheRelativeDifferenceFilterMissesNoMaximum)
{
    // relative differences that keep growing, one new maximum per element, across sub-blocks and down into
    // subnormal |b|: every one must be seen
    for (DType dt : {DType::Float32, DType::Float64}) {
        std::vector<double> a(9000), b(9000);
        for (size_t i = 0; i < a.size(); ++i) {
            b[i] = std::ldexp(1.0, -static_cast<int>(i % 150)) * (i % 2 ? -1 : 1);
            a[i] = b[i] * (1.0 + 1e-4 * static_cast<double>(i + 1));
        }
        const auto x = encode(a, dt), y = encode(b, dt);
        aten::DiffAccumulator fused, ref;
        detail::diffBlockFused(x.data(), y.data(), dt, static_cast<int64_t>(a.size()), 0, 0, fused);
        aten::diffBlock(x.data(), dt, y.data(), dt, static_cast<int64_t>(a.size()), 0, 0, ref);
        expectSame(fused, ref, std::string(dtypeName(dt)));
        EXPECT_GT(ref.maxRel, 0.8);
    }
    // a rounding corner (found by search): the maximum t = 0x1.e1439p-2 comes from the first sub-block; in the second,
    // |a - b| / |b| rounds to the next float above t while float32 t * |b| rounds up to |a - b| itself, so an
    // unshrunk filter |a - b| > t * |b| would let the new maximum slip through
    std::vector<float> a(4096, 1.0f), b(4096, 1.0f);
    a[0] = 0x1.7850e4p+0f;
    a[2048] = 0x1.a20cbap+0f;
    b[2048] = 0x1.1c63fep+0f;
    aten::DiffAccumulator fused, ref;
    const auto* x = reinterpret_cast<const uint8_t*>(a.data());
    const auto* y = reinterpret_cast<const uint8_t*>(b.data());
    detail::diffBlockFused(x, y, DType::Float32, 4096, 0, 0, fused);
    aten::diffBlock(x, DType::Float32, y, DType::Float32, 4096, 0, 0, ref);
    EXPECT_EQ(ref.maxRel, static_cast<double>(0x1.e14392p-2f));
    expectSame(fused, ref, "rounding corner");
    // a relative difference of 1e30 in one sub-block, then a pair whose float32 difference overflows (3e38 - -3e38):
    // the filter's bound 1e30 * 3e38 is inf as well, and inf > inf let the pair slip (auto said 1e30, aten inf)
    std::vector<float> p(4096, 1.0f), q(4096, 1.0f);
    p[5] = 1e30f;
    p[2100] = 3e38f;
    q[2100] = -3e38f;
    for (auto isa : {detail::DiffKernelIsa::Baseline, detail::DiffKernelIsa::Avx2}) {
        if (!detail::diffKernelAvailable(isa)) continue;
        aten::DiffAccumulator f, r;
        detail::diffBlockFusedWith(isa, reinterpret_cast<const uint8_t*>(p.data()),
            reinterpret_cast<const uint8_t*>(q.data()), DType::Float32, 4096, 0, 0, f);
        aten::diffBlock(reinterpret_cast<const uint8_t*>(p.data()), DType::Float32,
            reinterpret_cast<const uint8_t*>(q.data()), DType::Float32, 4096, 0, 0, r);
        EXPECT_TRUE(std::isinf(r.maxRel));
        expectSame(f, r, "an overflowing difference after a large relative one");
    }
}

namespace {

/// integers of every width, near each other and at the extremes: int64 beyond 2^53 (rounded as float64 alike), the
/// most negative value, zeros, equal pairs
template<typename I> std::vector<uint8_t> intBlock(size_t n, unsigned seed, bool second)
{
    std::mt19937_64 g(seed);
    std::vector<uint8_t> out(n * sizeof(I));
    for (size_t i = 0; i < n; ++i) {
        const uint64_t r = g();
        I v = static_cast<I>(r >> 3);
        if (second && r % 5 == 0) v = static_cast<I>(v + static_cast<I>(1 + r % 7)); // near
        if (second && r % 11 == 0) v = 0;
        if (i % 997 == 0) v = std::numeric_limits<I>::min();
        if (i % 1009 == 0) v = std::numeric_limits<I>::max();
        if (second && i % 1013 == 0) v = static_cast<I>(std::numeric_limits<I>::max() - 1);
        std::memcpy(out.data() + i * sizeof(I), &v, sizeof(I));
    }
    return out;
}

template<typename I> void expectIntMatches(DType dt, detail::DiffKernelIsa isa)
{
    const size_t n = 10007;
    // the second block is the first with changes: same seed, so most elements are equal
    const auto a = intBlock<I>(n, 7, false), b = intBlock<I>(n, 7, true);
    for (auto [rtol, atol] : {std::pair {0.0, 0.0}, std::pair {1e-3, 2.0}, std::pair {0.5, 0.0}}) {
        const std::string what = std::string(dtypeName(dt)) + " rtol " + std::to_string(rtol) + " atol "
            + std::to_string(atol) + " isa " + std::to_string(static_cast<int>(isa));
        aten::DiffAccumulator fused, ref;
        for (size_t s = 0; s < n; s += 4000) {
            const int64_t k = static_cast<int64_t>(std::min<size_t>(4000, n - s));
            detail::diffBlockFusedWith(
                isa, a.data() + s * sizeof(I), b.data() + s * sizeof(I), dt, k, rtol, atol, fused);
            aten::diffBlock(a.data() + s * sizeof(I), dt, b.data() + s * sizeof(I), dt, k, rtol, atol, ref);
        }
        expectSame(fused, ref, what);
        EXPECT_GT(ref.numDiff, 0) << what;
        EXPECT_LT(ref.numDiff, static_cast<int64_t>(n)) << what;
    }
}

} // namespace

TEST(DiffKernel, IntegersMatchTheAtenKernel)
{
    for (auto isa : {detail::DiffKernelIsa::Baseline, detail::DiffKernelIsa::Avx2}) {
        if (!detail::diffKernelAvailable(isa)) continue;
        for (DType dt : {DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8, DType::UInt16,
                 DType::UInt32, DType::UInt64})
            ASSERT_TRUE(detail::fusedDiffSupports(dt, dt)) << dtypeName(dt);
        expectIntMatches<int8_t>(DType::Int8, isa);
        expectIntMatches<int16_t>(DType::Int16, isa);
        expectIntMatches<int32_t>(DType::Int32, isa);
        expectIntMatches<int64_t>(DType::Int64, isa);
        expectIntMatches<uint8_t>(DType::UInt8, isa);
        expectIntMatches<uint16_t>(DType::UInt16, isa);
        expectIntMatches<uint32_t>(DType::UInt32, isa);
        expectIntMatches<uint64_t>(DType::UInt64, isa);
    }
    EXPECT_FALSE(detail::fusedDiffSupports(DType::Int32, DType::Int64));
    EXPECT_FALSE(detail::fusedDiffSupports(DType::Bool, DType::Bool));
}

// 64-bit integers past 2^53 that differ by little: as a difference of doubles 2^63 - 1 and 2^63 - 2 were the same
// number (a diff said "1 of 2 elements differ" with max |a - b| = 0); |a - b| is exact, then rounded once
TEST(DiffKernel, WideIntegersDifferExactly)
{
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
    const std::vector<int64_t> a {kMax, 5, kMin, (int64_t(1) << 62) + 1}, b {kMax - 1, 5, kMax, int64_t(1) << 62};
    const std::vector<uint64_t> ua {~uint64_t(0), 3}, ub {~uint64_t(0) - 3, 3};
    for (auto isa : {detail::DiffKernelIsa::Baseline, detail::DiffKernelIsa::Avx2}) {
        if (!detail::diffKernelAvailable(isa)) continue;
        for (const bool both : {false, true}) { // the first two elements alone, then all four
            const int64_t n = both ? 4 : 2;
            aten::DiffAccumulator fused, ref;
            const auto* x = reinterpret_cast<const uint8_t*>(a.data());
            const auto* y = reinterpret_cast<const uint8_t*>(b.data());
            detail::diffBlockFusedWith(isa, x, y, DType::Int64, n, 0, 0, fused);
            aten::diffBlock(x, DType::Int64, y, DType::Int64, n, 0, 0, ref);
            expectSame(fused, ref, "int64");
            EXPECT_EQ(ref.numDiff, both ? 3 : 1);
            EXPECT_EQ(ref.maxAbs, both ? 18446744073709551615.0 : 1.0); // |kMin - kMax| = 2^64 - 1, rounded
        }
        // the histogram of a - b takes them so too: 1 and 0 (as doubles, 0 twice)
        std::vector<int64_t> counts(3, 0);
        aten::diffHistogram(reinterpret_cast<const uint8_t*>(a.data()), DType::Int64,
            reinterpret_cast<const uint8_t*>(b.data()), DType::Int64, 2, -1.5, 1.5, counts);
        EXPECT_EQ(counts, (std::vector<int64_t> {0, 1, 1}));
        aten::DiffAccumulator fused, ref;
        const auto* x = reinterpret_cast<const uint8_t*>(ua.data());
        const auto* y = reinterpret_cast<const uint8_t*>(ub.data());
        detail::diffBlockFusedWith(isa, x, y, DType::UInt64, 2, 0, 0, fused);
        aten::diffBlock(x, DType::UInt64, y, DType::UInt64, 2, 0, 0, ref);
        expectSame(fused, ref, "uint64");
        EXPECT_EQ(ref.maxAbs, 3.0);
        EXPECT_EQ(ref.sumSq, 9.0);
    }
}
