// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli: the command-line twin of the OptScope GUI. Every subcommand calls the same core functions.
#include "cli_common.h"

#include "optscope/error.h"

#include <iostream>

namespace optscope::cli {

int runInspect(const std::vector<std::string>& argv);
int runDevices(const std::vector<std::string>& argv);
int runGather(const std::vector<std::string>& argv);
int runCheck(const std::vector<std::string>& argv);
int runReshard(const std::vector<std::string>& argv);

std::string commandUsage(const std::string& name)
{
    for (const auto& c : commands())
        if (c.name == name)
            return c.usage;
    return {};
}

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
        {"gather", "write the full state dict as one torch.save file (like dcp_to_torch_save)",
            "usage: optscope-cli gather PATH -o OUT.pt [--only KEY_PREFIX] [--device cpu|cuda] [--json]\n"
            "\n"
            "Assembles every tensor from its chunks and writes one torch.save file that\n"
            "torch.load(OUT, weights_only=True) reads: the same nesting, keys, tensors and values as\n"
            "torch.distributed.checkpoint.format_utils.dcp_to_torch_save writes. Tensor bytes are streamed\n"
            "chunk by chunk; the output appears under its name only when complete.\n"
            "  -o, --output OUT.pt  output file\n"
            "  --only KEY_PREFIX    only entries whose key is KEY_PREFIX or starts with KEY_PREFIX.\n"
            "  --device cpu|cuda    assemble in host memory (default) or on the local GPUs\n"
            "Exit status: 0 written, 2 error (the checkpoint is incomplete, unreadable, or bad usage).\n",
            runGather},
        {"check", "structural findings: coverage, overlaps, bounds, missing files, empty state, step",
            "usage: optscope-cli check PATH [--json] [--no-data]\n"
            "\n"
            "Checks every tensor's chunk set (in bounds, no overlaps, full coverage, one dtype, every storage\n"
            "file present and long enough) and the optimizer state (empty state, step that differs between\n"
            "parameters or ranks).\n"
            "  --json      print {\"clean\": bool, \"findings\": [{\"code\", \"severity\", \"key\", \"message\",\n"
            "              \"ranks\", \"offsets\"}]}\n"
            "  --no-data   metadata only: do not open the chunks themselves\n"
            "Exit status: 0 clean, 1 findings, 2 unreadable input or bad usage.\n",
            runCheck},
        {"reshard", "write a DCP checkpoint laid out for another world size",
            "usage: optscope-cli reshard PATH --world-size M -o OUTDIR [--layout fsdp2|fsdp1] [--json]\n"
            "\n"
            "Writes a torch.distributed.checkpoint folder (.metadata + __<rank>_0.distcp) laid out for M ranks,\n"
            "that torch.distributed.checkpoint.load reads on M ranks into get_state_dict of an FSDP2 model and\n"
            "optimizer. Non-tensor entries (param_groups, extras) are carried over.\n"
            "  --world-size M       target number of ranks\n"
            "  -o, --output OUTDIR  new folder (must not exist, or be empty)\n"
            "  --layout fsdp2       every tensor as DTensor Shard(0): torch.chunk on dim 0, empty trailing chunks\n"
            "  --layout fsdp1       as FSDP1's SHARDED_STATE_DICT: no chunks for ranks past the last row\n"
            "Exit status: 0 written, 2 error.\n",
            runReshard},
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
