// SPDX-License-Identifier: GPL-3.0-or-later
// GPU verify-by-load against the CPU oracle: the shards each rank loads are all-gathered on the GPUs (NCCL with
// several) instead of concatenated on the host; both reports must agree entry by entry and rank by rank, and both
// must find the resharded copy bit-identical. Runs where a CUDA device exists; elsewhere every test is SKIPPED.
#include "optscope/analysis/verify_report.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/gpu/gpu_devices.h"

#include <gtest/gtest.h>
#include <string>
#include <tuple>

using namespace optscope;

namespace {

class GpuVerify : public ::testing::TestWithParam<std::tuple<std::string, int>>
{
protected:
    void SetUp() override
    {
        const GpuInfo info = queryGpus();
        if (!info.compiledWithCuda || info.devices.empty()) GTEST_SKIP() << "no CUDA device: " << info.status;
    }
};

TEST_P(GpuVerify, AgreesWithCpuOracle)
{
    const auto& [fixture, worldSize] = GetParam();
    const auto cp = openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/" + fixture);
    VerifyOptions cpu;
    cpu.worldSize = worldSize;
    VerifyOptions gpu = cpu;
    gpu.device = ComputeDevice::Cuda;
    const VerifyReport a = verifyByLoad(*cp, cpu);
    const VerifyReport b = verifyByLoad(*cp, gpu);
    EXPECT_EQ(a.device, "cpu");
    EXPECT_EQ(b.device.rfind("cuda:0", 0), 0u) << b.device;
    EXPECT_TRUE(a.identical());
    EXPECT_TRUE(b.identical());
    EXPECT_EQ(a.worldSize, b.worldSize);
    EXPECT_EQ(a.bytesCompared, b.bytesCompared);
    EXPECT_GT(b.bytesCompared, 0u);
    ASSERT_EQ(a.entries.size(), b.entries.size());
    for (size_t i = 0; i < a.entries.size(); ++i) {
        const VerifyEntry& x = a.entries[i];
        const VerifyEntry& y = b.entries[i];
        SCOPED_TRACE(x.key);
        EXPECT_EQ(x.key, y.key);
        EXPECT_EQ(x.status, y.status) << y.detail;
        EXPECT_EQ(x.elements, y.elements);
        EXPECT_EQ(x.differing, y.differing);
        ASSERT_EQ(x.ranks.size(), y.ranks.size());
        for (size_t r = 0; r < x.ranks.size(); ++r) {
            EXPECT_EQ(x.ranks[r].rank, y.ranks[r].rank);
            EXPECT_EQ(x.ranks[r].elements, y.ranks[r].elements);
            EXPECT_EQ(x.ranks[r].differing, y.ranks[r].differing);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuVerify,
    ::testing::Combine(::testing::Values("fsdp2_r3", "fsdp1_r2", "dtypes.pt", "gpu/fsdp2_bf16mp_fused_adamw/ckpt"),
        ::testing::Values(1, 2, 3, 5)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
        std::string n = std::get<0>(info.param);
        for (auto& c : n)
            if (!isalnum(static_cast<unsigned char>(c))) c = '_';
        return n + "_to_" + std::to_string(std::get<1>(info.param));
    });

} // namespace
