// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// One-number entries (`step`, a 0-dim tensor, an int/float hyperparameter) shown as their value, as Python prints
// them, so every view and report renders `step` the same way: "3.0" for a float tensor, "3" for an integer one.

#include "optscope/model/checkpoint.h"

#include <optional>
#include <string>

namespace optscope {

/// Whether @p entry holds a single number: a tensor of one element (0-dim or not) or an int/float/bool value.
bool isScalarEntry(const Entry& entry);

/// The value of a scalar entry as Python prints `tensor.item()` / the value: "3.0" (floating point), "3" (integer
/// dtypes), "True"/"False" (bool); nullopt when the entry is not a scalar. Throws Error when the tensor cannot be read.
std::optional<std::string> scalarValueText(const Checkpoint& checkpoint, const Entry& entry);

} // namespace optscope
