// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// DeepSpeed universal checkpoints (deepspeed/checkpoint/ds_to_universal.py, DeepSpeed >= 0.14.4), as v0.19.5 writes
// them from a ZeRO checkpoint:
//
//   <save_dir>/latest_universal        text: the name of the universal folder ("universal", "global_step2_universal")
//   <folder>/mp_rank_MM_model_states.pt (ZeRO-1/2) or zero_pp_rank_R_mp_rank_MM_model_states.pt (ZeRO-3): the model
//                                      states files of the ZeRO checkpoint, copied (param_shapes, buffers, frozen
//                                      parameters; see deepspeed_zero_reader.h)
//   <folder>/zero/optimizer_state.pt   rank 0's optimizer_state_dict without its partitions, plus param_groups (the
//                                      torch optimizer's: ZeRO-1/2 params [g]; ZeRO-3 the sub-group ids)
//   <folder>/zero/<fqn>/fp32.pt        the whole fp32 master weight of one parameter
//   <folder>/zero/<fqn>/<state>.pt     exp_avg, exp_avg_sq, ... of it; step.pt its step (ZeRO-1/2 only). Over
//                                      plain HTTP (no listing) the state names torch.optim's optimizers keep
// ZeRO-1/2 write each as {"param": tensor in the parameter's shape, "cat_dim": int} (the tensor-parallel merge
// dimension; more keys with tensor parallelism); ZeRO-3 writes the bare flat 1-D tensor, which takes the shape from
// param_shapes here, and no step.pt (the step is the sub-group's in zero/optimizer_state.pt).
//
// The checkpoint model is the ZeRO reader's: model.<fqn>, optim.state.<fqn>.<state>, optim.param_groups.<g>.* with
// params listing FQNs; each tensor is one chunk (rank unknown: nothing is partitioned any more).
// Failure semantics: a parameter folder or file that is missing is an error warning (missing-file) and the entry is
// left out; an unreadable file throws Error naming it.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <memory>
#include <string>

namespace optscope {

class DeepSpeedUniversalReader
{
public:
    /// the names its probe asks for (and the format registry's folderNames)
    static constexpr const char* kZeroFolder = "zero";
    static constexpr const char* kOptimizerStateFile = "zero/optimizer_state.pt";
    static constexpr const char* kLatestFile = "latest_universal";
    /// a folder holding zero/<param>/fp32.pt, a folder whose latest_universal names one, or a file directly in it
    static bool looksLikeUniversal(const std::string& path);
    static std::shared_ptr<const Checkpoint> open(const std::string& path, const Progress& progress = {});
};

} // namespace optscope
