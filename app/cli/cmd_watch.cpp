// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli watch DIR [--once] [--interval S] [--json] [--top N] [--rtol R] [--atol A]: the GUI's Watch panel in a
// terminal or a CI job. Both drive the core's RunFollower: the same steps, skips and changes.
#include "cli_common.h"

#include "optscope/analysis/run_follower.h"
#include "optscope/base/error.h"
#include "optscope/io/storage.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

namespace optscope::cli {

namespace {

std::string number(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

void print(const RunStepSummary& s, bool json, size_t shown)
{
    if (json) {
        nlohmann::ordered_json j;
        j["step"] = s.step;
        j["name"] = s.name;
        j["path"] = s.path;
        j["status"] = s.skipped ? "skipped" : s.compared ? "compared" : "read";
        if (s.skipped) j["reason"] = s.reason;
        j["entries"] = s.entries;
        if (s.compared) {
            j["changed"] = s.changed;
            j["only_before"] = s.gone;
            j["new"] = s.added;
            j["unreadable"] = s.unreadable;
        }
        if (!s.notes.empty()) j["notes"] = s.notes;
        j["top"] = nlohmann::ordered_json::array();
        for (size_t i = 0; i < s.top.size() && i < shown; ++i)
            j["top"].push_back({{"key", s.top[i].first}, {"max_abs_diff", s.top[i].second}});
        std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
        return;
    }
    std::string line
        = (s.step >= 0 ? "step " + std::to_string(s.step) + "  " : std::string()) + s.name + ": " + s.statusText();
    if (!s.top.empty() && shown > 0) {
        line += "; most changed:";
        for (size_t i = 0; i < s.top.size() && i < shown; ++i)
            line += (i ? ", " : " ") + s.top[i].first + " (max |Δ| " + number(s.top[i].second) + ")";
    }
    std::cout << line << std::endl;
}

} // namespace

int runWatch(const std::vector<std::string>& argv)
{
    const Args args(argv,
        {{"--once", false, "read the steps complete now, then exit"},
            {"--interval", true, "seconds between two looks at the folder (default 1.5, at least 0.1)"},
            {"--json", false, "one JSON object per step"}, {"--top", true, "most changed keys shown per step (3)"},
            {"--rtol", true, "relative tolerance"}, {"--atol", true, "absolute tolerance"},
            {"--help", false, "show this help", "-h"}});
    if (args.has("--help")) {
        std::cout << args.help("watch");
        return ExitOk;
    }
    if (args.positional().size() != 1) throw UsageError("watch takes one folder");
    DiffOptions options;
    options.rtol = nonNegativeNumber(args, "--rtol", 0);
    options.atol = nonNegativeNumber(args, "--atol", 0);
    // at least 0.1 s: a look lists the folder and stats its files, and 0 would do that without a pause
    const double interval = std::max(0.1, nonNegativeNumber(args, "--interval", 1.5));
    const auto topArg = args.value("--top");
    const size_t shown = topArg ? static_cast<size_t>(std::max(0, std::atoi(topArg->c_str()))) : 3;
    const bool json = args.has("--json"), once = args.has("--once");
    const Progress progress = terminalProgress();
    // a local folder that is not there: --once has nothing to wait for (a follow waits for the run to make it)
    if (once && !isUrl(args.positional()[0]) && !isFolder(args.positional()[0]))
        throw Error(ErrorKind::Io, args.positional()[0], "no such folder");
    RunFollower follower(args.positional()[0], options);
    std::string lastWait;
    int idleLooks = 0; // looks in a row that found nothing to read
    while (!(progress.cancelled && progress.cancelled())) {
        RunFollower::Next next;
        try {
            next = follower.poll();
        } catch (const Error& e) {
            // Ctrl-C while a look waits on a remote listing: it ends the watch, as between looks
            if (e.kind() == ErrorKind::Cancelled && progress.isCancelled()) break;
            throw;
        }
        if (next.kind == RunFollower::Next::Skip) {
            print(follower.skip(next), json, shown);
            idleLooks = 0;
            continue;
        }
        if (next.kind == RunFollower::Next::Read) {
            try {
                const auto read = RunFollower::readStep(next, follower.previous(), options, Progress {});
                print(follower.accept(next.entry, read), json, shown);
            } catch (const Error& e) {
                follower.failed(next.entry, e.what()); // not complete yet, or broken: said while it is waited for
            }
            idleLooks = 0;
            continue;
        }
        // a step still being written (or not opening yet) is waited for, and said so once
        if (next.reason != lastWait) {
            if (!next.reason.empty()) std::cerr << "waiting: " << next.reason << std::endl;
            lastWait = next.reason;
        }
        // --once: two looks in a row with nothing to read (an entry first seen needs a second look to be complete)
        if (once && ++idleLooks >= 2) break;
        for (double waited = 0; waited < interval && !(progress.cancelled && progress.cancelled()); waited += 0.1)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return ExitOk; // Ctrl-C is how a watch ends
}

} // namespace optscope::cli
