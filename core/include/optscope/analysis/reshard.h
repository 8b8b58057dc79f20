// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/gather.h"
#include "optscope/base/progress.h"
#include "optscope/formats/dcp/dcp_writer.h"
#include "optscope/model/checkpoint.h"
#include "optscope/model/flat_param_layout.h"

#include <string>

namespace optscope {

struct ReshardOptions
{
    int worldSize = 1;
    /// Fsdp2: every tensor of rank >= 1 as DTensor Shard(0) over all ranks (torch.chunk, empty trailing chunks);
    /// Fsdp1: as FSDP1's SHARDED_STATE_DICT (ShardedTensor chunks, none for ranks past the last non-empty chunk).
    /// 0-dim tensors (step) are one chunk on rank 0; values are BYTE_IO items in rank 0's file, but an optimizer step
    /// kept as a Python number (Megatron, PyTorch before 1.12) becomes the 0-dim float32 tensor PyTorch saves, where
    /// float32 holds it exactly.
    ShardingStyle layout = ShardingStyle::Fsdp2;
    /// Cuda: each target chunk is assembled in GPU memory from the source chunks that meet it (the same bytes)
    ComputeDevice device = ComputeDevice::Cpu;
    WriteOptions write;
};

/// One chunk a reshard gives a tensor.
struct ReshardChunk
{
    int rank = 0;
    std::vector<int64_t> offsets;
    std::vector<int64_t> sizes;
};

/// The chunks a reshard gives a tensor of @p shape: the one rule behind planReshard and the GUI's preview. A 0-dim
/// tensor is one chunk on rank 0; others are split along dim 0 (chunkDim0), trailing empty chunks written once.
std::vector<ReshardChunk> reshardTargetChunks(const std::vector<int64_t>& shape, const ReshardOptions& options);
/// @p tensor as a reshard would lay it out: its target chunks, metadata only (no data source); for the Shard layout
/// view's preview
TensorEntry reshardPreview(const TensorEntry& tensor, const ReshardOptions& options);

/// "fsdp2" / "fsdp1"; throws Error(Usage) otherwise
ShardingStyle shardingStyleFromName(const std::string& name);

/// The DCP items of @p checkpoint laid out for options.worldSize ranks; chunk producers read the source lazily.
/// Throws Error if a tensor's chunks do not tile it, a value is unreadable, or the checkpoint is not a state dict.
/// the storages that tensors inside value entry @p e look at (a namedtuple's tensor field, which dcp.save pickles
/// whole), each with a producer of its bytes from the entry's file: what a DCP value item of it holds
std::vector<DcpPlan::Value::Storage> storagesInside(const Checkpoint& cp, const Entry& e);

DcpPlan planReshard(const Checkpoint& checkpoint, const ReshardOptions& options);

/// What a reshard would write, without reading or writing any tensor data (reshard --dry-run; the GUI's preview).
struct ReshardSummary
{
    int worldSize = 0;
    size_t tensorItems = 0; ///< chunks written, over all ranks
    size_t valueItems = 0;
    uint64_t bytes = 0; ///< tensor bytes
    std::vector<uint64_t> bytesPerRank; ///< tensor bytes each target rank's file holds
    std::vector<size_t> chunksPerRank;
    std::vector<std::string> leftOut; ///< values not written (DcpPlan::leftOut)
    std::vector<std::string> copied; ///< files copied as they are (DcpPlan::copies: Fabric's meta.pt)
};
ReshardSummary summarizeReshard(const Checkpoint& checkpoint, const ReshardOptions& options);

/// Writes @p checkpoint as a DCP folder for options.worldSize ranks at @p outDir (temporary name, then rename), with
/// its companion files (Lightning Fabric's meta.pt) copied byte for byte and their entries left out of the DCP part.
DcpWriteStats reshardCheckpoint(const Checkpoint& checkpoint, const std::string& outDir, const ReshardOptions& options,
    const Progress& progress = {});

} // namespace optscope
