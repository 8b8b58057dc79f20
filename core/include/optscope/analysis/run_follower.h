// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Following a training run's checkpoint folder as it grows (scanRunFolder): which step to read next, and what each
// step changed from the one before. The GUI's Watch panel and `optscope-cli watch` both drive a RunFollower, so they
// never disagree on which steps are complete, which are skipped, or what changed.
//
// An entry is complete once its files have not changed between two looks, it opens, and it is not known to be
// incomplete (RunCheckpoint::incomplete: a Trainer folder before its trainer_state.json). Entries are read in step
// order; one still being written holds back the ones after it. An entry that does not open is retried when its files
// change, and skipped (said so) once a later entry is complete; one known to be incomplete is read as it is once a
// later entry is complete. Catching up on a run that is already there reads every complete step; Next::newest says
// which one is the newest complete step.
//
// The step read last is held (CheckpointFiles::hold): the run may remove or replace it (save_total_limit, a rename
// over it) and the next step is still compared with it as it was read. When it cannot be (rewritten in place, or a
// file never read is gone), the next step is read and said not compared, and why: a run is never stuck behind a
// step it no longer has. A step already read that changes (a run resumed from an earlier step writes the steps
// after it again) is read again, compared with the step before it; the steps after it are read again as the run
// writes them again (until then they are the old run's, read already).

#include "optscope/analysis/diff_report.h"
#include "optscope/base/progress.h"
#include "optscope/formats/run_folder.h"
#include "optscope/model/checkpoint.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace optscope {

/// what one step changed from the one before, as the Watch panel's table and the CLI print it
struct RunStepSummary
{
    std::string name;
    std::string path;
    int64_t step = -1;
    bool skipped = false; ///< it never opened: reason says why
    std::string reason;
    size_t entries = 0;
    bool compared = false; ///< there was a step before it
    size_t changed = 0; ///< keys in both steps whose values differ
    size_t unreadable = 0; ///< keys in both that could not be read (a data file missing or cut short): not compared
    size_t added = 0; ///< keys only in this step
    size_t gone = 0; ///< keys only in the step before (a file of this step not there yet, or a state dropped)
    /// the tensors that changed most (max |Δ|, largest first; step counters left out: they move by the steps
    /// between two saves and would crowd out the keys that say something), at most trackedPerStep of them
    std::vector<std::pair<std::string, double>> top;
    /// what else a reader of this step should know: it was not compared and why, it was read before its run
    /// rewrote it, the checkpoint's own errors, which rank's file of a per-rank step was read
    std::vector<std::string> notes;
    /// "read (75 entries)", "12 of 75 keys changed from the step before", "skipped: …", then the notes
    std::string statusText() const;
};

class RunFollower
{
public:
    explicit RunFollower(std::string folder, DiffOptions options = {}, size_t trackedPerStep = 32);

    struct Next
    {
        enum Kind { Wait, Skip, Read } kind = Wait;
        RunCheckpoint entry;
        /// Read: no later entry is complete yet (a window follows this one only)
        bool newest = false;
        /// Skip: why it did not open. Wait: the entry still being written, or "" when there is nothing new
        std::string reason;
        /// Read: the step to compare with, to be opened by readStep, when the follower holds none for it (the steps
        /// after it were read before the run rewrote them); empty: previous()
        std::string compareWith;
    };
    /// looks at the folder once and says what to do now
    Next poll();

    /// what a step reads and how it compares with @p previous (null: the first step; Next::compareWith, when set, is
    /// opened instead); runs anywhere (a worker thread): it touches no follower state
    struct StepRead
    {
        CheckpointPtr checkpoint;
        bool compared = false;
        DiffReport report;
        CheckpointPtr previous; ///< what it was compared with
        std::string previousPath;
        std::vector<std::string> notes; ///< not compared, and why
    };
    static StepRead readStep(
        const Next& next, const CheckpointPtr& previous, const DiffOptions& options, const Progress& progress);
    /// poll() said Read and readStep() read it: it becomes the step the next one is compared with
    RunStepSummary accept(const RunCheckpoint& entry, const StepRead& read);
    /// poll() said Read but it did not open: retried when its files change, skipped once a later step is complete
    void failed(const RunCheckpoint& entry, const std::string& message);
    /// poll() said Skip
    RunStepSummary skip(const Next& next);

    const std::string& folder() const { return m_folder; }
    const DiffOptions& options() const { return m_options; }
    /// the last step read (the next one is compared with it), and its path
    const CheckpointPtr& previous() const { return m_previous; }
    const std::string& previousPath() const { return m_previousPath; }
    /// max |Δ| by step, for the keys that were ever among a step's trackedPerStep most changed (a run of 100k keys
    /// and thousands of steps keeps a few series, not one per key)
    const std::map<std::string, std::vector<std::pair<int64_t, double>>>& series() const { return m_series; }

private:
    std::string m_folder;
    DiffOptions m_options;
    size_t m_trackedPerStep;
    std::map<std::string, uint64_t> m_lastSignature; ///< by path, from the last look
    std::map<std::string, std::pair<uint64_t, std::string>> m_failed; ///< by path: signature when it failed, why
    std::map<std::string, uint64_t> m_readSignature; ///< by path: the signature of each step read, when it was read
    std::string m_compareWith; ///< Next::compareWith of the step read next
    std::string m_rewrittenNote; ///< said with the step read next: it is read again, and why
    bool m_skippedSinceRead = false; ///< a step was skipped since the last one read: the next is compared with that
    int64_t m_lastStep = -1;
    std::string m_lastName;
    CheckpointPtr m_previous;
    std::string m_previousPath;
    std::map<std::string, std::vector<std::pair<int64_t, double>>> m_series;
};

} // namespace optscope
