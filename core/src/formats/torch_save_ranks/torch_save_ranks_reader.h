// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Per-rank torch.save files of one sharded state dict, read as one checkpoint.
//
// What users write without DCP: every rank calls torch.save on its own sharded state dict, into one file per rank
// named alike but for the rank number ("rank0.pt", "rank1.pt"; "ckpt_rank_3.pt"; "model-r2.pth"):
//   FSDP2 / tensor parallel: get_state_dict(model, opt) or model.state_dict() -> DTensors; each file's DTensor holds
//     that rank's local shard (its offsets follow from the placements, see torch_save_reader.h);
//   FSDP1 SHARDED_STATE_DICT: ShardedTensors, each file's holding the rank's local shards with their global offsets.
// Everything else in the files (plain tensors such as a replicated step, numbers, param_groups) is each rank's own
// copy, the same on every rank for replicated state: rank 0's is read, and every rank's copy is compared with it
// (values as inspect --json renders them; tensors by their stored bytes, one storage record of at most 1 MiB in a
// local file): a difference is an error (rank-files-disagree), since each rank loads its own file.
//
// The folder holds the files of one set: the names that differ only in their last number, numbered 0..N-1, N >= 2,
// torch.save archives (zip or legacy), rank 0's holding at least one DTensor or ShardedTensor. Other files beside them
// are left alone. A folder that cannot be listed (plain HTTP) is asked for the common names (rank#.pt, rank_#.pt,
// optim_rank#.pt, ...: torch_save_ranks_reader.cpp), each set followed up to its first missing rank. Files of one rank
// that are plain tensors only (raw FSDP1 flat-parameter optimizer files) are not such a set: `optscope-cli unflatten`
// reads those with the model.
//
// The checkpoint: rank 0's entries in its order; each DTensor/ShardedTensor entry's chunks are every rank's shards,
// with the rank from the file name (a Replicate placement's copies once: the first rank's). A key that a rank's file
// lacks, or has and rank 0's does not, is a warning naming the file.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <string>
#include <vector>

namespace optscope {

class TorchSaveRanksReader
{
public:
    /// the rank files of @p folder in rank order (empty when it holds no such set, or more than one)
    static std::vector<std::string> rankFiles(const std::string& folder);
    /// a folder holding one set of rank files (by name and magic; open() refuses a set without DTensor or
    /// ShardedTensor entries, naming `unflatten` for raw FSDP1 files)
    static bool looksLikeRankFiles(const std::string& folder);
    /// when @p folder holds one set of torch.save files named alike but for a number, with gaps (rank0.pt and
    /// rank2.pt), what is missing ("rank1.pt is missing from rank0.pt to rank2.pt"); else ""
    static std::string missingRankFiles(const std::string& folder);
    static CheckpointPtr open(const std::string& folder, const Progress& progress = {});
};

} // namespace optscope
