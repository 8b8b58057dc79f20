// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Pause points for the fault-injection tests (tests/faults): with OPTSCOPE_PAUSE_AT=NAME and OPTSCOPE_PAUSE_FIFO=F
// in the environment, the first time the program reaches the point NAME it writes "NAME\n" to the FIFO F.out and
// waits for a line on F.in. The test truncates, replaces or removes a file, or kills the process, at exactly that
// moment instead of guessing with sleeps. Without the variables a point costs one cached getenv.
//   "opened"   a checkpoint's index is built, no tensor data read yet (openCheckpoint)
//   "writing"  an output's temporary file has its first bytes (OutputFile)
//   "leaving"  a job's process other than rank 0 is done with its share, about to say it leaves (Job::leave)

namespace optscope {

void pausePoint(const char* name);

} // namespace optscope
