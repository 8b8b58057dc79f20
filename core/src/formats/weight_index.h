// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// transformers' index of a model saved in shards (save_pretrained with max_shard_size), as
// model.safetensors.index.json or pytorch_model.bin.index.json:
//
//   {"metadata": {"total_size": <bytes>}, "weight_map": {"<fqn>": "<shard file>", ...}}
//
// Every shard is a file of the same folder (model-00001-of-00002.safetensors, pytorch_model-00001-of-00002.bin),
// named relative to it; shards follow each other in the model's order when sorted by name, and each holds the
// tensors the weight map gives it, no more.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace optscope {

class CheckpointBuilder;

struct WeightIndexShard
{
    std::string file; ///< relative to the checkpoint's root
    std::vector<std::string> names; ///< the tensors the weight map places in it
};

/// The shards of @p indexFile (relative to @p cp's root), in file-name order. Throws Error naming the index when it is
/// too large, not JSON, without a weight_map, or places a tensor outside the folder.
std::vector<WeightIndexShard> readWeightIndex(const Checkpoint& cp, const std::string& indexFile);

/// Reads each shard with @p addShard (which adds its tensors to @p cp and returns their names); a shard that cannot
/// be read as a file of the checkpoint, a tensor the index places in a shard that does not hold it, and one a shard
/// holds that the index does not place there, are said through @p builder. @p before(i) runs before shard i is read
/// (a look-ahead). Returns "K of N shards".
std::string addIndexedShards(Checkpoint& cp, CheckpointBuilder& builder, const std::string& indexFile,
    const std::vector<WeightIndexShard>& shards,
    const std::function<std::set<std::string>(const std::string&)>& addShard, const std::function<void(size_t)>& before,
    const Progress& progress, const char* what);

/// The torch.save shards of @p indexFile (pytorch_model.bin.index.json: save_pretrained(safe_serialization=False) of
/// a model larger than a shard), read in the index's (the model's) order, each tensor at @p prefix + its name.
/// Returns "K of N shards".
std::string addTorchSaveShards(Checkpoint& cp, CheckpointBuilder& builder, const std::string& indexFile,
    const KeyPath& prefix, const Progress& progress);

} // namespace optscope
