// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli check PATH [--json] [--no-data]
#include "cli_common.h"

#include "optscope/analysis/checkpoint_check.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/job.h"
#include "optscope/io/storage.h"

#include <iostream>
#include <nlohmann/json.hpp>

namespace optscope::cli {

std::vector<OptionSpec> checkOptions()
{
    return {{"--json", false, "print JSON"}, {"--no-data", false, "metadata only"},
        {"--no-crc", false, "do not verify the CRC-32 of zip records (reads every byte once)"},
        {"--help", false, "show this help", "-h"}};
}

int runCheck(const std::vector<std::string>& argv)
{
    const Args args(argv, checkOptions());
    if (args.has("--help")) {
        std::cout << args.help("check");
        return ExitOk;
    }
    if (args.positional().size() != 1) throw UsageError("check takes exactly one PATH");
    CheckOptions options;
    options.readChunks = !args.has("--no-data");
    options.checksums = !args.has("--no-crc");
    Job& job = Job::current();
    // metadata only (not worth splitting): rank 0 reads and checks it alone, and the others exit as it does. Each
    // process reading it all multiplied the metadata's requests and memory by the job's size (89 MB of .metadata at
    // 1,024 ranks, from object storage)
    const bool rootAlone = job.distributed() && !options.readChunks;
    if (rootAlone && !job.isRoot()) return job.broadcast("check-status", {}) == "clean" ? ExitOk : ExitFindings;
    const Progress progress = terminalProgress();
    CheckpointPtr cp = keptUntilExit(openCheckpoint(args.positional()[0], progress));
    const CheckReport report = checkCheckpoint(*cp, options, progress);
    finishTerminalProgress();
    if (rootAlone) job.broadcast("check-status", report.clean() ? "clean" : "findings");
    if (!job.isRoot()) // rank 0 speaks for the job; every process exits with the same status
        return report.clean() ? ExitOk : ExitFindings;
    if (args.has("--json")) {
        auto j = report.toJson();
        j["path"] = optscope::displayLocation(cp->path);
        std::cout << j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
    } else {
        for (const auto& f : report.findings)
            std::cout << severityName(f.severity) << " [" << f.name() << "]" << (f.key.empty() ? "" : " " + f.key)
                      << ": " << f.message << "\n";
        std::cout << (report.clean() ? "clean: " : std::to_string(report.findings.size()) + " finding(s): ")
                  << report.tensorsChecked << " tensors, " << report.chunksChecked << " chunks, "
                  << report.optimizersChecked << " optimizer state dict(s) checked in "
                  << optscope::displayLocation(cp->path) << "\n";
    }
    return report.clean() ? ExitOk : ExitFindings;
}

} // namespace optscope::cli
