// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <string>

namespace optscope {

/// Opens any supported checkpoint, detecting the format by content: a folder (or .metadata file) of a DCP
/// checkpoint, or a torch.save file (zip or legacy). Anything else throws Error naming the path and what it is.
CheckpointPtr openCheckpoint(const std::string& path, const Progress& progress = {});

/// What to open for @p path, as a user picking a file means it: the folder of a DCP checkpoint for its .metadata or
/// one of its .distcp files (openCheckpoint opens those as the folder too; the GUI shows and remembers the folder),
/// @p path itself otherwise.
std::string checkpointPathFor(const std::string& path);

/// Opens one file as the torch.save or safetensors file it is, not as the checkpoint it belongs to: a DeepSpeed rank
/// file (`zero_pp_rank_0_mp_rank_00_optim_states.pt`) shows its raw flat partitions and DeepSpeed objects, a DCP
/// `__0_0.distcp` is refused (its bytes are not a pickle). `inspect --raw`.
CheckpointPtr openCheckpointFile(const std::string& path, const Progress& progress = {});

/// whether a format takes the file @p path by its name or place (a DCP's .metadata or item, DeepSpeed's `latest`, a
/// safetensors or pytorch_model.bin index): a file none takes is torch.save or safetensors by its content, or no
/// checkpoint at all
bool formatTakesFileByName(const std::string& path);

} // namespace optscope
