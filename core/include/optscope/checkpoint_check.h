// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/checkpoint.h"
#include "optscope/progress.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace optscope {

/// One structural problem. Codes are stable:
///  chunk-out-of-bounds, chunk-overlap, chunk-duplicate (same box on several ranks, same bytes), chunk-gap,
///  dtype-mismatch, shape-mismatch, chunk-truncated, missing-file, missing-storage-info, unreadable-chunk,
///  unreadable-value, bad-metadata, unsupported-transform, empty-optimizer-state, step-inconsistent
struct CheckFinding
{
    std::string code;
    std::string severity; ///< "error" or "warning"
    std::string key; ///< entry key, empty for checkpoint-wide findings
    std::string message;
    std::vector<int> ranks; ///< ranks involved
    std::vector<std::vector<int64_t>> offsets; ///< chunk offsets (or region starts) involved
};

struct CheckOptions
{
    bool readChunks = true; ///< open every chunk (DCP: its embedded archive) to check dtype, shape and extent
};

struct CheckReport
{
    std::vector<CheckFinding> findings;
    size_t tensorsChecked = 0;
    size_t chunksChecked = 0;
    size_t optimizersChecked = 0;
    bool clean() const { return findings.empty(); }
    nlohmann::ordered_json toJson() const;
};

/// Structural checks of a whole checkpoint: every tensor's chunk set (bounds, overlaps, coverage; with readChunks,
/// each chunk's stored dtype, shape and presence), and every optimizer state dict (empty state, `step` differing
/// between parameters or between ranks). Problems become findings; nothing throws for a damaged checkpoint except
/// cancellation.
CheckReport checkCheckpoint(
    const Checkpoint& checkpoint, const CheckOptions& options = {}, const Progress& progress = {});

} // namespace optscope
