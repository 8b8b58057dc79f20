// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Optimizer-aware comparison of two checkpoints of any formats and world sizes (or two ranks of one checkpoint).
// Keys are aligned through FQN normalisation (wrapper prefixes, integer ids <-> FQNs); numbers are compared by
// streaming both tensors block by block (never fully loaded), tensors in parallel. Same-dtype float32/float64/
// bfloat16/float16 blocks go through a fused one-pass kernel (src/diff_kernel.h: every statistic in one read of the
// bytes, where ATen needs a pass and a temporary per statistic); everything else, and every block when
// DiffEngine::Aten is asked for, through ATen ops, the reference the fused kernel is tested against.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <nlohmann/json_fwd.hpp> // the full header (25k lines) only where JSON is built

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace optscope {

/// what a key's comparison found
enum class DiffStatus { Equal, Changed, OnlyA, OnlyB };
/// "equal", "changed", "only_a", "only_b" (JSON, CSV, the CLI and the GUI's filter)
const char* diffStatusName(DiffStatus status);

/// how blocks of numbers are compared; both give the same report (tests/core/test_diff_kernel.cpp)
enum class DiffEngine {
    Auto, ///< the fused kernel where it handles the dtype pair, ATen otherwise
    Aten, ///< ATen ops only (the reference; slower: one pass per statistic)
};

struct DiffEntry;

struct DiffOptions
{
    double rtol = 0.0; ///< |a - b| <= atol + rtol * |b| counts as equal; both 0 = bit-identical
    double atol = 0.0;
    int threads = 0; ///< 0 = one per core
    size_t histogramBins = 0; ///< > 0: also a histogram of (a - b) per tensor, for the UI
    DiffEngine engine = DiffEngine::Auto;
    /// false: an Equal entry compared whole is counted (DiffReport::equalLeftOut), not kept, for a display that lists
    /// what differs (`diff` without --all): a diff of a million equal values then holds no million rows (464 MB)
    bool keepEqual = true;
    /// called with each entry as soon as it is compared (from worker threads, one call at a time), for displays that
    /// fill as the comparison runs; the report's order comes at the end
    std::function<void(const DiffEntry&)> onEntry;
};

/// per rank (of B's layout, or of the two ranks compared): which chunks differ
struct DiffRank
{
    int rank = -1;
    int64_t numel = 0;
    int64_t numDiff = 0;
    double maxAbsDiff = 0.0;
};

struct DiffEntry
{
    /// display key: A's key, or B's for only_b (derived, not a third copy: a million rows' keys)
    const std::string& key() const { return keyA.empty() ? keyB : keyA; }
    std::string keyA; ///< empty for only_b
    std::string keyB; ///< empty for only_a
    DiffStatus status = DiffStatus::Equal;
    bool tensor = false; ///< two tensors compared (or one, for only_a/only_b); else plain values
    /// the values were read and compared (false: a shape, numel or stored part that differs stopped it, and the
    /// numbers below say nothing)
    bool valuesCompared = false;
    bool unreadable = false; ///< Changed because one side could not be read (reason says why), not a difference
    /// Equal as far as compared: the data of tensors inside a value was not (all) compared (reason says why)
    bool comparedInPart = false;
    /// "tensor" or "value" (JSON, CSV)
    const char* typeName() const { return tensor ? "tensor" : "value"; }
    std::string reason; ///< why changed: "values differ", "shape [3, 4] -> [4, 3]", "dtype float32 -> bfloat16", ...
    std::string match; ///< how A's and B's keys were paired: "exact", "strip '_orig_mod.'", "id 3 -> 'fc.weight'", ...
    std::vector<int64_t> shapeA, shapeB;
    std::string dtypeA, dtypeB;
    int64_t numel = 0;
    int64_t numDiff = 0; ///< elements outside the tolerance (bitwise different when rtol = atol = 0)
    double maxAbsDiff = 0.0;
    double maxRelDiff = 0.0; ///< max |a - b| / |b| over elements with b != 0
    double rmsDiff = 0.0; ///< sqrt(mean((a - b)^2)), a pair not both finite counting 0
    /// pairs where both values are finite: max |a - b|, max rel and the RMS's differences are taken over these (a
    /// NaN or ±inf pair counts in numDiff and in the NaN/inf counts, never as a difference of 0 or inf)
    int64_t finitePairs = 0;
    int64_t nanA = 0, nanB = 0, infA = 0, infB = 0;
    std::vector<DiffRank> ranks;
    std::string valueA, valueB; ///< values: short renderings
    std::vector<double> histogramEdges; ///< (a - b) histogram when requested
    std::vector<int64_t> histogramCounts;
};

struct DiffReport
{
    std::string pathA, pathB;
    bool equal = true;
    std::vector<DiffEntry> entries;
    /// Equal entries compared whole that were not kept (DiffOptions::keepEqual false); count(Equal) includes them
    size_t equalLeftOut = 0;
    std::vector<std::string> notes; ///< normalisations applied, in words
    size_t count(DiffStatus status) const;
    /// {"equal": bool, "entries": [{"key", "status", "reason", "max_abs_diff", "max_rel_diff", "rms_diff", "num_diff",
    ///  "numel", ...}], ...}
    nlohmann::ordered_json toJson() const;
    /// toJson()'s text (indent 2), written entry by entry: a report of a million entries is not first built as one
    /// JSON document
    void writeJson(std::ostream& out) const;
    /// one row per entry and one per rank of it (`diff --csv`, the GUI's CSV export)
    std::string toCsv() const;
    /// toCsv()'s text, written row by row (`diff --csv`: a million entries are not first one string)
    void writeCsv(std::ostream& out) const;

private:
    nlohmann::ordered_json headJson() const; ///< toJson() with "entries" empty
};

/// Compares two checkpoints: exit semantics "equal within tolerance" = DiffReport::equal.
DiffReport diffCheckpoints(
    const Checkpoint& a, const Checkpoint& b, const DiffOptions& options = {}, const Progress& progress = {});

/// The histogram of a - b of one compared tensor pair of a report, read again from the two checkpoints (its keyA in
/// @p a, keyB in @p b): @p bins bins over [-max |Δ|, max |Δ|], what DiffOptions::histogramBins puts in every entry.
/// For a view that shows one pair at a time: a report of 100k keys then carries no 100k histograms (1 KB each) and
/// no second read of every tensor. Empty when the pair's values were not compared, none differs, the shapes differ or
/// the keys are not entries of the two checkpoints.
struct DiffHistogram
{
    std::vector<double> edges; ///< bins + 1
    std::vector<int64_t> counts;
};
DiffHistogram diffHistogram(
    const Checkpoint& a, const Checkpoint& b, const DiffEntry& entry, size_t bins, const Progress& progress = {});

/// Compares what rank @p rankA and rank @p rankB of one checkpoint hold: chunk by chunk, in order, for every tensor
/// both hold (replicated state, or any two ranks of per-rank files opened together).
DiffReport diffRanks(
    const Checkpoint& checkpoint, int rankA, int rankB, const DiffOptions& options = {}, const Progress& progress = {});

} // namespace optscope
