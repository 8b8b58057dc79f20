// SPDX-License-Identifier: GPL-3.0-or-later
// GPU reshard and the device compare against their CPU oracles: `reshard --device cuda` must write the same files
// byte for byte as the CPU; any box of any tensor assembled on the GPU must equal TensorAssembler's; the device
// compare must count exactly the elements a damaged shard changed. Runs where a CUDA device exists; elsewhere every
// test is SKIPPED.
#include "optscope/analysis/reshard.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/gpu/gpu_assembler.h"
#include "optscope/gpu/gpu_devices.h"
#include "optscope/model/flat_param_layout.h"
#include "optscope/tensor/tensor_assembler.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <iterator>
#include <random>
#include <tuple>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

const std::string kData = OPTSCOPE_TEST_DATA;

std::vector<char> slurp(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool haveGpu(std::string& why)
{
    const GpuInfo info = queryGpus();
    why = info.status;
    return info.compiledWithCuda && !info.devices.empty();
}

class GpuReshard : public ::testing::TestWithParam<std::tuple<std::string, int, std::string>>
{
protected:
    void SetUp() override
    {
        std::string why;
        if (!haveGpu(why)) GTEST_SKIP() << "no CUDA device: " << why;
    }
};

TEST_P(GpuReshard, WritesTheCpuFilesByteForByte)
{
    const auto& [fixture, worldSize, layout] = GetParam();
    std::random_device rd;
    const fs::path dir = fs::temp_directory_path() / ("optscope-gpu-reshard-" + std::to_string(rd()));
    fs::create_directories(dir);
    const auto cp = openCheckpoint(kData + "/" + fixture);
    ReshardOptions cpu;
    cpu.worldSize = worldSize;
    cpu.layout = shardingStyleFromName(layout);
    cpu.write.fsync = false;
    ReshardOptions gpu = cpu;
    gpu.device = ComputeDevice::Cuda;
    // one folder name under two parents: file names are what the .distcp archives are named after
    fs::create_directories(dir / "cpu");
    fs::create_directories(dir / "gpu");
    reshardCheckpoint(*cp, (dir / "cpu" / "out").string(), cpu);
    reshardCheckpoint(*cp, (dir / "gpu" / "out").string(), gpu);
    size_t files = 0;
    for (const auto& f : fs::directory_iterator(dir / "cpu" / "out")) {
        SCOPED_TRACE(f.path().filename().string());
        const fs::path twin = dir / "gpu" / "out" / f.path().filename();
        ASSERT_TRUE(fs::exists(twin));
        EXPECT_TRUE(slurp(f.path()) == slurp(twin)) << "CPU and GPU reshard differ";
        ++files;
    }
    size_t gpuFiles = 0;
    for (const auto& f : fs::directory_iterator(dir / "gpu" / "out")) {
        (void)f;
        ++gpuFiles;
    }
    EXPECT_EQ(files, gpuFiles);
    EXPECT_GE(files, 2u);
    fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuReshard,
    ::testing::Combine(::testing::Values("fsdp2_r3", "fsdp1_r2", "dtypes.pt", "gpu/fsdp2_bf16mp_fused_adamw/ckpt"),
        ::testing::Values(1, 2, 5), ::testing::Values("fsdp2", "fsdp1")),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int, std::string>>& info) {
        std::string n = std::get<0>(info.param);
        for (auto& c : n)
            if (!isalnum(static_cast<unsigned char>(c))) c = '_';
        return n + "_to_" + std::to_string(std::get<1>(info.param)) + "_" + std::get<2>(info.param);
    });

class GpuBox : public ::testing::Test
{
protected:
    void SetUp() override
    {
        std::string why;
        if (!haveGpu(why)) GTEST_SKIP() << "no CUDA device: " << why;
    }
};

TEST_F(GpuBox, AnyBoxEqualsTensorAssemblers)
{
    std::mt19937 rng(7);
    size_t boxes = 0;
    for (const char* fixture :
        {"fsdp2_r3", "fsdp1_r2", "dtypes.pt", "fsdp1_sharded_r3", "gpu/fsdp2_bf16mp_fused_adamw/ckpt"}) {
        const auto cp = openCheckpoint(kData + "/" + fixture);
        for (const Entry& e : cp->entries) {
            if (!e.isTensor() || e.tensor->numel() == 0) continue;
            SCOPED_TRACE(std::string(fixture) + " " + e.key);
            for (int trial = 0; trial < 4; ++trial) {
                std::vector<int64_t> off, size;
                for (const int64_t n : e.tensor->shape) {
                    const int64_t a = std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
                    off.push_back(a);
                    size.push_back(std::uniform_int_distribution<int64_t>(1, n - a)(rng));
                }
                std::vector<uint8_t> want, got;
                TensorAssembler(*cp, e).streamBox(
                    off, size, [&](const uint8_t* p, size_t n) { want.insert(want.end(), p, p + n); });
                gpuAssembleBox(*cp, e, off, size, [&](const uint8_t* p, size_t n) { got.insert(got.end(), p, p + n); });
                ASSERT_EQ(want, got) << "box " << trial;
                ++boxes;
            }
        }
    }
    EXPECT_GT(boxes, 40u);
}

TEST_F(GpuBox, DeviceCompareCountsExactlyTheDamagedElements)
{
    const auto cp = openCheckpoint(kData + "/fsdp2_r3");
    size_t tensors = 0;
    for (const Entry& e : cp->entries) {
        if (!e.isTensor() || e.tensor->shape.empty() || e.tensor->shape[0] < 3) continue;
        SCOPED_TRACE(e.key);
        const size_t elem = dtypeSize(e.tensor->dtype);
        std::vector<std::vector<uint8_t>> shards;
        for (int r = 0; r < 3; ++r) {
            const Dim0Chunk c = chunkDim0(e.tensor->shape[0], 3, r);
            std::vector<int64_t> off(e.tensor->shape.size(), 0), size(e.tensor->shape);
            off[0] = c.offset;
            size[0] = c.size;
            shards.emplace_back();
            TensorAssembler(*cp, e).streamBox(
                off, size, [&](const uint8_t* p, size_t n) { shards.back().insert(shards.back().end(), p, p + n); });
        }
        if (shards[1].empty() || shards[2].empty()) continue; // torch.chunk left a rank empty
        EXPECT_EQ(gpuCompareShards(*cp, e, shards), std::vector<uint64_t>({0, 0, 0}));
        // one bit of rank 1's first element, and every byte of rank 2's last element
        shards[1][0] ^= 0x01;
        for (size_t k = 0; k < elem; ++k)
            shards[2][shards[2].size() - 1 - k] ^= 0xff;
        EXPECT_EQ(gpuCompareShards(*cp, e, shards), std::vector<uint64_t>({0, 1, 1}));
        ++tensors;
    }
    EXPECT_GT(tensors, 0u);
}

} // namespace
