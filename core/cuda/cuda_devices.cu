// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/gpu/cuda_backend.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

namespace optscope::cuda {

namespace {

using NcclGetVersionFn = ncclResult_t (*)(int*);

void probeNccl(GpuInfo& info)
{
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    auto getVersion = reinterpret_cast<NcclGetVersionFn>(dlsym(lib, "ncclGetVersion"));
    int v = 0;
    if (getVersion && getVersion(&v) == ncclSuccess) {
        info.ncclAvailable = true;
        info.ncclVersion
            = std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
    }
    // keep the library loaded: later NCCL calls resolve through it
}

} // namespace

GpuInfo queryDevices()
{
    GpuInfo info;
    info.compiledWithCuda = true;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        info.status = std::string("no usable CUDA device: ") + cudaGetErrorString(err);
        cudaGetLastError(); // clear the sticky error
        return info;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop {};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
        GpuDevice d;
        d.index = i;
        d.name = prop.name;
        d.totalMemory = prop.totalGlobalMem;
        d.computeMajor = prop.major;
        d.computeMinor = prop.minor;
        info.devices.push_back(d);
    }
    info.status = count ? std::to_string(count) + " CUDA device(s)" : "no CUDA device";
    probeNccl(info);
    return info;
}

} // namespace optscope::cuda
