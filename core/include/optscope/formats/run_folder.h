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
    /// the number after "step" or "iter" in the name (epoch=0-step=100-val_loss=0.93.ckpt: 100), else its last number
    int64_t step = -1;
    /// changes while the entry is being written: sizes and modification times of its files (a folder: its files up
    /// to two levels down)
    uint64_t signature = 0;
    /// why the entry is not complete yet though its files may rest a while: a Trainer's checkpoint-N/ before its
    /// trainer_state.json, which Trainer._save_checkpoint writes after the model, optimizer and scheduler. Empty: it
    /// is complete once its files rest
    std::string incomplete;
    /// what a reader of this step should know ("rank 0's file of 2 per-rank files")
    std::vector<std::string> notes;
};

/// The entries of @p folder that name a step, in step order (then by name). Hidden entries (".tmp-...") and the
/// temporary names writers use before renaming ("*.tmp", "*.partial", "*~", "tmp-checkpoint-N") are left out: they
/// are not complete. Per-rank files of one step side by side ("ckpt_step4_rank0.pt", "..._rank1.pt") are followed by
/// their lowest rank's file: the ranks of one step are not steps. An unreadable folder gives an empty list. @p folder
/// may be a URL (s3://, gs://: a prefix listed afresh at every call; an entry's signature is then its objects' names
/// and sizes).
std::vector<RunCheckpoint> scanRunFolder(const std::string& folder);

} // namespace optscope
