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

/// Which of two checkpoints of one run training reached later, as a comparison puts them (git diff's old and new):
/// the one whose optimizers' `step` is larger (the larger maximum, then the larger minimum), else the one written
/// later (its location's modification time; unknown for URLs).
struct TrainingOrder
{
    int later = 0; ///< > 0: the first checkpoint; < 0: the second; 0: cannot tell (equal or no steps, equal times)
    enum class By { Nothing, Step, WriteTime } by = By::Nothing;
};
TrainingOrder trainingOrder(const Checkpoint& a, const Checkpoint& b);

} // namespace optscope
