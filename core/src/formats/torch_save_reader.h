// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// torch.save files as checkpoints: the archive (torch_save_archive.h, whose header describes the format) flattened
// into entries; tensors become one-chunk entries (ShardedTensor/DTensor: their local shards).

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
};

} // namespace optscope
