// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/checkpoint.h"
#include "optscope/diagnosis.h"
#include "optscope/output_file.h"
#include "optscope/progress.h"

#include <string>

namespace optscope {

struct FixResult
{
    std::string output;
    std::vector<std::string> applied; ///< descriptions of the actions applied
    size_t renamedKeys = 0;
};

/// Applies every action of @p diagnosis to @p optim and writes the result to @p output in the input's format (a
/// torch.save file for torch.save input, a DCP folder for DCP input), under a temporary name renamed when complete.
/// Throws Error(Usage) if nothing is fixable.
FixResult applyFixes(const Checkpoint& optim, const Diagnosis& diagnosis, const std::string& output,
    const Progress& progress = {}, WriteOptions options = {});

} // namespace optscope
