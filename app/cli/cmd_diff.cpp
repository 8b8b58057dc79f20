// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli diff A B [--rtol R] [--atol A] [--json] | diff A --ranks R1,R2
#include "cli_common.h"

#include "optscope/analysis/diff_report.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/job.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

namespace optscope::cli {

namespace {

std::string number(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
}

} // namespace

std::vector<OptionSpec> diffOptions()
{
    return {{"--rtol", true, "relative tolerance"}, {"--atol", true, "absolute tolerance"},
        {"--ranks", true, "compare two ranks of one checkpoint: R1,R2"}, {"--json", false, "print JSON"},
        {"--csv", false, "print CSV (a row per key and per rank)"}, {"--all", false, "also list equal entries"},
        {"--threads", true, "threads"},
        {"--engine", true, "auto (fused kernel, ATen for other dtypes) or aten (ATen ops only, the reference)"},
        {"--help", false, "show this help", "-h"}};
}

int runDiff(const std::vector<std::string>& argv)
{
    const Args args(argv, diffOptions());
    if (args.has("--help")) {
        std::cout << args.help("diff");
        return ExitOk;
    }
    DiffOptions options;
    options.rtol = nonNegativeNumber(args, "--rtol");
    options.atol = nonNegativeNumber(args, "--atol");
    if (auto t = args.value("--threads")) options.threads = std::atoi(t->c_str());
    if (auto e = args.value("--engine")) {
        if (*e == "aten")
            options.engine = DiffEngine::Aten;
        else if (*e != "auto")
            throw UsageError("--engine is auto or aten, got '" + *e + "'");
    }
    // the text lists what differs: the equal are only counted, unless listed (a million equal values' rows are
    // most of such a diff's memory)
    options.keepEqual = args.has("--json") || args.has("--csv") || args.has("--all");
    const Progress progress = terminalProgress();
    DiffReport& report = *keptUntilExit(std::make_shared<DiffReport>());
    if (auto ranks = args.value("--ranks")) {
        if (args.positional().size() != 1) throw UsageError("diff --ranks R1,R2 takes one PATH");
        const auto comma = ranks->find(',');
        if (comma == std::string::npos) throw UsageError("--ranks needs two ranks, e.g. --ranks 0,1");
        int r1 = 0, r2 = 0;
        try {
            r1 = std::stoi(ranks->substr(0, comma));
            r2 = std::stoi(ranks->substr(comma + 1));
        } catch (...) {
            throw UsageError("--ranks needs two ranks, e.g. --ranks 0,1");
        }
        CheckpointPtr cp = keptUntilExit(openCheckpoint(args.positional()[0], progress));
        report = diffRanks(*cp, r1, r2, options, progress);
    } else {
        if (args.positional().size() != 2) throw UsageError("diff takes two paths A and B");
        CheckpointPtr a = keptUntilExit(openCheckpoint(args.positional()[0], progress));
        CheckpointPtr b = keptUntilExit(openCheckpoint(args.positional()[1], progress));
        report = diffCheckpoints(*a, *b, options, progress);
    }
    finishTerminalProgress();
    if (!Job::current().isRoot()) { // rank 0 speaks for the job; every process exits with the same status
        return report.equal ? ExitOk : ExitFindings;
    } else if (args.has("--json")) {
        report.writeJson(std::cout);
        std::cout << std::endl;
    } else if (args.has("--csv")) {
        report.writeCsv(std::cout);
    } else {
        for (const auto& n : report.notes)
            std::cout << "note: " << n << "\n";
        for (const auto& e : report.entries) {
            if (e.status == DiffStatus::Equal && !args.has("--all")) continue;
            std::cout << diffStatusName(e.status) << "  " << e.key();
            if (!e.keyB.empty() && e.keyB != e.key()) std::cout << "  <->  " << e.keyB;
            if (!e.reason.empty()) std::cout << "  (" << e.reason << ")";
            // NaN and inf stay out of max|d| and rms: said so where a pair is not finite (a max|d| of 0 beside
            // elements that differ would read as a contradiction), and their counts show where they are
            const bool nonFinite = e.valuesCompared && e.finitePairs < e.numel;
            if (e.status == DiffStatus::Changed && e.tensor && e.valuesCompared && e.numDiff > 0)
                std::cout << "  max|d|=" << number(e.maxAbsDiff) << " maxrel=" << number(e.maxRelDiff)
                          << " rms=" << number(e.rmsDiff)
                          << (nonFinite ? " (from the " + std::to_string(e.finitePairs) + " finite pairs)" : "")
                          << " diff=" << e.numDiff << "/" << e.numel;
            if (e.tensor && e.valuesCompared && (nonFinite || e.nanA != e.nanB || e.infA != e.infB))
                std::cout << "  nan=" << e.nanA << "->" << e.nanB << " inf=" << e.infA << "->" << e.infB;
            if (e.status == DiffStatus::Changed && !e.tensor) std::cout << "  " << e.valueA << " -> " << e.valueB;
            if (!e.match.empty() && e.match != "exact") std::cout << "  [" << e.match << "]";
            std::cout << "\n";
            for (const auto& r : e.ranks)
                if (r.numDiff > 0)
                    std::cout << "    rank " << r.rank << ": " << r.numDiff << " of " << r.numel
                              << " differ, max|d|=" << number(r.maxAbsDiff) << "\n";
        }
        std::cout << (report.equal ? "EQUAL" : "DIFFERENT") << ": " << report.count(DiffStatus::Equal) << " equal, "
                  << report.count(DiffStatus::Changed) << " changed, " << report.count(DiffStatus::OnlyA)
                  << " only in A, " << report.count(DiffStatus::OnlyB) << " only in B"
                  << (options.rtol > 0 || options.atol > 0
                             ? " (rtol " + number(options.rtol) + ", atol " + number(options.atol) + ")"
                             : " (bit-identical)");
        // equal as far as compared (the data of tensors inside a value not read): not hidden behind the summary's
        // "bit-identical"
        const size_t partly = static_cast<size_t>(std::count_if(
            report.entries.begin(), report.entries.end(), [](const DiffEntry& e) { return e.comparedInPart; }));
        if (partly)
            std::cout << "; " << partly << " of the equal compared in part only (the data of tensors inside a value"
                      << (args.has("--all") ? ": the reason above)" : ": --all lists them)");
        std::cout << "\n";
    }
    return report.equal ? ExitOk : ExitFindings;
}

} // namespace optscope::cli
