// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/gpu/gpu_devices.h"

#ifdef OPTSCOPE_HAS_CUDA
#include "optscope/gpu/cuda_backend.h"
#endif

namespace optscope {

GpuInfo queryGpus()
{
#ifdef OPTSCOPE_HAS_CUDA
    return cuda::queryDevices();
#else
    GpuInfo info;
    info.status = "built without CUDA support";
    return info;
#endif
}

} // namespace optscope
