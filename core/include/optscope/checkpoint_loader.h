// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/checkpoint.h"
#include "optscope/progress.h"

#include <string>

namespace optscope {

/// Opens any supported checkpoint, detecting the format by content: a folder (or .metadata file) of a DCP
/// checkpoint, or a torch.save file (zip or legacy). Anything else throws Error naming the path and what it is.
CheckpointPtr openCheckpoint(const std::string& path, const Progress& progress = {});

} // namespace optscope
