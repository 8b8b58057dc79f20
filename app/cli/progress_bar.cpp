// SPDX-License-Identifier: GPL-3.0-or-later
#include "cli_common.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <unistd.h>

namespace optscope::cli {

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
    if (::isatty(STDERR_FILENO)) p.report = draw;
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
