// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli inspect PATH [--json] [--hash] [--threads N] [--raw]
#include "cli_common.h"

#include "optscope/analysis/inspect_report.h"
#include "optscope/base/display_text.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/unsafe_globals.h"
#include "optscope/io/storage.h"
#include "optscope/tensor/tensor_assembler.h"

#include <algorithm>
#include <iostream>

namespace optscope::cli {

namespace {

const std::vector<OptionSpec> kOptions = {
    {"--json", false, "print the report as JSON"},
    {"--hash", false, "add the SHA-256 of every full tensor (row-major, little-endian bytes)"},
    {"--threads", true, "hashing threads (default: one per core)"},
    {"--raw", false, "the file as torch.save wrote it, not the checkpoint it belongs to (a DeepSpeed rank file)"},
    {"--help", false, "show this help", "-h"},
};

std::string middleEllipsis(const std::string& s, size_t max)
{
    if (s.size() <= max) return s;
    const size_t keep = max - 3;
    return s.substr(0, keep / 2) + "..." + s.substr(s.size() - (keep - keep / 2));
}

std::string ranksText(const std::vector<int>& ranks, size_t chunks)
{
    std::string r = std::to_string(chunks) + (chunks == 1 ? " chunk" : " chunks");
    if (ranks.empty() || (ranks.size() == 1 && ranks[0] < 0)) return r;
    std::vector<int> known;
    for (int x : ranks)
        if (x >= 0) known.push_back(x);
    if (known.empty()) return r;
    const bool consecutive = known.back() - known.front() + 1 == static_cast<int>(known.size());
    std::string rs = known.size() == 1 ? "r" + std::to_string(known[0])
        : consecutive                  ? "r" + std::to_string(known.front()) + "-" + std::to_string(known.back())
                                       : std::to_string(known.size()) + " ranks";
    return r + " (" + rs + ")";
}

struct Row
{
    std::string key, dtype, shape, chunks, bytes, hash;
};

constexpr size_t kKeyWidth = 72, kValueWidth = 40; ///< the widest KEY and value cells: longer ones are cut

std::string keyCell(const Entry& e)
{
    // escaped here, newlines included: a key must not end its row and forge the next (the stream escapes the rest)
    return middleEllipsis(e.key.empty() ? std::string("<root>") : displayText(e.key), kKeyWidth);
}

std::string valueCell(const Entry& e)
{
    return middleEllipsis(e.error.empty() ? pyRepr(e.value, 60) : "<unreadable>", kValueWidth);
}

Row rowOf(const Checkpoint& cp, const InspectReport& report, size_t i, bool hash)
{
    const Entry& e = cp.entries[i];
    Row r;
    r.key = keyCell(e);
    if (e.isTensor()) {
        r.dtype = std::string(dtypeName(e.tensor->dtype));
        r.shape = shapeText(e.tensor->shape);
        r.chunks = ranksText(e.tensor->ranks(), e.tensor->chunks.size());
        r.bytes = humanBytes(e.tensor->nbytes());
        if (hash && !report.sha256Of(i).empty()) {
            r.hash = report.sha256Of(i).substr(0, 16);
            if (const auto view = broadcastStorageOf(e))
                r.hash += " (of the " + shapeText(view->stored.tensor->shape) + " it stores: a broadcast view)";
        }
    } else {
        r.dtype = inspectTypeName(e);
        r.shape = valueCell(e);
    }
    if (hash && !report.errorOf(i).empty()) r.hash = "<error>";
    return r;
}

/// two passes over the entries (column widths, then the lines) instead of holding 100k rows of strings
void printTable(const Checkpoint& cp, const InspectReport& report, bool hash)
{
    const Row head {"KEY", "DTYPE/TYPE", "SHAPE/VALUE", "CHUNKS", "BYTES", "SHA256"};
    size_t wk = head.key.size(), wd = head.dtype.size(), ws = head.shape.size(), wc = head.chunks.size();
    for (size_t i = 0; i < cp.entries.size(); ++i) {
        const Entry& e = cp.entries[i];
        if (!e.isTensor()) { // a value's cells only as far as they can widen their columns (1.5M reprs of a log)
            if (wk < kKeyWidth) wk = std::max(wk, keyCell(e).size());
            wd = std::max(wd, inspectTypeName(e).size());
            if (ws < kValueWidth) ws = std::max(ws, valueCell(e).size());
            continue;
        }
        const Row r = rowOf(cp, report, i, hash);
        wk = std::max(wk, r.key.size());
        wd = std::max(wd, r.dtype.size());
        ws = std::max(ws, r.shape.size());
        wc = std::max(wc, r.chunks.size());
    }
    auto pad = [](const std::string& s, size_t w) { return s + std::string(w > s.size() ? w - s.size() : 0, ' '); };
    auto print = [&](const Row& r) {
        std::string line = pad(r.key, wk) + "  " + pad(r.dtype, wd) + "  " + pad(r.shape, ws) + "  " + pad(r.chunks, wc)
            + "  " + pad(r.bytes, 10);
        if (hash) line += "  " + r.hash;
        while (!line.empty() && line.back() == ' ')
            line.pop_back();
        std::cout << line << "\n";
    };
    print(head);
    for (size_t i = 0; i < cp.entries.size(); ++i)
        print(rowOf(cp, report, i, hash));
    const auto& s = report.json["summary"];
    std::string ranks;
    const auto& rl = s["ranks"];
    if (!rl.empty())
        ranks = "; ranks " + std::to_string(rl.front().get<int>()) + "-" + std::to_string(rl.back().get<int>());
    std::cout << s["entries"].get<size_t>() << " entries: " << s["tensors"].get<size_t>() << " tensors ("
              << humanBytes(s["tensor_bytes"].get<uint64_t>()) << "), " << s["values"].get<size_t>() << " values"
              << ranks << "; " << report.json["format"].get<std::string>() << " (" << cp.formatDetail << ")\n";
    for (const auto& w : cp.warnings) {
        const WarningLabel label = warningLabel(cp, w);
        std::cerr << label.severity << " [" << label.code << "]" << (w.key.empty() ? "" : " " + w.key) << ": "
                  << w.message << "\n";
    }
}

int run(const std::vector<std::string>& argv)
{
    const Args args(argv, kOptions);
    if (args.has("--help")) {
        std::cout << args.help("inspect");
        return ExitOk;
    }
    if (args.positional().size() != 1) throw UsageError("inspect takes exactly one PATH");
    InspectOptions options;
    options.hash = args.has("--hash");
    options.listChunks = args.has("--json");
    options.entriesJson = false; // the table renders from the checkpoint, --json streams them (writeInspectJson)
    if (auto t = args.value("--threads")) {
        try {
            options.threads = std::stoi(*t);
        } catch (...) {
            throw UsageError("--threads needs a number");
        }
    }
    const Progress progress = terminalProgress();
    CheckpointPtr cp = keptUntilExit(args.has("--raw") ? openCheckpointFile(args.positional()[0], progress)
                                                       : openCheckpoint(args.positional()[0], progress));
    InspectReport& report = *keptUntilExit(std::make_shared<InspectReport>(inspectCheckpoint(*cp, options, progress)));
    finishTerminalProgress();
    if (args.has("--json")) {
        writeInspectJson(std::cout, *cp, report, options);
        std::cout << std::endl;
    } else
        printTable(*cp, report, options.hash);
    if (!report.ok) {
        std::string first;
        for (const auto& w : cp->warnings)
            if (w.isError) {
                first = w.message;
                break;
            }
        for (size_t i = 0; first.empty() && i < report.errors.size(); ++i)
            if (!report.errors[i].empty()) first = cp->entries[i].key + ": " + report.errors[i];
        printError(
            "inspect", optscope::displayLocation(cp->path) + ": parts of the checkpoint cannot be read: " + first);
        return ExitError;
    }
    return ExitOk;
}

} // namespace

int runInspect(const std::vector<std::string>& argv)
{
    return run(argv);
}

} // namespace optscope::cli
