// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/process_identity.h"

#include <cerrno>
#include <csignal>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace optscope {

namespace {

/// The state letter and start time (clock ticks since boot) of process @p pid from /proc; false when unreadable.
bool readProcessStat(const std::string& pid, std::string& state, std::string& start)
{
    std::ifstream stat("/proc/" + pid + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return false;
    // after the command's name in parentheses (which may hold anything, ')' too): the state, then 19 more fields
    const size_t close = line.rfind(')');
    if (close == std::string::npos) return false;
    std::istringstream rest(line.substr(close + 1));
    rest >> state;
    for (int field = 4; field <= 22 && rest >> start; ++field) { }
    return static_cast<bool>(rest);
}

/// the kernel's boot (boot_id) and this process's PID namespace (a container sharing the kernel has its own): what
/// PIDs mean; empty when /proc cannot tell
const std::string& thisMachine()
{
    static const std::string machine = [] {
        std::ifstream boot("/proc/sys/kernel/random/boot_id");
        std::string id;
        struct stat ns
        { };
        if (!std::getline(boot, id) || id.empty() || ::stat("/proc/self/ns/pid", &ns) != 0) return std::string();
        return id + ":" + std::to_string(ns.st_dev) + ":" + std::to_string(ns.st_ino);
    }();
    return machine;
}

} // namespace

/// This process as another process on the same machine can check it: "MACHINE PID START" (a PID given again to
/// another process has another START). Empty when /proc cannot tell.
std::string thisProcessIdentity()
{
    const std::string pid = std::to_string(::getpid());
    std::string state, start;
    if (thisMachine().empty() || !readProcessStat(pid, state, start)) return {};
    return thisMachine() + " " + pid + " " + start;
}

/// true when @p identity (another process's thisProcessIdentity()) names a process of this machine that has ended:
/// no such PID, a zombie (killed, not yet reaped), or another process under that PID. False when it cannot tell
/// (another machine or PID namespace, no /proc); a stopped process (SIGSTOP, a debugger, a frozen cgroup) lives
bool processEnded(const std::string& identity)
{
    const std::string& machine = thisMachine();
    if (machine.empty() || identity.size() <= machine.size() + 1 || identity.compare(0, machine.size(), machine) != 0
        || identity[machine.size()] != ' ')
        return false;
    std::istringstream fields(identity.substr(machine.size() + 1));
    long pid = 0;
    std::string start, stateNow, startNow;
    if (!(fields >> pid >> start) || pid <= 0) return false;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
    if (!readProcessStat(std::to_string(pid), stateNow, startNow)) return false;
    return stateNow == "Z" || stateNow == "X" || stateNow == "x" || startNow != start;
}

} // namespace optscope
