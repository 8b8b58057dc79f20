// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// A process as another process on the same machine can check it, later: whether it still runs. The processes of a
// job (job.cpp) tell a rank that died from one that is slow; a run's output journal (output_journal.h) tells what a
// killed run left from what a live one is writing.

#include <string>

namespace optscope {

/// This process as another process on the same machine can check it: "MACHINE PID START" (a PID given again to
/// another process has another START). Empty when /proc cannot tell.
std::string thisProcessIdentity();

/// true when @p identity (another process's thisProcessIdentity()) names a process of this machine that has ended:
/// no such PID, a zombie (killed, not yet reaped), or another process under that PID. False when it cannot tell
/// (another machine or PID namespace, no /proc); a stopped process (SIGSTOP, a debugger, a frozen cgroup) lives
bool processEnded(const std::string& identity);

} // namespace optscope
