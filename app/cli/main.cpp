// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli: the command-line twin of the OptScope GUI. Every subcommand calls the same core functions.
#include "cli_common.h"

#include "optscope/error.h"

#include <iostream>

namespace optscope::cli {

int runInspect(const std::vector<std::string>& argv);
int runDevices(const std::vector<std::string>& argv);

const std::vector<Command>& commands()
{
    static const std::vector<Command> list = {
        {"inspect", "list every entry of a checkpoint (keys, dtypes, shapes, chunks, values)",
            "usage: optscope-cli inspect PATH [--json] [--hash] [--threads N]\n"
            "\n"
            "PATH is a torch.save file or a torch.distributed.checkpoint folder (detected by content).\n"
            "  --json       print {\"format\", \"path\", \"entries\": [...], \"warnings\": [...]}\n"
            "  --hash       add the SHA-256 of every full tensor (row-major C order, little-endian)\n"
            "  --threads N  hashing threads (default: one per core)\n"
            "Exit status: 0 read (warnings allowed), 2 unreadable input or bad usage.\n",
            runInspect},
        {"devices", "list the GPUs (CUDA, NCCL) available for gather/verify", "usage: optscope-cli devices [--json]\n",
            runDevices},
    };
    return list;
}

} // namespace optscope::cli

int main(int argc, char** argv)
{
    using namespace optscope::cli;
    std::vector<std::string> args(argv + 1, argv + argc);
    auto usage = [] {
        std::cerr << "usage: optscope-cli COMMAND [ARGS...]\n\ncommands:\n";
        for (const auto& c : commands())
            std::cerr << "  " << c.name << std::string(c.name.size() < 10 ? 10 - c.name.size() : 1, ' ') << c.synopsis
                      << "\n";
        std::cerr << "\n'optscope-cli COMMAND --help' shows a command's options.\n";
    };
    if (args.empty()) {
        usage();
        return ExitError;
    }
    if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
        usage();
        return ExitOk;
    }
    if (args[0] == "--version") {
        std::cout << "optscope-cli " << OPTSCOPE_VERSION << std::endl;
        return ExitOk;
    }
    const std::string name = args[0];
    for (const auto& c : commands()) {
        if (c.name != name)
            continue;
        try {
            return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
        } catch (const UsageError& e) {
            printError(name, std::string(e.what()) + "\n" + c.usage);
            return ExitError;
        } catch (const optscope::Error& e) {
            printError(name, e.what());
            return ExitError;
        } catch (const std::exception& e) {
            printError(name, std::string("internal error: ") + e.what());
            return ExitError;
        }
    }
    printError("", "unknown command '" + name + "'");
    usage();
    return ExitError;
}
