// SPDX-License-Identifier: GPL-3.0-or-later
#include "cli_common.h"

#include "optscope/io/job.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <string>
#include <unistd.h>

namespace optscope::cli {

namespace {

volatile std::sig_atomic_t g_signal = 0;

void onInterrupt(int sig)
{
    if (!g_signal) {
        g_signal = sig; // the first cancels the work, which unwinds and removes its temporaries
        return;
    }
    // a second one ends the process now (as a second Ctrl-C does in most tools), but says so: what it leaves behind
    // is a temporary, never a partial output, and the next run that writes the same output removes it
    static const char kMessage[]
        = "\noptscope-cli: interrupted again: exiting now without cleaning up; a temporary (.NAME.tmp-PID-...) next "
          "to the output may remain, and the next run that writes that output removes it\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    ::_exit(128 + sig);
}

} // namespace

void installInterruptHandlers()
{
    struct sigaction sa
    { };
    sa.sa_handler = onInterrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
        ::sigaction(sig, &sa, nullptr);
}

int interruptingSignal()
{
    return g_signal;
}

namespace {

struct BarState
{
    std::mutex mutex;
    bool drawn = false;
    int lastPermille = -1;
    std::string lastStage;
    std::chrono::steady_clock::time_point lastDraw;
};

BarState& state()
{
    static BarState s;
    return s;
}

void draw(double fraction, std::string_view stage)
{
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    const int permille = static_cast<int>(std::max(0.0, std::min(1.0, fraction)) * 1000.0);
    const auto now = std::chrono::steady_clock::now();
    // redraw at most every 50 ms unless the stage changes or we are done
    if (permille == s.lastPermille && stage == s.lastStage) return;
    if (stage == s.lastStage && permille != 1000 && now - s.lastDraw < std::chrono::milliseconds(50)) return;
    s.lastPermille = permille;
    s.lastStage = std::string(stage);
    s.lastDraw = now;
    constexpr int width = 30;
    const int filled = permille * width / 1000;
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < width) bar += '>';
    bar.resize(width, ' ');
    std::fprintf(stderr, "\r[%s] %5.1f%% %-24.24s", bar.c_str(), permille / 10.0, s.lastStage.c_str());
    std::fflush(stderr);
    s.drawn = true;
}

} // namespace

Progress terminalProgress()
{
    Progress p;
    // in a job, rank 0 draws the job's progress; the others stay quiet
    if (::isatty(STDERR_FILENO) && Job::current().isRoot()) p.report = draw;
    // SIGINT/SIGTERM/SIGHUP cancel the work: the core unwinds, and every temporary is removed on the way out
    p.cancelled = [] { return interruptingSignal() != 0; };
    return p;
}

void finishTerminalProgress()
{
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.drawn) {
        std::fprintf(stderr, "\r%70s\r", "");
        std::fflush(stderr);
        s.drawn = false;
        s.lastPermille = -1;
        s.lastStage.clear();
    }
}

} // namespace optscope::cli
