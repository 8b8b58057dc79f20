// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/diagnosis.h"
#include "optscope/base/progress.h"
#include "optscope/io/output_file.h"
#include "optscope/model/checkpoint.h"

#include <optional>
#include <string>
#include <vector>

namespace optscope {

struct FixResult
{
    std::string output;
    std::vector<std::string> applied; ///< descriptions of the actions applied
    size_t renamedKeys = 0;
};

/// A rename the user asks for (`fix --rename OLD=NEW`): a parameter name, or a module prefix (OLD=fc1 renames
/// fc1.weight and fc1.bias), applied to every optimizer's names and to the model state dict saved beside it.
struct UserRename
{
    std::string from;
    std::string to;
    /// "OLD=NEW"; throws Error(Usage) for anything else
    static UserRename parse(const std::string& text);
    /// the renamed name, or nullopt when the rename does not apply
    std::optional<std::string> apply(const std::string& name) const;
};

/// whether applyFixes writes @p optim's fixed copy as a DCP folder (else as one torch.save file): the format says
bool fixWritesDcpFolder(const Checkpoint& optim);

/// Applies every action of @p diagnosis, then @p renames, to @p optim and writes the result to @p output in the
/// input's format (a torch.save file for torch.save input, a DCP folder for DCP input; a Megatron-Core, DeepSpeed or
/// Trainer folder becomes one torch.save file, its per-group steps 0-dim float32 tensors; companion files such as
/// Fabric's meta.pt copied as they are: a fix that would change one of their entries throws), under a temporary name
/// renamed when complete. Every part that names parameters is rewritten: state keys, params, param_names, and the keys
/// of a model state dict saved beside the optimizer. Throws Error(Usage) if there is nothing to apply.
FixResult applyFixes(const Checkpoint& optim, const Diagnosis& diagnosis, const std::string& output,
    const Progress& progress = {}, WriteOptions options = {}, const std::vector<UserRename>& renames = {});

} // namespace optscope
