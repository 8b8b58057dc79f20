// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The missing/unexpected-key debugger: what is wrong between an optimizer checkpoint and the model it should load
// into, the exact error PyTorch would raise, and a fix that can be applied (fix.h).

#include "optscope/checkpoint.h"
#include "optscope/progress.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace optscope {

/// What the optimizer should match: the model's parameters (FQNs in order, shapes when known, and groups when the
/// reference is itself an optimizer checkpoint).
struct ExpectedParams
{
    std::string source; ///< where it came from, for messages
    std::vector<std::string> fqns;
    std::map<std::string, std::vector<int64_t>> shapes;
    std::vector<std::vector<std::string>> groups; ///< param_groups of a reference optimizer; empty otherwise

    /// a model state dict (file or DCP), or another optimizer checkpoint
    static ExpectedParams fromCheckpoint(const Checkpoint& model);
    /// a text file with one FQN per line ('#' comments; optional whitespace-separated shape "3,4")
    static ExpectedParams fromFqnList(const std::string& path);
};

/// One rename/re-key the fix will apply, at one optimizer.
struct FixAction
{
    std::string kind; ///< "rename-prefix", "rekey-ids", "unflatten-format", "cast-step", "regroup"
    std::string from; ///< e.g. "_orig_mod." / "3"
    std::string to; ///< e.g. "" / "fc.weight"
    std::string description;
};

/// Stable codes: prefix-mismatch, id-keyed, flattened-format, missing-state, unexpected-state, param-groups-mismatch,
/// shape-mismatch, step-inconsistent, step-dtype, shard-gap, shard-overlap, empty-state.
struct DiagnosisFinding
{
    std::string code;
    std::string severity; ///< "error" (load fails or state is lost), "warning" (loads, but check), "info"
    std::string message; ///< what is wrong, in words, naming keys/parameters
    std::string pytorchError; ///< the text PyTorch would raise (empty if PyTorch would load silently)
    std::string fix; ///< what to do; when the fix is mechanical, `optscope-cli fix` applies it
    std::string optimizer; ///< key of the optimizer state dict concerned
    std::vector<std::string> keys; ///< parameters/keys involved (first few)
    std::vector<FixAction> actions; ///< what `fix` would do for this finding
};

struct Diagnosis
{
    std::string path;
    std::string expectedSource;
    std::vector<DiagnosisFinding> findings;
    bool fixable() const; ///< some finding has actions
    nlohmann::ordered_json
    toJson() const; ///< {"findings": [{"code", "severity", "message", "pytorch_error", "fix", ...}]}
};

/// Diagnoses @p optim (any checkpoint holding one or more optimizer state dicts) against @p expected (may be null:
/// then only self-consistency is checked: steps, groups, shard structure, empty state).
Diagnosis diagnoseCheckpoint(const Checkpoint& optim, const ExpectedParams* expected, const Progress& progress = {});

} // namespace optscope
