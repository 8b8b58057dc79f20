// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// torch.save files as checkpoints: the archive (torch_save_archive.h, whose header describes the format) flattened
// into entries; tensors become one-chunk entries (ShardedTensor/DTensor: their local shards).
//
// A state dict saved in torch.save shards by Hugging Face (save_pretrained(safe_serialization=False) of a model larger
// than a shard) is one such checkpoint too: a folder, or its index file given directly,
//
//   pytorch_model.bin.index.json          {"weight_map": {"<fqn>": "<shard>"}} (weight_index.h)
//   pytorch_model-0000K-of-0000N.bin      torch.save of the state dict's K-th run of tensors
//
// and, unsharded, a folder holding pytorch_model.bin: the tensors keyed by their FQNs as torch.load of the whole
// state dict would give them. (Next to optimizer.pt or trainer_state.json the folder is a Trainer checkpoint,
// hf_trainer_reader.h; next to model.safetensors it is the safetensors model.)

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"
#include "optscope/pickle/torch_save_archive.h"

#include <memory>
#include <string>

namespace optscope {

class TorchSaveReader
{
public:
    /// Opens a torch.save file as a checkpoint: flattens the object into entries, tensors become one-chunk entries
    /// (ShardedTensor/DTensor: their local shards).
    static std::shared_ptr<const Checkpoint> open(const std::string& path, const Progress& progress = {});
    /// The same, of a file already open (a reader of many files asks for their first bytes ahead, on this source)
    static std::shared_ptr<const Checkpoint> open(std::shared_ptr<const ByteSource> file, const Progress& progress);

    /// the names a Hugging Face model folder saved with torch.save holds (the format registry's folderNames)
    static constexpr const char* kShardIndexFile = "pytorch_model.bin.index.json";
    static constexpr const char* kSingleModelFile = "pytorch_model.bin";
    /// a folder holding pytorch_model.bin.index.json or pytorch_model.bin, or a file named *.bin.index.json
    static bool looksLikeHfModel(const std::string& path);
    /// Opens such a folder or index: every shard's tensors as one state dict (a shard missing or holding other
    /// tensors than the index says: an error warning, the rest is read).
    static std::shared_ptr<const Checkpoint> openHfModel(const std::string& path, const Progress& progress = {});
};

} // namespace optscope
