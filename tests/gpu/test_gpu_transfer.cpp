// SPDX-License-Identifier: GPL-3.0-or-later
// The transfer layer under the GPU paths against plain host memory: the copy lanes deliver every byte where it was
// asked (pieces, unaligned ends, many small copies, one lane and many), and the device compare counts exactly the
// elements the host counts. Runs where a CUDA device exists; elsewhere every test is SKIPPED.
#include "optscope/gpu/cuda_backend.h"
#include "optscope/gpu/gpu_devices.h"

#include <cstring>
#include <gtest/gtest.h>
#include <random>
#include <vector>

using namespace optscope;

namespace {

class GpuTransfer : public ::testing::Test
{
protected:
    void SetUp() override
    {
        const GpuInfo info = queryGpus();
        if (!info.compiledWithCuda || info.devices.empty()) GTEST_SKIP() << "no CUDA device: " << info.status;
    }
};

std::vector<uint8_t> randomBytes(size_t n, unsigned seed)
{
    std::mt19937_64 g(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v)
        b = static_cast<uint8_t>(g());
    return v;
}

TEST_F(GpuTransfer, LanesDeliverEveryByteInPlace)
{
    // 3 pieces and an unaligned end, then 1,000 small copies at odd offsets into the same buffer
    const size_t n = (8u << 20) * 3 + 12345;
    const auto host = randomBytes(n, 1);
    for (int lanes : {1, 3, 8}) {
        SCOPED_TRACE(lanes);
        void* dev = cuda::deviceAlloc(n);
        {
            cuda::HostToDevice up(0, lanes);
            EXPECT_EQ(up.lanes(), lanes);
            up.copy(dev, host.data(), n / 2);
            up.copy(static_cast<char*>(dev) + n / 2, host.data() + n / 2, n - n / 2);
            up.finish();
        }
        std::vector<uint8_t> back(n);
        cuda::copyToHost(back.data(), dev, n);
        EXPECT_TRUE(back == host);

        const auto small = randomBytes(1000 * 37, 2);
        {
            cuda::HostToDevice up(0, lanes);
            for (size_t i = 0; i < 1000; ++i)
                up.copy(static_cast<char*>(dev) + 1 + i * 37, small.data() + i * 37, 37);
            up.finish();
        }
        cuda::copyToHost(back.data(), dev, n);
        EXPECT_EQ(back[0], host[0]);
        EXPECT_EQ(0, std::memcmp(back.data() + 1, small.data(), small.size()));
        EXPECT_EQ(0, std::memcmp(back.data() + 1 + small.size(), host.data() + 1 + small.size(), n - 1 - small.size()));
        cuda::deviceFree(dev);
    }
}

TEST_F(GpuTransfer, CompareCountsWhatTheHostCounts)
{
    const size_t n = (1u << 20) * 16 + 40; // whole vectors and a tail
    auto a = randomBytes(n, 3);
    auto b = a;
    std::mt19937_64 g(4);
    for (int i = 0; i < 5000; ++i)
        b[g() % n] ^= static_cast<uint8_t>(1u << (g() % 8));
    b[0] ^= 1; // the first and the last byte too
    b[n - 1] ^= 0x80;
    void* da = cuda::deviceAlloc(n);
    void* db = cuda::deviceAlloc(n);
    {
        cuda::HostToDevice up(0);
        up.copy(da, a.data(), n);
        up.copy(db, b.data(), n);
        up.finish();
    }
    for (size_t e : {1, 2, 4, 8, 16}) {
        SCOPED_TRACE(e);
        const size_t bytes = n / e * e;
        uint64_t expected = 0;
        for (size_t i = 0; i < bytes; i += e)
            expected += std::memcmp(a.data() + i, b.data() + i, e) != 0;
        EXPECT_EQ(cuda::countDifferentElements(da, db, bytes, e), expected);
        // unaligned starts take the element-by-element path
        const size_t ub = (bytes - e) / e * e;
        uint64_t expectedUnaligned = 0;
        for (size_t i = 0; i < ub; i += e)
            expectedUnaligned += std::memcmp(a.data() + e + i, b.data() + e + i, e) != 0;
        if (e < 16) {
            EXPECT_EQ(cuda::countDifferentElements(static_cast<char*>(da) + e, static_cast<char*>(db) + e, ub, e),
                expectedUnaligned);
        }
    }
    EXPECT_EQ(cuda::countDifferentElements(da, da, n, 1), 0u);
    cuda::deviceFree(da);
    cuda::deviceFree(db);
}

} // namespace
