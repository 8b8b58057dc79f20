// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/base/progress.h"
#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/model/checkpoint.h"
#include "optscope/optim/fsdp1_optim.h"

#include <string>

namespace optscope {

/// Where tensors are assembled: in host memory, or in the memory of the local GPUs (the result is the same bytes;
/// the CPU path is the reference the GPU path is tested against).
enum class ComputeDevice { Cpu, Cuda };

/// "cpu" / "cuda"; throws Error(Usage) for anything else
ComputeDevice computeDeviceFromName(const std::string& name);
/// what does the work: "cpu", or the GPUs ("cuda:0", "cuda:0-3 + NCCL"); throws Error(Unsupported) when --device
/// cuda cannot be used (no CUDA support built in, no device, no driver)
std::string describeComputeDevice(ComputeDevice device);

struct GatherOptions
{
    /// keep entries whose key equals this prefix or starts with it followed by '.'; empty = everything
    std::string onlyPrefix;
    ComputeDevice device = ComputeDevice::Cpu;
    WriteOptions write;
};

struct GatherResult
{
    WriteStats stats;
    size_t values = 0;
    /// values left out, each "key: why" ("args: an object of class 'argparse.Namespace'"): inert objects that a file
    /// torch.load(weights_only=True) reads cannot hold (Megatron-LM's args, enums); everything else is written
    std::vector<std::string> leftOut;
    std::string device; ///< what actually assembled the tensors ("cpu", "cuda:0", "cuda:0-3 + NCCL")
};

/// true if @p key is selected by @p prefix (see GatherOptions::onlyPrefix)
bool keyMatchesPrefix(const std::string& key, const std::string& prefix);

/// The state dict of @p checkpoint as a tree to write: entries placed at their paths (as
/// torch.distributed.checkpoint.format_utils.dcp_to_torch_save nests them), tensors assembled from their chunks on
/// demand. Throws Error if a selected tensor's chunks do not tile it exactly or a value cannot be read. Values that
/// torch.load(weights_only=True) could not read back are left out and listed in @p leftOut ("key: why"); without it
/// they throw.
StateTree buildStateTree(
    const Checkpoint& checkpoint, const GatherOptions& options, std::vector<std::string>* leftOut = nullptr);

/// Writes the full state dict of @p checkpoint as one torch.save file at @p output (temporary name, then rename).
/// FSDP1 flat-parameter rank files (@p ranks) unflattened against @p model's parameters (@p layout, built from it)
/// and written to @p output as one torch.save file, the CLI's unflatten: nothing is published from a rank file or
/// model that changed or vanished while read (before: an overwritten rank file gave a corrupt output, exit 0)
struct UnflattenWritten
{
    UnflattenResult result;
    WriteStats stats;
};
UnflattenWritten unflattenToFile(const std::vector<CheckpointPtr>& ranks, const Checkpoint& model,
    const Fsdp1Model& layout, const std::string& output, const Progress& progress, WriteOptions write);

GatherResult gatherCheckpoint(const Checkpoint& checkpoint, const std::string& output, const GatherOptions& options,
    const Progress& progress = {});

} // namespace optscope
