// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Where a checkpoint's pickle names globals outside the safe set (os.system, a user's class, ...): the readers keep
// them inert and warn "unsafe-global"; this gives the views the class paths per entry, to name them and mark the rows.

#include "optscope/checkpoint.h"

#include <map>
#include <string>
#include <vector>

namespace optscope {

struct UnsafeGlobals
{
    /// entry key -> the unsafe class paths reachable from its value, sorted
    std::map<std::string, std::vector<std::string>> byKey;
    /// every unsafe class path of the checkpoint (also those no entry holds), sorted
    std::vector<std::string> classPaths;
    bool empty() const { return classPaths.empty() && byKey.empty(); }
};

/// The unsafe globals of @p checkpoint, from its "unsafe-global" warnings and the inert objects of their entries.
UnsafeGlobals findUnsafeGlobals(const Checkpoint& checkpoint);

} // namespace optscope
