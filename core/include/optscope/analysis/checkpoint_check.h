// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"
#include "optscope/model/finding.h"
#include "optscope/optim/param_table.h"

#include <nlohmann/json_fwd.hpp> // the full header (25k lines) only where JSON is built

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace optscope {

/// Check findings are the one Finding type (finding.h), with its registry of codes.
using CheckFinding = Finding;

struct CheckOptions
{
    bool readChunks = true; ///< open every chunk (DCP: its embedded archive) to check dtype, shape and extent
    /// without readChunks: open the first chunk met in each data file only (one small read per file: a file
    /// overwritten or replaced by another kind shows there; damage further in needs readChunks)
    bool firstChunkPerFile = false;
    bool optimizers = true; ///< also the optimizer findings (optimizerFindings)
    /// with readChunks: verify the CRC-32 of every zip record (torch.save files, DCP's items) against the one its
    /// writer stored (reads every byte once)
    bool checksums = true;
};

struct CheckReport
{
    std::vector<CheckFinding> findings;
    size_t tensorsChecked = 0;
    size_t chunksChecked = 0;
    size_t optimizersChecked = 0;
    bool clean() const; ///< no error and no warning (info findings only describe)
    nlohmann::ordered_json toJson() const;
};

/// Structural checks of a whole checkpoint: every tensor's chunk set (bounds, overlaps, coverage; with readChunks,
/// each chunk's stored dtype, shape and presence), and every optimizer state dict (empty state, `step` differing
/// between parameters or between ranks). Problems become findings; nothing throws for a damaged checkpoint except
/// cancellation.

CheckReport checkCheckpoint(
    const Checkpoint& checkpoint, const CheckOptions& options = {}, const Progress& progress = {});

/// The findings about each optimizer on its own (empty state, steps, frozen parameters, unlisted state, formats),
/// shared by check and diagnose so that both report a problem under one code and severity.
std::vector<Finding> optimizerFindings(const Checkpoint& checkpoint, const ParamTable& table);

} // namespace optscope
