// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// An optimizer's param_groups as one table, groups × hyperparameters (lr, betas, eps, weight_decay, ...), the way
// people compare them: the same columns in the same order for every group whatever order each group's dict has, and
// the cells where two checkpoints differ.

#include "optscope/model/checkpoint.h"
#include "optscope/optim/optimizer_view.h"

#include <string>
#include <vector>

namespace optscope {

struct ParamGroupsTable
{
    /// hyperparameter names: lr, betas, eps, weight_decay, momentum first (those present), then the others sorted;
    /// never params / param_names (the parameters are counted in paramCounts)
    std::vector<std::string> columns;
    /// [group][column]: the value as Python prints it, "" where the group lacks the field
    std::vector<std::vector<std::string>> cells;
    std::vector<size_t> paramCounts; ///< parameters per group
};

ParamGroupsTable paramGroupsTable(const Checkpoint& checkpoint, const OptimizerView& optimizer);

/// [group][column] of @p a: whether the cell differs from @p b's (the same group index, the same column name); a
/// group or column only in @p a differs
std::vector<std::vector<bool>> differingCells(const ParamGroupsTable& a, const ParamGroupsTable& b);

} // namespace optscope
