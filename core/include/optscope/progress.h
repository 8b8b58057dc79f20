// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <functional>
#include <string_view>

namespace optscope {

/// Progress reporting and cancellation for long core calls. Both callbacks are optional and may be called from
/// worker threads; they must be thread-safe.
struct Progress
{
    /// fraction in [0, 1] and a short stage label ("reading", "hashing", ...)
    std::function<void(double fraction, std::string_view stage)> report;
    /// polled between units of work; returning true makes the call throw Error(ErrorKind::Cancelled)
    std::function<bool()> cancelled;

    void operator()(double fraction, std::string_view stage) const
    {
        if (report) report(fraction, stage);
    }
    bool isCancelled() const { return cancelled && cancelled(); }
    /// throws Error(Cancelled) if the caller asked to stop
    void checkCancelled() const;
};

} // namespace optscope
