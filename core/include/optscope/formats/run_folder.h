// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// A training run's checkpoint folder, as trainers write it: one entry per save, named with its step
// (step_100/, checkpoint-200/, global_step300/, ckpt_400.pt, epoch=1-step=500.ckpt). The GUI's Watch follows it.

#include <cstdint>
#include <string>
#include <vector>

namespace optscope {

struct RunCheckpoint
{
    std::string path; ///< the entry: a folder or a file
    std::string name;
    int64_t step = -1; ///< the last number in the name
    /// changes while the entry is being written: sizes and modification times of its files (a folder: its files up
    /// to two levels down)
    uint64_t signature = 0;
};

/// The entries of @p folder that name a step, in step order (then by name). Hidden entries (".tmp-...") and the
/// temporary names writers use before renaming ("*.tmp", "*.partial", "*~") are left out: they are not complete.
/// An unreadable folder gives an empty list. @p folder may be a URL (s3://, gs://: a prefix listed afresh at every
/// call; an entry's signature is then its objects' names and sizes).
std::vector<RunCheckpoint> scanRunFolder(const std::string& folder);

} // namespace optscope
