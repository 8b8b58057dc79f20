// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: the GPU twin of TensorAssembler. Without CUDA support built in, every call throws Error(Unsupported).

#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/model/checkpoint.h"

#include <cstdint>
#include <string>
#include <vector>

namespace optscope {

/// Streams the entry's full tensor, assembled in GPU memory, to @p sink (same bytes as TensorAssembler).
void gpuAssemble(const Checkpoint& checkpoint, const Entry& entry, const ByteSink& sink, int maxGpus = 0);
/// Streams the box [offsets, offsets + sizes) of the entry's tensor, assembled in GPU memory from the chunks that
/// meet it, to @p sink (same bytes as TensorAssembler::streamBox): a reshard's target chunk.
void gpuAssembleBox(const Checkpoint& checkpoint, const Entry& entry, const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& sizes, const ByteSink& sink, int maxGpus = 0);
/// Verify-by-load's gather and compare, both on the GPUs: the rank shards (dim-0 chunks of the entry's tensor in rank
/// order, as each rank loaded them; together exactly the tensor's bytes) are all-gathered, the entry's tensor is
/// assembled beside them, and each rank's elements that differ bit for bit are counted there.
std::vector<uint64_t> gpuCompareShards(
    const Checkpoint& checkpoint, const Entry& entry, const std::vector<std::vector<uint8_t>>& shards, int maxGpus = 0);
/// what would do the work ("cuda:0", "cuda:0-3 + NCCL"); throws Error(Unsupported) if no GPU can be used
std::string gpuAssemblerDescription(int maxGpus = 0);

} // namespace optscope
