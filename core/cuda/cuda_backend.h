// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The seam between the core and CUDA/NCCL: plain C++ declarations, no CUDA headers, so core .cpp files can call it.

#include "optscope/gpu_devices.h"

namespace optscope::cuda {

/// devices, driver status and NCCL availability (NCCL is dlopen'ed: libnccl.so.2)
GpuInfo queryDevices();

} // namespace optscope::cuda
