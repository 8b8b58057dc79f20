// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli unflatten RANK_FILE... --model MODEL [--units PREFIX,...] -o OUT.pt [--json]
#include "cli_common.h"

#include "optscope/analysis/gather.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/optim/fsdp1_optim.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

namespace optscope::cli {

namespace {

/// "optim_rank10.pt" after "optim_rank2.pt": compare digit runs as numbers
bool naturalLess(const std::string& a, const std::string& b)
{
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (isdigit(static_cast<unsigned char>(a[i])) && isdigit(static_cast<unsigned char>(b[j]))) {
            size_t ie = i, je = j;
            while (ie < a.size() && isdigit(static_cast<unsigned char>(a[ie])))
                ++ie;
            while (je < b.size() && isdigit(static_cast<unsigned char>(b[je])))
                ++je;
            const std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
            if (na.size() != nb.size()) return na.size() < nb.size();
            if (na != nb) return na < nb;
            i = ie;
            j = je;
        } else {
            if (a[i] != b[j]) return a[i] < b[j];
            ++i;
            ++j;
        }
    }
    return a.size() - i < b.size() - j;
}

std::vector<std::string> splitComma(const std::string& s)
{
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        const size_t end = s.find(',', start);
        std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (!part.empty()) out.push_back(part);
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return out;
}

} // namespace

int runUnflatten(const std::vector<std::string>& argv)
{
    const Args args(argv,
        {{"--model", true, "checkpoint with the model's parameters"}, {"--units", true, "FSDP unit prefixes"},
            {"--output", true, "output torch.save file", "-o"}, {"--json", false, "print a JSON summary"},
            {"--no-fsync", false, "skip fsync before the final rename"}, {"--help", false, "show this help", "-h"}});
    if (args.has("--help")) {
        std::cout << args.help("unflatten");
        return ExitOk;
    }
    if (args.positional().empty()) throw UsageError("unflatten needs the rank files");
    const auto model = args.value("--model");
    if (!model) throw UsageError("unflatten needs --model MODEL (a checkpoint with the model's parameters)");
    const auto out = args.value("--output");
    if (!out || out->empty()) throw UsageError("unflatten needs -o OUT.pt");
    std::vector<std::string> files = args.positional();
    std::stable_sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
        return naturalLess(std::filesystem::path(a).filename().string(), std::filesystem::path(b).filename().string());
    });
    const Progress progress = terminalProgress();
    std::vector<CheckpointPtr> ranks;
    for (const auto& f : files)
        ranks.push_back(openCheckpoint(f, progress));
    CheckpointPtr modelCp = openCheckpoint(*model, progress);
    const Fsdp1Model layout = Fsdp1Model::fromCheckpoint(*modelCp, splitComma(args.value("--units").value_or("")));
    WriteOptions write;
    write.fsync = !args.has("--no-fsync");
    write.inputs = files; // no output over a rank file or the model
    write.inputs.push_back(*model);
    const UnflattenWritten written = unflattenToFile(ranks, *modelCp, layout, *out, progress, write);
    const UnflattenResult& r = written.result;
    const WriteStats& s = written.stats;
    finishTerminalProgress();
    if (args.has("--json")) {
        nlohmann::ordered_json j {{"output", *out}, {"world_size", ranks.size()}, {"use_orig_params", r.origParams},
            {"flat_params", r.flatParams}, {"params", r.params}, {"tensors", s.tensors},
            {"tensor_bytes", s.tensorBytes}, {"rank_files", files}, {"notes", r.notes}};
        std::cout << j.dump(2) << std::endl;
    } else {
        std::cout << "wrote " << *out << ": " << r.params << " parameters from ";
        if (r.origParams)
            std::cout << "per-parameter slices (use_orig_params=True)";
        else
            std::cout << r.flatParams << " flat parameters";
        std::cout << " on " << ranks.size() << " ranks (" << s.tensors << " tensors, " << humanBytes(s.tensorBytes)
                  << ")\n";
        for (const auto& n : r.notes)
            std::cout << "  " << n << "\n";
        std::cout << "  rank order: ";
        for (size_t i = 0; i < files.size(); ++i)
            std::cout << (i ? ", " : "") << files[i];
        std::cout << "\n";
    }
    return ExitOk;
}

} // namespace optscope::cli
