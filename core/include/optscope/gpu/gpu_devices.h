// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace optscope {

struct GpuDevice
{
    int index = 0;
    std::string name;
    uint64_t totalMemory = 0; ///< bytes
    int computeMajor = 0;
    int computeMinor = 0;
};

/// What the local machine offers for GPU work, asked at run time (UI and CLI never need #ifdef).
struct GpuInfo
{
    bool compiledWithCuda = false; ///< optscope_cuda was built in
    std::vector<GpuDevice> devices; ///< empty without a driver or device
    bool ncclAvailable = false; ///< libnccl could be loaded (needed for several GPUs)
    std::string ncclVersion;
    std::string status; ///< why there are no devices, in words ("no CUDA driver", "built without CUDA", ...)
};

GpuInfo queryGpus();

} // namespace optscope
