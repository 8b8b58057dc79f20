// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: the GPU twin of TensorAssembler. Without CUDA support built in, every call throws Error(Unsupported).

#include "optscope/formats/torch_save_writer.h"
#include "optscope/model/checkpoint.h"

#include <string>

namespace optscope {

/// Streams the entry's full tensor, assembled in GPU memory, to @p sink (same bytes as TensorAssembler).
void gpuAssemble(const Checkpoint& checkpoint, const Entry& entry, const ByteSink& sink, int maxGpus = 0);
/// what would do the work ("cuda:0", "cuda:0-3 + NCCL"); throws Error(Unsupported) if no GPU can be used
std::string gpuAssemblerDescription(int maxGpus = 0);

} // namespace optscope
