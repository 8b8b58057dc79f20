// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli diagnose OPTIM [--model MODEL] [--target-optim T] [--world-size M] [--json]; optscope-cli fix OPTIM
// --model MODEL -o OUT [--json]
#include "cli_common.h"

#include "optscope/analysis/checkpoint_fix.h"
#include "optscope/analysis/diagnosis.h"
#include "optscope/base/display_text.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"

#include <iostream>
#include <nlohmann/json.hpp>

namespace optscope::cli {

namespace {

/// MODEL: a checkpoint (file or DCP folder), or a text file listing FQNs
std::optional<ExpectedParams> expectedFrom(const Args& args, const Progress& progress)
{
    const auto model = args.value("--model");
    if (!model) return std::nullopt;
    return expectedParamsFrom(*model, progress);
}

std::optional<TargetOptimizer> targetFrom(const Args& args, const Progress& progress)
{
    const auto t = args.value("--target-optim");
    if (!t) return std::nullopt;
    return TargetOptimizer::fromCheckpoint(*openCheckpoint(*t, progress));
}

void printDiagnosis(const Diagnosis& d)
{
    for (const auto& f : d.findings) {
        std::cout << severityName(f.severity) << " [" << f.name() << "]" << (f.key.empty() ? "" : " " + f.key) << ": "
                  << f.message << "\n";
        // the loading library's own words: PyTorch's, or DeepSpeed's for the zero-* findings of a ZeRO folder
        if (!f.pytorchError.empty()) std::cout << "    " << findingLoader(f.code) << ": " << f.pytorchError << "\n";
        if (!f.fix.empty())
            std::cout << "    fix: " << f.fix << (f.actions.empty() ? "" : " [optscope-cli fix applies it]") << "\n";
    }
    for (const auto& n : d.notes)
        std::cout << "note: " << n << "\n";
    if (!d.verdicts.empty()) std::cout << d.verdictsTitle() << ":\n";
    for (const auto& v : d.verdicts)
        std::cout << "  " << loadPathName(v.path) << ": " << v.outcomeText() << "\n";
    std::cout << d.findings.size() << " finding(s) in " << d.path
              << (d.expectedSource.empty() ? "" : " against " + d.expectedSource)
              << (d.optimizerKind.empty() ? "" : " (" + d.optimizerKind + ")") << "\n";
}

} // namespace

int runDiagnose(const std::vector<std::string>& argv)
{
    const Args args(argv,
        {{"--model", true, "model, reference optimizer or FQN list"},
            {"--target-optim", true, "the optimizer the loading code builds (its param groups)"},
            {"--world-size", true, "data-parallel ranks of the loading run"}, {"--json", false, "print JSON"},
            {"--help", false, "show this help", "-h"}});
    if (args.has("--help")) {
        std::cout << args.help("diagnose");
        return ExitOk;
    }
    if (args.positional().size() != 1) throw UsageError("diagnose takes exactly one OPTIM path");
    const Progress progress = terminalProgress();
    CheckpointPtr cp = openCheckpoint(args.positional()[0], progress);
    const auto expected = expectedFrom(args, progress);
    const auto target = targetFrom(args, progress);
    const int worldSize = args.has("--world-size") ? parseWorldSize(args) : 0;
    const Diagnosis d
        = diagnoseCheckpoint(*cp, expected ? &*expected : nullptr, progress, target ? &*target : nullptr, worldSize);
    finishTerminalProgress();
    if (args.has("--json"))
        std::cout << d.toJson().dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
    else
        printDiagnosis(d);
    return d.hasProblems() ? ExitFindings : ExitOk;
}

int runFix(const std::vector<std::string>& argv)
{
    const Args args(argv,
        {{"--model", true, "model, reference optimizer or FQN list"},
            {"--target-optim", true, "the optimizer the loading code builds (its param groups)"},
            {"--rename", true, "OLD=NEW: rename a parameter or module prefix (repeatable)"},
            {"--output", true, "output (file, or folder for DCP input)", "-o"}, {"--json", false, "print JSON"},
            {"--no-fsync", false, "skip fsync before the rename"}, {"--help", false, "show this help", "-h"}});
    if (args.has("--help")) {
        std::cout << args.help("fix");
        return ExitOk;
    }
    if (args.positional().size() != 1) throw UsageError("fix takes exactly one OPTIM path");
    const auto out = args.value("--output");
    if (!out || out->empty()) throw UsageError("fix needs -o OUT");
    const Progress progress = terminalProgress();
    CheckpointPtr cp = openCheckpoint(args.positional()[0], progress);
    const auto expected = expectedFrom(args, progress);
    const auto target = targetFrom(args, progress);
    const Diagnosis d = diagnoseCheckpoint(*cp, expected ? &*expected : nullptr, progress, target ? &*target : nullptr);
    std::vector<UserRename> renames;
    for (const auto& r : args.values("--rename"))
        renames.push_back(UserRename::parse(r));
    WriteOptions write;
    write.fsync = !args.has("--no-fsync");
    for (const char* input : {"--model", "--target-optim"}) // the output must not replace them either
        if (const auto path = args.value(input)) write.inputs.push_back(*path);
    const FixResult r = applyFixes(*cp, d, *out, progress, write, renames);
    // what the fix did: the written copy diagnosed against the same model, finding code by finding code
    const CheckpointPtr fixed = openCheckpoint(r.output, progress);
    const DiagnosisChange change = compareDiagnoses(
        d, diagnoseCheckpoint(*fixed, expected ? &*expected : nullptr, progress, target ? &*target : nullptr));
    finishTerminalProgress();
    if (args.has("--json")) {
        nlohmann::ordered_json j {{"output", r.output}, {"applied", r.applied}, {"renamed_keys", r.renamedKeys},
            {"diagnosis", d.toJson()}, {"after_fix", change.toJson()}};
        std::cout << j.dump(2) << std::endl;
    } else {
        for (const auto& a : r.applied)
            std::cout << "applied " << a << "\n";
        std::cout << "wrote " << r.output << " (" << r.renamedKeys << " keys renamed)\n";
        auto list = [](const std::vector<DiagnosisChange::CodeCount>& codes) {
            std::string text;
            for (const auto& c : codes)
                text += (text.empty() ? "" : ", ") + std::string(findingName(c.code)) + " (" + c.countText() + ")";
            return text;
        };
        std::cout << "the fixed copy, diagnosed again: ";
        if (change.resolved.empty() && change.remaining.empty() && change.added.empty() && change.broken.empty())
            std::cout << "no problems before or after\n";
        else {
            std::cout << "resolved: " << (change.resolved.empty() ? "none" : list(change.resolved));
            if (!change.remaining.empty()) std::cout << "; still there: " << list(change.remaining);
            if (!change.added.empty()) std::cout << "; new: " << list(change.added);
            if (!change.broken.empty())
                std::cout << "; it fails where the original loads: " << displayText(change.brokenText());
            std::cout << (change.noErrorsLeft() ? "; no error is left\n" : "; errors are left\n");
        }
    }
    return ExitOk;
}

} // namespace optscope::cli
