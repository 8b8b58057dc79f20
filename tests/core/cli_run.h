// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Running optscope-cli (OPTSCOPE_CLI) from a core test: its exit status, stdout and stderr.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

struct CliResult
{
    int exitCode = -1;
    std::string out;
    std::string err;
};

/// runs `optscope-cli ARGS` (@p args already shell-quoted) with stdin from /dev/null; its output goes through files
/// in @p workDir
inline CliResult runCli(const std::filesystem::path& workDir, const std::string& args)
{
    const std::filesystem::path out = workDir / "cli.out", err = workDir / "cli.err";
    const std::string cmd = std::string("'") + OPTSCOPE_CLI + "' " + args + " > '" + out.string() + "' 2> '"
        + err.string() + "' < /dev/null";
    const int status = std::system(cmd.c_str());
    CliResult r;
    if (status != -1 && WIFEXITED(status)) r.exitCode = WEXITSTATUS(status);
    auto slurp = [](const std::filesystem::path& p) {
        std::ifstream in(p, std::ios::binary);
        std::ostringstream s;
        s << in.rdbuf();
        return s.str();
    };
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}
