// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// DeepSpeed ZeRO checkpoints (engine.save_checkpoint, DeepSpeed 0.3.17 - 0.19), read without running Python. As the
// files of DeepSpeed v0.19.5 show them (deepspeed/runtime/engine.py, zero/stage_1_and_2.py, zero/stage3.py,
// bf16_optimizer.py, utils/zero_to_fp32.py):
//
//   <save_dir>/latest                    text: the tag of the newest checkpoint ("global_step2")
//   <save_dir>/<tag>/                    one folder per checkpoint, every file an ordinary torch.save zip
//     mp_rank_MM_model_states.pt         ZeRO 0/1/2, one per model-parallel rank MM (written by its DP rank 0)
//     zero_pp_rank_R_mp_rank_MM_model_states.pt            ZeRO-3: one per data-parallel rank R
//     [bf16_]zero_pp_rank_R_mp_rank_MM_optim_states.pt     one per DP rank ("bf16_": the BF16_Optimizer)
//   Over plain HTTP, which cannot list a folder, the files are found by these names (HEADs in doubling batches of
//   ranks, zeroFilesByName); files of other names (MoE experts) are then not seen.
//
// model states: {module: state dict (ZeRO-3: parameters are empty placeholders, buffers are whole), buffer_names,
//   param_shapes: [OrderedDict name -> torch.Size] one per flat buffer (ZeRO-1/2: param group, in the flattening
//   order; ZeRO-3: sub-group), frozen_param_shapes / frozen_param_fragments (ZeRO-2/3 only: name -> Size / tensor;
//   ZeRO-3 fragments are the rank's padded partition), shared_params {alias: name}, dp_world_size, mp_world_size,
//   global_steps, ds_config, ds_version, ...}.
// optim states: {optimizer_state_dict: ..., ds_config, ds_version}; optimizer_state_dict is
//   ZeRO-1/2: zero_stage (ZeroStageEnum 1 or 2), partition_count (int or per group), group_paddings (this rank's
//     padding per group), single_partition_of_fp32_groups (per group: this rank's fp32 partition, padding removed),
//     base_optimizer_state (the torch optimizer's state_dict over the padded partitions: state[g] = {step, exp_avg,
//     exp_avg_sq, ...}, param_groups[g] with params [g]; or, when elastic, a list per group of states with padding
//     removed and base_optimizer_state_step), param_slice_mappings (name -> fragment_address(numel, start)),
//     loss_scaler (LossScaler), clip_grad, ...
//   BF16_Optimizer: the same without zero_stage, and single_partition_of_fp32_groups keep their padding.
//   ZeRO-3: zero_stage 3, partition_count, fp32_flat_groups (per sub-group: this rank's partitions of its
//     parameters joined), optimizer_state_dict (state per sub-group, same layout; param_groups[g].params lists the
//     sub-groups of group g).
// Layout. ZeRO-1/2: a group's parameters (param_shapes order) are joined into one flat buffer, padded at the end to
// a multiple of 2*W and cut into W equal partitions; rank r holds [r*P, (r+1)*P), its padding at the end (only the
// last ranks have any). ZeRO-3: each parameter of n elements is cut on its own into W partitions of ceil(n/W); a
// rank's sub-group buffer joins its partitions of the sub-group's parameters in order (the padding is uninitialised).
//
// The checkpoint model: model.<fqn> (fp32 master weights), optim.state.<fqn>.<name>, optim.param_groups.<g>.<hyper>
// with params listing FQNs, all from the same files; every tensor's chunks point into the flat partitions where they
// lie (rank = the partition's rank), a flat range split into rectangular pieces; padding never becomes data. Frozen
// parameters and buffers come from the model states; shared parameters alias their target. Model-parallel ranks
// other than 00 are separate shards of the same parameters: they are read under the prefix "mp_rank_MM.".
//
// Failure semantics: an unreadable file (damaged, cut short) throws Error naming it; a missing rank file, world
// sizes or stages that disagree, or a missing `latest` become warnings with stable codes (zero-missing-rank-file,
// zero-world-size-mismatch, zero-stage-mismatch, zero-missing-latest) carrying DeepSpeed's own error text, and the
// parameters they leave without data have no chunks there.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <memory>
#include <string>

namespace optscope {

class DeepSpeedZeroReader
{
public:
    /// the tag file of a save folder: the name its probe asks for (and the format registry's folderNames)
    static constexpr const char* kLatestFile = "latest";
    /// a folder holding ZeRO model/optim state files, a folder whose `latest` names one, or one of those files
    static bool looksLikeZero(const std::string& path);
    static std::shared_ptr<const Checkpoint> open(const std::string& path, const Progress& progress = {});
};

} // namespace optscope
