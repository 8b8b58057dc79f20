// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/run_follower.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/storage.h"
#include "optscope/optim/optimizer_kind.h"

#include <algorithm>

namespace optscope {

std::string RunStepSummary::statusText() const
{
    if (skipped) return "skipped: " + reason;
    if (!compared) return "read (" + std::to_string(entries) + " entries)";
    return std::to_string(changed) + " of " + std::to_string(entries) + " keys changed from the step before";
}

RunFollower::RunFollower(std::string folder, DiffOptions options, size_t trackedPerStep)
    : m_folder(canonicalLocation(folder))
    , m_options(options)
    , m_trackedPerStep(trackedPerStep)
{ }

RunFollower::Next RunFollower::poll()
{
    const std::vector<RunCheckpoint> entries = scanRunFolder(m_folder);
    // every entry's signature is kept, also those behind one still being written: a run caught up on reads them
    // once they are stable
    std::map<std::string, uint64_t> seen;
    for (const auto& c : entries)
        seen[c.path] = c.signature;
    const RunCheckpoint* next = nullptr;
    const RunCheckpoint* writing = nullptr;
    bool laterStable = false;
    for (const auto& c : entries) {
        if (c.step < m_lastStep || (c.step == m_lastStep && c.name <= m_lastName)) continue; // read already
        auto before = m_lastSignature.find(c.path);
        const bool stable = before != m_lastSignature.end() && before->second == c.signature;
        if (!next) {
            if (!stable) {
                writing = &c; // still being written: the later ones wait behind it
                break;
            }
            next = &c;
        } else if (stable) {
            laterStable = true;
            break;
        }
    }
    m_lastSignature = std::move(seen);
    Next out;
    if (writing) out.reason = writing->name + " is still being written";
    if (!next) return out;
    out.entry = *next;
    if (auto failed = m_failed.find(next->path); failed != m_failed.end() && failed->second.first == next->signature) {
        // it did not open and has not changed since: skipped once a later step is complete, else waited for
        if (!laterStable) {
            out.reason = next->name + " does not open yet (" + failed->second.second + ")";
            return out;
        }
        out.kind = Next::Skip;
        out.reason = failed->second.second;
        return out;
    }
    out.kind = Next::Read;
    out.newest = !laterStable;
    return out;
}

RunFollower::StepRead RunFollower::readStep(
    const std::string& path, const CheckpointPtr& previous, const DiffOptions& options, const Progress& progress)
{
    StepRead out;
    out.checkpoint = openCheckpoint(path, progress);
    if (previous) {
        out.report = diffCheckpoints(*out.checkpoint, *previous, options, progress);
        out.compared = true;
    }
    return out;
}

RunStepSummary RunFollower::accept(const RunCheckpoint& entry, const StepRead& read)
{
    m_lastStep = entry.step;
    m_lastName = entry.name;
    m_failed.erase(entry.path);
    RunStepSummary s;
    s.name = entry.name;
    s.path = entry.path;
    s.step = entry.step;
    s.entries = read.checkpoint ? read.checkpoint->entries.size() : 0;
    s.compared = read.compared;
    if (read.compared) {
        s.entries = read.report.entries.size();
        std::vector<const DiffEntry*> tensors;
        for (const auto& e : read.report.entries) {
            if (e.status != DiffStatus::Equal) ++s.changed;
            if (e.type == "tensor" && (e.status == DiffStatus::Changed || e.status == DiffStatus::Equal)
                && !isStepCounterKey(e.key, e.numel))
                tensors.push_back(&e);
        }
        const size_t top = std::min(tensors.size(), m_trackedPerStep);
        std::partial_sort(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(top), tensors.end(),
            [](const DiffEntry* a, const DiffEntry* b) { return a->maxAbsDiff > b->maxAbsDiff; });
        for (size_t i = 0; i < tensors.size(); ++i) {
            const std::string& key = tensors[i]->key;
            if (i < top) s.top.emplace_back(key, tensors[i]->maxAbsDiff);
            if (i < top || m_series.count(key)) m_series[key].emplace_back(entry.step, tensors[i]->maxAbsDiff);
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
    RunStepSummary s;
    s.name = next.entry.name;
    s.path = next.entry.path;
    s.step = next.entry.step;
    s.skipped = true;
    s.reason = next.reason;
    return s;
}

} // namespace optscope
