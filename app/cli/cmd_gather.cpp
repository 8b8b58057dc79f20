// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli gather PATH -o OUT.pt [--only KEY_PREFIX] [--device cpu|cuda] [--json]
#include "cli_common.h"

#include "optscope/analysis/gather.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/job.h"

#include <iostream>
#include <nlohmann/json.hpp>

namespace optscope::cli {

std::vector<OptionSpec> gatherOptions()
{
    return {{"--output", true, "output torch.save file", "-o"}, {"--only", true, "only keys with this prefix"},
        {"--device", true, "cpu or cuda"}, {"--json", false, "print a JSON summary"},
        {"--no-fsync", false, "skip fsync before the final rename"}, {"--help", false, "show this help", "-h"}};
}

int runGather(const std::vector<std::string>& argv)
{
    const Args args(argv, gatherOptions());
    if (args.has("--help")) {
        std::cout << args.help("gather");
        return ExitOk;
    }
    if (args.positional().size() != 1) throw UsageError("gather takes exactly one PATH");
    const auto out = args.value("--output");
    if (!out || out->empty()) throw UsageError("gather needs -o OUT.pt");
    GatherOptions options;
    options.onlyPrefix = args.value("--only").value_or("");
    options.device = computeDeviceFromName(args.value("--device").value_or("cpu"));
    options.write.fsync = !args.has("--no-fsync");
    const Progress progress = terminalProgress();
    CheckpointPtr cp = keptUntilExit(openCheckpoint(args.positional()[0], progress));
    const GatherResult r = gatherCheckpoint(*cp, *out, options, progress);
    finishTerminalProgress();
    if (!Job::current().isRoot()) return ExitOk; // rank 0 speaks for the job
    printDataWarnings(*cp);
    if (args.has("--json")) {
        nlohmann::ordered_json j {{"output", *out}, {"device", r.device}, {"tensors", r.stats.tensors},
            {"values", r.values}, {"left_out", r.leftOut}, {"tensor_bytes", r.stats.tensorBytes},
            {"file_bytes", r.stats.fileBytes}};
        std::cout << j.dump(2) << std::endl;
    } else {
        std::cout << "wrote " << *out << ": " << r.stats.tensors << " tensors (" << humanBytes(r.stats.tensorBytes)
                  << "), " << r.values << " values; assembled on " << r.device << "\n";
        printLeftOut(r.leftOut);
    }
    return ExitOk;
}

} // namespace optscope::cli
