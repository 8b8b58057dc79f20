// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/base/progress.h"
#include "optscope/base/error.h"

namespace optscope {

void Progress::checkCancelled() const
{
    if (isCancelled()) throw Error(ErrorKind::Cancelled, {}, "cancelled");
}

} // namespace optscope
