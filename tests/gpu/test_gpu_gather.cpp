// SPDX-License-Identifier: GPL-3.0-or-later
// GPU gather against the CPU oracle: both must write byte-identical torch.save files. Runs where a CUDA device
// exists (the device machine); elsewhere every test reports SKIPPED.
#include "optscope/analysis/gather.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/gpu/gpu_devices.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <iterator>
#include <random>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

std::vector<char> slurp(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class GpuGather : public ::testing::TestWithParam<std::string>
{
protected:
    void SetUp() override
    {
        const GpuInfo info = queryGpus();
        if (!info.compiledWithCuda || info.devices.empty()) GTEST_SKIP() << "no CUDA device: " << info.status;
    }
};

TEST_P(GpuGather, MatchesCpuBitForBit)
{
    std::random_device rd;
    const fs::path dir = fs::temp_directory_path() / ("optscope-gpu-" + std::to_string(rd()));
    fs::create_directories(dir);
    const auto cp = openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/" + GetParam());
    GatherOptions cpu;
    GatherOptions gpu;
    gpu.device = ComputeDevice::Cuda;
    // one file name in two folders: the archive's folder name inside the zip comes from the file name
    fs::create_directories(dir / "cpu");
    fs::create_directories(dir / "gpu");
    gatherCheckpoint(*cp, (dir / "cpu" / "gathered.pt").string(), cpu);
    const GatherResult r = gatherCheckpoint(*cp, (dir / "gpu" / "gathered.pt").string(), gpu);
    EXPECT_EQ(r.device.rfind("cuda", 0), 0u) << r.device;
    const auto a = slurp(dir / "cpu" / "gathered.pt");
    const auto b = slurp(dir / "gpu" / "gathered.pt");
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "CPU and GPU gather differ for " << GetParam();
    fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuGather,
    ::testing::Values(
        "fsdp2_r2", "fsdp2_r3", "fsdp1_r2", "dtypes.pt", "adam_bf16.pt", "gpu/fsdp2_bf16mp_fused_adamw/ckpt"),
    [](const ::testing::TestParamInfo<std::string>& info) {
        std::string n = info.param;
        for (auto& c : n)
            if (!isalnum(static_cast<unsigned char>(c))) c = '_';
        return n;
    });

} // namespace
