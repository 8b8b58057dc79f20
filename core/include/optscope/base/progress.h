// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <functional>
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

    void operator()(double fraction, std::string_view stage) const
    {
        if (report) report(fraction, stage);
    }
    bool isCancelled() const { return cancelled && cancelled(); }
    /// throws Error(Cancelled) if the caller asked to stop
    void checkCancelled() const;
};

} // namespace optscope
