// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace optscope {

struct Entry;

/// Progress reporting and cancellation for long core calls. Both callbacks are optional and may be called from
/// worker threads; they must be thread-safe.
struct Progress
{
    /// fraction in [0, 1] and a short stage label ("reading", "hashing", ...)
    std::function<void(double fraction, std::string_view stage)> report;
    /// polled between units of work; returning true makes the call throw Error(ErrorKind::Cancelled)
    std::function<bool()> cancelled;
    /// Readers that learn entries long before they finish (the DCP .metadata reader: each key with its dtype and
    /// shape, while most of the chunk index is still to come) hand them over in batches, in file order, so that a
    /// view can fill its list as the file is read. Each entry has a key, a one-element path (the flat key: the
    /// planner's structure comes later in the file) and a dtype and shape, no chunks. Optional; only the finished
    /// checkpoint counts.
    std::function<void(std::vector<Entry>&& batch)> entriesFound;

    void operator()(double fraction, std::string_view stage) const;
    bool isCancelled() const;
    /// throws Error(Cancelled) if the caller asked to stop
    void checkCancelled() const;
};

/// Whether this process's work moved since the last take: every progress report and every poll for cancellation
/// (Progress, CancelScope) marks it with one relaxed store. A job's heartbeat takes the mark at each beat, so that the
/// others can tell a process whose work goes on from one whose threads all wait on something that never comes (a
/// read from a hung file system, a deadlock) while its heartbeat thread still beats.
void markWorkMoved();
bool takeWorkMoved();

/// Makes a cancel predicate (a Progress's) the calling thread's for the scope's life, so that code which waits on
/// the world outside the process and has no Progress of its own (a remote request stalled on its server, a read
/// waiting for another thread's fetch) can give up when the work it serves is cancelled, instead of waiting out its
/// timeouts. Installed where work starts: a GUI job, a CLI command, a worker thread of a core call (with the
/// predicate of the thread that started it, current()). Scopes nest; the innermost counts, so an empty predicate
/// marks work that must run even after a cancel (removing what a cancelled output wrote).
class CancelScope
{
public:
    explicit CancelScope(std::function<bool()> cancelled);
    explicit CancelScope(const Progress& progress)
        : CancelScope(progress.cancelled)
    { }
    ~CancelScope();
    CancelScope(const CancelScope&) = delete;
    CancelScope& operator=(const CancelScope&) = delete;

    /// the calling thread's innermost predicate (empty outside every scope): for a worker thread to install
    static std::function<bool()> current();
    /// the calling thread's innermost predicate says stop
    static bool cancelled();
    /// throws Error(Cancelled) naming @p location if cancelled()
    static void check(const std::string& location);

private:
    std::function<bool()> m_cancelled;
    const CancelScope* m_outer;
};

/// Runs @p each(k) for every k in [0, count) on @p threads threads, the calling thread one of them, each worker under
/// the caller's cancel predicate (CancelScope::current()); items are taken in order, one at a time. The first
/// exception thrown (an Error, or a bad_alloc, which must not escape a worker thread: std::terminate) stops the others
/// from taking more and is rethrown on the calling thread once all have stopped.
void forEachOnThreads(size_t count, unsigned threads, const std::function<void(size_t)>& each);

} // namespace optscope
