// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/checkpoint.h"

#include <optional>
#include <vector>

namespace optscope {

/// The first @p maxElements elements (row-major) of the entry's full tensor as doubles. Throws Error if the data
/// cannot be read.
std::vector<double> readTensorValues(const Checkpoint& checkpoint, const Entry& entry, size_t maxElements);

/// A single number: a one-element tensor, or a Python int/float/bool value. nullopt for anything else.
std::optional<double> readScalar(const Checkpoint& checkpoint, const Entry& entry);

} // namespace optscope
