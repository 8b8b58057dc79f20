// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli reshard PATH --world-size M (-o OUTDIR | --dry-run) [--layout fsdp2|fsdp1] [--device cpu|cuda] [--json]
#include "cli_common.h"

#include "optscope/analysis/reshard.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/job.h"

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

namespace optscope::cli {

int parseWorldSize(const Args& args)
{
    const auto w = args.value("--world-size");
    if (!w) throw UsageError("--world-size M is required");
    try {
        size_t used = 0;
        const int m = std::stoi(*w, &used);
        if (used != w->size() || m < 1 || m > 1 << 20) throw UsageError("");
        return m;
    } catch (...) {
        throw UsageError("--world-size needs a positive integer, got '" + *w + "'");
    }
}

std::vector<OptionSpec> reshardOptions()
{
    return {{"--world-size", true, "target world size M"}, {"--output", true, "output folder", "-o"},
        {"--layout", true, "fsdp2 (default) or fsdp1"}, {"--device", true, "cpu or cuda"},
        {"--json", false, "print a JSON summary"}, {"--no-fsync", false, "skip fsync before the final rename"},
        {"--dry-run", false, "plan only: print what would be written, read and write no data"},
        {"--help", false, "show this help", "-h"}};
}

int runReshard(const std::vector<std::string>& argv)
{
    const Args args(argv, reshardOptions());
    if (args.has("--help")) {
        std::cout << args.help("reshard");
        return ExitOk;
    }
    if (args.positional().size() != 1) throw UsageError("reshard takes exactly one PATH");
    const auto out = args.value("--output");
    const bool dryRun = args.has("--dry-run");
    if (!dryRun && (!out || out->empty())) throw UsageError("reshard needs -o OUTDIR");
    ReshardOptions options;
    options.worldSize = parseWorldSize(args);
    options.layout = shardingStyleFromName(args.value("--layout").value_or("fsdp2"));
    options.write.fsync = !args.has("--no-fsync");
    options.device = computeDeviceFromName(args.value("--device").value_or("cpu"));
    const Progress progress = terminalProgress();
    CheckpointPtr cp = keptUntilExit(openCheckpoint(args.positional()[0], progress));
    if (dryRun) {
        const ReshardSummary s = summarizeReshard(*cp, options);
        finishTerminalProgress();
        if (!Job::current().isRoot()) return ExitOk; // rank 0 speaks for the job
        const auto [minIt, maxIt] = std::minmax_element(s.bytesPerRank.begin(), s.bytesPerRank.end());
        if (args.has("--json")) {
            nlohmann::ordered_json j {{"dry_run", true}, {"world_size", s.worldSize},
                {"layout", options.layout == ShardingStyle::Fsdp2 ? "fsdp2" : "fsdp1"}, {"tensor_items", s.tensorItems},
                {"value_items", s.valueItems}, {"left_out", s.leftOut}, {"copied", s.copied}, {"bytes", s.bytes},
                {"bytes_per_rank", s.bytesPerRank}, {"chunks_per_rank", s.chunksPerRank}};
            std::cout << j.dump(2) << std::endl;
        } else {
            std::cout << "would write " << s.worldSize << " rank files: " << s.tensorItems << " tensor chunks, "
                      << s.valueItems << " values (" << humanBytes(s.bytes) << "); per rank " << humanBytes(*minIt)
                      << " to " << humanBytes(*maxIt) << "\n";
            for (const auto& c : s.copied)
                std::cout << "would copy " << c << " as it is\n";
            printLeftOut(s.leftOut);
        }
        return ExitOk;
    }
    const std::string device = describeComputeDevice(options.device); // before anything is read
    const DcpWriteStats s = reshardCheckpoint(*cp, *out, options, progress);
    finishTerminalProgress();
    if (!Job::current().isRoot()) return ExitOk; // rank 0 speaks for the job
    printDataWarnings(*cp);
    if (args.has("--json")) {
        nlohmann::ordered_json j {{"output", *out}, {"world_size", options.worldSize},
            {"layout", options.layout == ShardingStyle::Fsdp2 ? "fsdp2" : "fsdp1"}, {"files", s.files},
            {"tensor_items", s.tensorItems}, {"value_items", s.valueItems}, {"left_out", s.leftOut},
            {"copied", s.copied}, {"bytes", s.bytes}, {"device", device}};
        std::cout << j.dump(2) << std::endl;
    } else {
        std::string copied;
        for (const auto& c : s.copied)
            copied += ", " + c + " copied as it is";
        std::cout << "wrote " << *out << " for " << options.worldSize << " ranks: " << s.files
                  << " data files and .metadata" << copied << ", " << s.tensorItems << " tensor chunks, "
                  << s.valueItems << " values (" << humanBytes(s.bytes) << " in all); assembled on " << device << "\n";
        printLeftOut(s.leftOut);
    }
    return ExitOk;
}

} // namespace optscope::cli
