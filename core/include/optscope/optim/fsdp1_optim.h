// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Raw FSDP1 optimizer state, as `torch.save(optim.state_dict())` writes it on each rank.
// use_orig_params=False: {"state": {flat_param_id: {"exp_avg": 1-D padded shard, "exp_avg_sq": ..., "step": 0-dim}},
// "param_groups": [{hyperparameters..., "params": [flat_param_ids]}]}, flat parameters in the order FSDP registers
// them (the root unit's first, then the wrapped submodules in module pre-order).
// use_orig_params=True: one id per original parameter, in the model's parameter order; each rank's state of a
// parameter is the 1-D slice of it that lies in the rank's flat shard (alignment padding is not in any slice), and a
// rank holding none of it has no state for it. The slices in rank order are the flattened parameter.
// Nothing in either file names the original parameters: their FQNs, shapes and order come from a model checkpoint,
// their grouping into units (use_orig_params=False) from the wrap prefixes.
//
// unflatten turns the rank files into the FQN-keyed full optimizer state that get_state_dict(...,
// full_state_dict=True) returns; flatten is the inverse. 0-dim and non-tensor state (step) follows PyTorch's rule:
// one value per flat parameter, copied to each of its parameters; flattening requires them to agree.

#include "optscope/model/checkpoint.h"
#include "optscope/model/flat_param_layout.h"
#include "optscope/model/state_tree.h"
#include "optscope/optim/optimizer_view.h"

#include <memory>
#include <string>
#include <vector>

namespace optscope {

/// The model's parameters, in FlatParameter order, and their FSDP units.
struct Fsdp1Model
{
    struct Unit
    {
        std::string prefix; ///< "" for the root unit
        std::vector<std::pair<std::string, std::vector<int64_t>>> params; ///< FQN (from the model root), shape
    };
    std::vector<Unit> units; ///< in flat-parameter order; units without parameters are dropped
    /// every parameter (FQN, shape) in the order the units were built from (an FQN-keyed optimizer's param_groups, or
    /// the model state dict's keys)
    std::vector<std::pair<std::string, std::vector<int64_t>>> ordered;
    /// the model state dict's parameters in its key order (named_parameters() order), when the file also has an
    /// FQN-keyed optimizer, whose order may be another (FSDP1 use_orig_params=False lists them in flat order)
    std::vector<std::pair<std::string, std::vector<int64_t>>> stateDictOrdered;
    std::vector<std::string> notes; ///< how the parameters were found (for messages)

    /// Parameters from @p model: the FQN list of an FQN-keyed optimizer's param_groups if it has one (exact order
    /// and set), else the tensor entries under "model" (or the whole file) minus known buffers. @p units are the
    /// FSDP-wrapped module prefixes (the root "" is implicit).
    static Fsdp1Model fromCheckpoint(const Checkpoint& model, const std::vector<std::string>& units);
};

struct UnflattenResult
{
    StateTree tree;
    std::shared_ptr<PyArena> arena; ///< values made here (the FQN lists)
    size_t params = 0; ///< original parameters with state
    size_t flatParams = 0; ///< flat parameters; 0 for use_orig_params=True files
    bool origParams = false; ///< the files were saved with use_orig_params=True (one id per original parameter)
    std::vector<std::string> notes;
};

/// Whether @p view is one rank's raw optimizer state of FSDP1 with use_orig_params=True, given the shapes of the
/// model's parameters in the order of its ids: one id per parameter; every shaped state a 1-D slice no longer than its
/// parameter, at least one of them shorter or flattened from a multi-dimensional parameter (a plain optimizer's state
/// has its parameter's shape). @p keepsAllStateOnFirstParam: LBFGS-like optimizers never qualify.
bool isOrigParamsRankSlices(
    const OptimizerView& view, const std::vector<std::vector<int64_t>>& shapes, bool keepsAllStateOnFirstParam);

/// Rank files in rank order (their count is the world size). Files that list one id per parameter of the model and
/// not one per unit are read as use_orig_params=True files (the model's units do not matter then). The result keeps the
/// input's nesting: {"optim": osd} in gives {"optim": {"state": {fqn: {...}}, "param_groups": [{..., "params": [fqn,
/// ...]}]}} out. The checkpoints must outlive the result (its tensors stream from them). Throws Error with what does
/// not match (shard sizes vs the model, rank files that disagree, unknown layout).
UnflattenResult unflattenFsdp1(const std::vector<CheckpointPtr>& ranks, const Fsdp1Model& model);

/// The inverse: a full FQN-keyed optimizer state (as unflatten or get_state_dict(full_state_dict=True) give it) split
/// into the raw per-rank files FSDP1 would save for @p worldSize ranks (padding zero-filled). One tree per rank.
struct FlattenResult
{
    std::vector<StateTree> ranks;
    std::shared_ptr<PyArena> arena; ///< values made here (flat-parameter ids)
};
FlattenResult flattenFsdp1(const Checkpoint& full, const Fsdp1Model& model, int worldSize);

} // namespace optscope
