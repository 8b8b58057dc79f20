// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The optimizers' `step` counters of a checkpoint, summarised for a comparison's headline.

#include "optscope/model/checkpoint.h"

#include <string>

namespace optscope {

/// How the optimizers' `step` changed from @p a to @p b, for a diff's headline: "step 3 → 4", or with ranges when the
/// parameters disagree ("step 3–5 → 4–6"); empty when the steps are equal or either side has none. Unreadable steps
/// are skipped.
std::string stepChangeText(const Checkpoint& a, const Checkpoint& b);

} // namespace optscope
