// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli verify PATH [--world-size M] [--device cpu|cuda] [--against B] [--keep DIR] [--json]
#include "cli_common.h"

#include "optscope/analysis/verify_report.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/job.h"

#include <iostream>
#include <nlohmann/json.hpp>

namespace optscope::cli {

std::vector<OptionSpec> verifyOptions()
{
    return {{"--world-size", true, "M"}, {"--device", true, "cpu or cuda"}, {"--against", true, "a resharded copy"},
        {"--keep", true, "keep the resharded checkpoint in this new folder"}, {"--json", false, "print JSON"},
        {"--csv", false, "print CSV (a row per key and per rank)"}, {"--help", false, "show this help", "-h"}};
}

int runVerify(const std::vector<std::string>& argv)
{
    const Args args(argv, verifyOptions());
    if (args.has("--help")) {
        std::cout << args.help("verify");
        return ExitOk;
    }
    if (args.positional().size() != 1) throw UsageError("verify takes exactly one PATH");
    const Progress progress = terminalProgress();
    CheckpointPtr src = keptUntilExit(openCheckpoint(args.positional()[0], progress));
    VerifyReport report;
    if (const auto against = args.value("--against")) {
        if (Job::current().distributed())
            throw UsageError("--against runs as one process; as a job, verify reshards and compares by load");
        if (args.has("--world-size") || args.has("--keep"))
            throw UsageError("--against compares two existing checkpoints; --world-size and --keep do not apply");
        CheckpointPtr other = keptUntilExit(openCheckpoint(*against, progress));
        report = verifyAgainst(*src, *other, progress);
    } else {
        VerifyOptions options;
        if (args.has("--world-size")) options.worldSize = parseWorldSize(args);
        options.device = computeDeviceFromName(args.value("--device").value_or("cpu"));
        options.keepResharded = args.value("--keep").value_or("");
        report = verifyByLoad(*src, options, progress);
    }
    finishTerminalProgress();
    if (!Job::current().isRoot()) { // rank 0 speaks for the job; every process exits with the same status
        return report.identical() ? ExitOk : ExitFindings;
    } else if (args.has("--json")) {
        std::cout << report.toJson().dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
    } else if (args.has("--csv")) {
        report.writeCsv(std::cout);
    } else {
        for (const auto& e : report.entries) {
            if (e.status == VerifyStatus::Identical) continue;
            std::cout << verifyStatusName(e.status) << "  " << e.key;
            if (e.type == "tensor" && e.differing > 0)
                std::cout << "  (" << e.differing << " of " << e.elements << " elements differ)";
            if (!e.detail.empty()) std::cout << "  " << e.detail;
            std::cout << "\n";
            for (const auto& r : e.ranks)
                if (r.differing > 0)
                    std::cout << "    rank " << r.rank << ": " << r.differing << " of " << r.elements
                              << " elements differ, first at flat index " << r.firstDiff << "\n";
        }
        const size_t leftOut = report.count(VerifyStatus::LeftOut);
        std::cout << (report.identical() ? "IDENTICAL" : "DIFFERENT") << ": " << report.count(VerifyStatus::Identical)
                  << " of " << report.entries.size() << " entries bit-identical"
                  << (leftOut ? ", " + std::to_string(leftOut) + " left out (not writable)" : std::string()) << " ("
                  << humanBytes(report.bytesCompared) << " compared); " << report.source << " vs " << report.target
                  << "; loaded on " << report.device << "\n";
    }
    return report.identical() ? ExitOk : ExitFindings;
}

} // namespace optscope::cli
