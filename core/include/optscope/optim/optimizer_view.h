// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Finds the optimizer state dicts inside a checkpoint and indexes them by parameter.
//
// torch.optim's state_dict() is {"state": {param: {name: value}}, "param_groups": [{hyperparams..., "params": [...]}]}
// where param is an integer id (optimizer.state_dict()) or an FQN (DSD get_optimizer_state_dict / FSDP APIs). DSD's
// flatten_optimizer_state_dict=True instead writes {"state.<fqn>.<name>": value, "param_groups.<fqn>.<hp>": value}
// (one entry per parameter and hyperparameter, group membership implicit). Either can sit anywhere in the checkpoint
// (commonly under "optim" or "optimizer"); DCP ≤ 2.3 stored param_groups as one value, which the readers flatten.

#include "optscope/model/checkpoint.h"

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace optscope {

struct OptimizerParam
{
    std::string key; ///< the parameter's key in "state": an FQN, or an integer id as text
    std::map<std::string, const Entry*> states; ///< state name ("exp_avg", "step", ...) -> entry
};

struct OptimizerGroup
{
    std::vector<std::string> params; ///< "params" as text (ids or FQNs), in order
    std::vector<std::string> paramNames; ///< "param_names" if present
    std::map<std::string, const Entry*> hyperparams; ///< every other field -> entry
};

struct OptimizerView
{
    KeyPath root; ///< path of the optimizer state dict ({} when it is the whole checkpoint)
    bool flattened = false; ///< DSD flattened format
    /// flattened: the format stores no grouping (DSD takes it from the live optimizer when it loads), so `groups`
    /// is a guess: parameters with equal hyperparameters form one group. A training script may build more groups
    /// (per-parameter ones, several with equal values): never write them back as if they were stored
    bool groupsGuessed = false;
    bool idKeyed = false; ///< state keyed by integer ids (plain optimizer.state_dict())
    bool hasStateKey = false; ///< a "state" part was found at all (an empty state dict leaves no entries in DCP)
    std::vector<OptimizerParam> params; ///< in first-appearance order
    std::vector<OptimizerGroup> groups;
    /// flattened: every parameter named by a param_groups.<fqn>.<hp> key, in file order, with its hyperparameters
    std::vector<std::pair<std::string, std::map<std::string, const Entry*>>> flatParamHyperparams;
    /// params by key, filled by findOptimizers: callers look up every parameter, which a scan made quadratic
    /// (100k parameters: 5 s of a diff). A view built by hand without it is scanned
    std::unordered_map<std::string, size_t> paramIndex;

    std::string rootKey() const { return joinKeyPath(root); }
    const OptimizerParam* param(const std::string& key) const;
    /// every parameter named by param_groups, in order
    std::vector<std::string> groupParams() const;
};

/// All optimizer state dicts in @p checkpoint, outermost first.
std::vector<OptimizerView> findOptimizers(const Checkpoint& checkpoint);

} // namespace optscope
