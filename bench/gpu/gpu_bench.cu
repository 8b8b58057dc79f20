// SPDX-License-Identifier: GPL-3.0-or-later
// gpu_bench CKPT [--repeat N]: a checkpoint's bytes host -> device (page cache -> HBM), side by side with a plain
// pinned cudaMemcpy of the same bytes and a pageable one, and the device compare reading HBM. Prints one JSON object.
// scripts/device-check.sh runs it beside PyTorch's torch.load(map_location="cuda") and DCP load
// (bench/gpu/torch_h2d.py); results in bench/results/gpu.md.
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/gpu/cuda_backend.h"
#include "optscope/tensor/chunk_reader.h"

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

using namespace optscope;
using Clock = std::chrono::steady_clock;

namespace {

void check(cudaError_t e, const char* what)
{
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

double since(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

template<typename F> double best(int repeat, F&& f)
{
    double b = 1e30;
    for (int i = 0; i < repeat; ++i) {
        const auto t0 = Clock::now();
        f();
        b = std::min(b, since(t0));
    }
    return b;
}

} // namespace

int main(int argc, char** argv)
try {
    if (argc < 2) {
        std::cerr << "usage: gpu_bench CKPT [--repeat N]\n";
        return 2;
    }
    const std::string path = argv[1];
    int repeat = 3;
    for (int i = 2; i + 1 < argc; ++i)
        if (std::string(argv[i]) == "--repeat") repeat = std::stoi(argv[i + 1]);

    nlohmann::ordered_json out;
    out["checkpoint"] = path;
    cudaDeviceProp prop {};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    out["device"] = prop.name;

    // the checkpoint's chunks, located in the mapped files (the metadata read and every chunk's archive parsed)
    auto t0 = Clock::now();
    const auto cp = openCheckpoint(path);
    std::vector<ChunkData> chunks;
    size_t total = 0, skipped = 0;
    for (const Entry& e : cp->entries) {
        if (!e.isTensor()) continue;
        for (const auto& c : e.tensor->chunks) {
            if (c.numel() == 0) continue;
            ChunkData d = ChunkReader::resolve(*cp, e, c);
            if (!d.isContiguous()) {
                ++skipped;
                continue;
            }
            total += d.nbytes();
            chunks.push_back(std::move(d));
        }
    }
    out["open_and_locate_s"] = since(t0);
    out["chunks"] = chunks.size();
    out["noncontiguous_chunks_skipped"] = skipped;
    out["bytes"] = total;
    const double gb = static_cast<double>(total) / 1e9;

    char* dev = static_cast<char*>(cuda::deviceAlloc(total));
    auto uploadAll = [&](cuda::HostToDevice& up) {
        size_t off = 0;
        for (const auto& d : chunks) {
            up.copy(dev + off, d.data(), d.nbytes());
            off += d.nbytes();
        }
        up.finish();
    };

    // OptScope's path: the copy lanes (pinned staging, several copies in flight), for several lane counts
    nlohmann::ordered_json lanes = nlohmann::ordered_json::array();
    const std::pair<int, size_t> configs[]
        = {{1, 4}, {4, 4}, {8, 4}, {12, 4}, {16, 4}, {12, 2}, {16, 2}, {8, 8}, {12, 8}, {12, 16}};
    for (const auto& [n, mib] : configs) {
        const auto ts = Clock::now();
        cuda::HostToDevice up(0, n, mib << 20);
        const double setup = since(ts);
        const double t = best(repeat, [&] { uploadAll(up); });
        lanes.push_back(
            {{"lanes", n}, {"piece_MiB", mib}, {"seconds", t}, {"GB_per_s", gb / t}, {"pinned_setup_s", setup}});
    }
    out["optscope_lanes"] = lanes;
    {
        // the default lanes as gather and verify use them: made once per process and kept (set-up shown apart)
        const auto ts = Clock::now();
        cuda::HostToDevice up(0);
        const double setup = since(ts);
        const double t = best(repeat, [&] { uploadAll(up); });
        out["optscope_default"]
            = {{"lanes", up.lanes()}, {"seconds", t}, {"GB_per_s", gb / t}, {"pinned_setup_s", setup}};
    }
    // the same bytes in one device buffer are right (the lanes put every chunk in place)
    {
        std::vector<char> back(std::min<size_t>(total, 64u << 20));
        cuda::copyToHost(back.data(), dev, back.size());
        size_t off = 0;
        bool same = true;
        for (const auto& d : chunks) {
            if (off >= back.size()) break;
            const size_t n = std::min<size_t>(d.nbytes(), back.size() - off);
            same = same && std::memcmp(back.data() + off, d.data(), n) == 0;
            off += n;
        }
        out["first_64MiB_verified"] = same;
    }

    // baselines: one cudaMemcpy from pinned memory (the link's ceiling), and a plain pageable cudaMemcpy per chunk
    {
        void* pinned = nullptr;
        check(cudaMallocHost(&pinned, total), "cudaMallocHost");
        size_t off = 0;
        for (const auto& d : chunks) {
            std::memcpy(static_cast<char*>(pinned) + off, d.data(), d.nbytes());
            off += d.nbytes();
        }
        const double t
            = best(repeat, [&] { check(cudaMemcpy(dev, pinned, total, cudaMemcpyHostToDevice), "cudaMemcpy"); });
        out["pinned_cudaMemcpy"] = {{"seconds", t}, {"GB_per_s", gb / t}};
        cudaFreeHost(pinned);
    }
    {
        const double t = best(repeat, [&] {
            size_t off = 0;
            for (const auto& d : chunks) {
                check(cudaMemcpy(dev + off, d.data(), d.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
                off += d.nbytes();
            }
        });
        out["pageable_cudaMemcpy_per_chunk"] = {{"seconds", t}, {"GB_per_s", gb / t}};
    }

    // the device compare (verify's and diff's equality) reading two copies in HBM, against a device-to-device copy
    {
        char* twin = static_cast<char*>(cuda::deviceAlloc(total));
        check(cudaMemcpy(twin, dev, total, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
        uint64_t differing = 1;
        cuda::countDifferentElements(dev, twin, total, 4); // warm-up
        const double t = best(repeat + 2, [&] { differing = cuda::countDifferentElements(dev, twin, total, 4); });
        const double tc = best(repeat + 2, [&] {
            check(cudaMemcpy(twin, dev, total, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
            check(cudaDeviceSynchronize(), "sync");
        });
        out["device_compare"] = {{"seconds", t}, {"read_TB_per_s", 2 * gb / 1e3 / t}, {"differing", differing},
            {"d2d_copy_read_plus_write_TB_per_s", 2 * gb / 1e3 / tc}};
        cuda::deviceFree(twin);
    }
    cuda::deviceFree(dev);
    std::cout << out.dump(2) << "\n";
    return 0;
} catch (const std::exception& e) {
    std::cerr << "gpu_bench: " << e.what() << "\n";
    return 1;
}
