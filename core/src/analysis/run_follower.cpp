// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/run_follower.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/storage.h"
#include "optscope/model/reader_code.h"
#include "optscope/optim/optimizer_kind.h"

#include <algorithm>

namespace optscope {

std::string RunStepSummary::statusText() const
{
    std::string text = skipped ? "skipped: " + reason
        : !compared            ? "read (" + std::to_string(entries) + " entries)"
                    : std::to_string(changed) + " of " + std::to_string(entries) + " keys changed from the step before"
            + (gone ? ", " + std::to_string(gone) + " only in the step before" : std::string())
            + (added ? ", " + std::to_string(added) + " new" : std::string())
            + (unreadable ? ", " + std::to_string(unreadable) + " unreadable (not compared)" : std::string());
    for (const auto& n : notes)
        text += "; " + n;
    return text;
}

RunFollower::RunFollower(std::string folder, DiffOptions options, size_t trackedPerStep)
    : m_folder(readerLocation(folder))
    , m_options(options)
    , m_trackedPerStep(trackedPerStep)
{ }

RunFollower::Next RunFollower::poll()
{
    const std::vector<RunCheckpoint> entries = scanRunFolder(m_folder);
    const auto readAlready = [this](const RunCheckpoint& c) {
        return c.step < m_lastStep || (c.step == m_lastStep && c.name <= m_lastName);
    };
    const auto stable = [this](const RunCheckpoint& c) {
        auto before = m_lastSignature.find(c.path);
        return before != m_lastSignature.end() && before->second == c.signature;
    };
    // a step read before that the run wrote again, now at rest (resumed from an earlier step, it writes the steps
    // after that one again): read again from there, compared with the step before it (entries are in reading order:
    // the steps read already come first)
    for (size_t i = 0; i < entries.size() && readAlready(entries[i]); ++i) {
        const RunCheckpoint& c = entries[i];
        auto read = m_readSignature.find(c.path);
        if (read == m_readSignature.end() || read->second == c.signature || !stable(c)) continue;
        m_lastStep = i > 0 ? entries[i - 1].step : -1;
        m_lastName = i > 0 ? entries[i - 1].name : std::string();
        m_compareWith = i > 0 ? entries[i - 1].path : std::string();
        m_previous.reset();
        m_previousPath.clear();
        m_rewrittenNote = "read again: its files changed after it was read (it was still being written or uploaded "
                          "then, or the run resumed from an earlier step)";
        for (auto& [key, points] : m_series)
            points.erase(std::remove_if(points.begin(), points.end(),
                             [&c](const std::pair<int64_t, double>& p) { return p.first >= c.step; }),
                points.end());
        break;
    }
    // every entry's signature is kept, also those behind one still being written: a run caught up on reads them
    // once they are stable
    std::map<std::string, uint64_t> seen;
    for (const auto& c : entries)
        seen[c.path] = c.signature;
    const RunCheckpoint* next = nullptr;
    const RunCheckpoint* writing = nullptr;
    bool firstLook = false;
    bool laterComplete = false;
    for (const auto& c : entries) {
        if (readAlready(c)) continue;
        // behind a step read again: a later step as it was read, which the resumed run has not written again yet (it
        // is read again once it is)
        if (auto read = m_readSignature.find(c.path); read != m_readSignature.end() && read->second == c.signature)
            continue;
        if (!next) {
            if (!stable(c)) {
                writing = &c; // still being written (or new): the later ones wait behind it
                firstLook = !m_lastSignature.count(c.path);
                break;
            }
            next = &c;
        } else if (stable(c) && c.incomplete.empty()) {
            laterComplete = true;
            break;
        }
    }
    m_lastSignature = std::move(seen);
    Next out;
    if (writing)
        out.reason = writing->name
            + (firstLook ? " is new: read once its files rest until the next look" : " is still being written");
    if (!next) return out;
    out.entry = *next;
    if (!m_rewrittenNote.empty()) out.entry.notes.insert(out.entry.notes.begin(), m_rewrittenNote);
    if (auto failed = m_failed.find(next->path); failed != m_failed.end() && failed->second.first == next->signature) {
        // it did not open and has not changed since: skipped once a later step is complete, else waited for
        if (!laterComplete) {
            out.reason = next->name + " does not open yet (" + failed->second.second + ")";
            return out;
        }
        out.kind = Next::Skip;
        out.reason = failed->second.second;
        return out;
    }
    if (!next->incomplete.empty()) {
        // known to be written in parts (a Trainer's model first, its state last): waited for until a later step is
        // complete, which says this one's save ended; then read as it is
        if (!laterComplete) {
            out.reason = next->name + " " + next->incomplete;
            return out;
        }
        out.entry.notes.push_back("read though it " + next->incomplete + ": a later step is complete");
    }
    out.kind = Next::Read;
    out.newest = !laterComplete;
    if (!m_previous) out.compareWith = m_compareWith;
    return out;
}

namespace {

/// why @p e, met comparing a step with the one before, is about the step before (its files changed or went since it
/// was read): its text; empty when it is about the step being read
std::string previousStepFault(const Checkpoint& previous, const Error& e)
{
    if (!previous.files) return {};
    for (const auto& f : previous.files->knownFiles())
        if (f == e.file() || displayLocation(f) == e.file()) return e.what();
    try {
        previous.files->checkUnchanged();
    } catch (const Error& changed) {
        return changed.what();
    }
    return {};
}

} // namespace

RunFollower::StepRead RunFollower::readStep(
    const Next& next, const CheckpointPtr& previous, const DiffOptions& options, const Progress& progress)
{
    StepRead out;
    out.checkpoint = openCheckpoint(next.entry.path, progress);
    CheckpointPtr before = previous;
    if (!next.compareWith.empty()) {
        try {
            before = openCheckpoint(next.compareWith, progress);
        } catch (const Error& e) {
            if (e.kind() == ErrorKind::Cancelled) throw;
            out.notes.push_back(std::string("not compared: the step before it does not open (") + e.what() + ")");
        }
    }
    if (before) {
        try {
            out.report = diffCheckpoints(*out.checkpoint, *before, options, progress);
            out.compared = true;
            out.previous = before;
            out.previousPath = next.compareWith.empty() ? before->path : next.compareWith;
        } catch (const Error& e) {
            if (e.kind() == ErrorKind::Cancelled) throw;
            const std::string why = previousStepFault(*before, e);
            if (why.empty()) throw;
            // the run took the step before away, or rewrote it: this one is still read
            out.notes.push_back("not compared: the step before it changed after it was read (" + why + ")");
            out.report = {};
        }
    }
    // the next step is compared with this one as it is now, whatever the run does to its files meanwhile
    if (out.checkpoint->files) out.checkpoint->files->hold();
    return out;
}

RunStepSummary RunFollower::accept(const RunCheckpoint& entry, const StepRead& read)
{
    m_lastStep = entry.step;
    m_lastName = entry.name;
    m_failed.erase(entry.path);
    m_readSignature[entry.path] = entry.signature;
    m_compareWith.clear();
    m_rewrittenNote.clear();
    RunStepSummary s;
    s.name = entry.name;
    s.path = entry.path;
    s.step = entry.step;
    s.entries = read.checkpoint ? read.checkpoint->entries.size() : 0;
    s.compared = read.compared;
    s.notes = entry.notes;
    s.notes.insert(s.notes.end(), read.notes.begin(), read.notes.end());
    if (read.compared && m_skippedSinceRead && !read.previousPath.empty())
        s.notes.push_back("compared with " + locationName(read.previousPath) + ", the last step read");
    m_skippedSinceRead = false;
    if (read.checkpoint) {
        // what the step itself lacks (a file cut short, a tensor not there): a count of changes says nothing of it
        size_t errors = 0;
        const CheckpointWarning* first = nullptr;
        for (const auto& w : read.checkpoint->warnings) {
            if (w.isError && !errors++) first = &w;
            // names that may be wrong are worth a line on each step, as diff notes them
            if (w.code == ReaderCode::ParamOrderAssumed) s.notes.push_back("param-order-assumed: " + w.message);
        }
        if (first)
            s.notes.push_back(std::to_string(errors) + " error(s) in this step, first: " + first->message
                + (first->key.empty() ? "" : " (" + first->key + ")"));
    }
    if (read.compared) {
        s.entries = read.report.entries.size();
        std::vector<const DiffEntry*> tensors;
        for (const auto& e : read.report.entries) {
            // this step is A, the step before B
            if (e.status == DiffStatus::OnlyA)
                ++s.added;
            else if (e.status == DiffStatus::OnlyB)
                ++s.gone;
            else if (e.unreadable)
                ++s.unreadable;
            else if (e.status == DiffStatus::Changed)
                ++s.changed;
            if (e.tensor && (e.status == DiffStatus::Changed || e.status == DiffStatus::Equal)
                && !isStepCounterKey(e.key(), e.numel))
                tensors.push_back(&e);
        }
        std::sort(tensors.begin(), tensors.end(),
            [](const DiffEntry* a, const DiffEntry* b) { return a->maxAbsDiff > b->maxAbsDiff; });
        // the most changed are the changed ones only: within the tolerances a difference is no change
        for (const DiffEntry* e : tensors) {
            const bool top = e->status == DiffStatus::Changed && s.top.size() < m_trackedPerStep;
            if (top) s.top.emplace_back(e->key(), e->maxAbsDiff);
            if (top || m_series.count(e->key())) m_series[e->key()].emplace_back(entry.step, e->maxAbsDiff);
        }
    }
    m_previous = read.checkpoint;
    m_previousPath = entry.path;
    return s;
}

void RunFollower::failed(const RunCheckpoint& entry, const std::string& message)
{
    m_failed[entry.path] = {entry.signature, message};
}

RunStepSummary RunFollower::skip(const Next& next)
{
    m_lastStep = next.entry.step;
    m_lastName = next.entry.name;
    m_failed.erase(next.entry.path);
    m_readSignature[next.entry.path] = next.entry.signature;
    m_rewrittenNote.clear();
    m_skippedSinceRead = true;
    RunStepSummary s;
    s.name = next.entry.name;
    s.path = next.entry.path;
    s.step = next.entry.step;
    s.skipped = true;
    s.reason = next.reason;
    s.notes = next.entry.notes;
    return s;
}

} // namespace optscope
