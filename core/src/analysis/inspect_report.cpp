// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/inspect_report.h"
#include "optscope/analysis/json_text.h"
#include "optscope/base/display_text.h"
#include "optscope/base/error.h"
#include "optscope/formats/unsafe_globals.h"
#include "optscope/io/storage.h"
#include "optscope/model/read_guard.h"
#include "optscope/pickle/value_json.h"
#include "optscope/tensor/tensor_assembler.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

namespace optscope {

namespace {

using json = nlohmann::ordered_json;

json pathJson(const KeyPath& path)
{
    json p = json::array();
    for (const auto& e : path) {
        if (e.isIndex())
            p.push_back(e.index);
        else
            p.push_back(e.key);
    }
    return p;
}

} // namespace

std::string inspectTypeName(const Entry& entry)
{
    if (entry.isTensor()) return "tensor";
    const PyValue* v = entry.value;
    if (v->kind == PyKind::Object) {
        const std::string c = v->className();
        return c.empty() ? "object" : c;
    }
    return pyTypeName(v);
}

namespace {

/// one element of the document's "entries": what inspectCheckpoint keeps and writeInspectJson streams alike
json entryJson(const Entry& e, const InspectOptions& options, bool failed, const std::string& error,
    const std::string& sha256, json&& renderedValue)
{
    json je;
    je["key"] = e.key;
    if (!isUtf8(e.key)) je["key_hex"] = hexBytes(e.key); // the exact bytes (README: JSON output)
    je["path"] = pathJson(e.path);
    if (e.isTensor()) {
        const TensorEntry& t = *e.tensor;
        je["type"] = "tensor";
        je["dtype"] = std::string(dtypeName(t.dtype));
        je["shape"] = t.shape;
        je["numel"] = t.numel();
        je["bytes"] = t.nbytes();
        if (!t.subclass.empty()) je["subclass"] = t.subclass.str();
        if (!t.placements.empty()) je["placements"] = t.placements.str();
        if (const auto view = broadcastStorageOf(e))
            je["broadcast_view"] = {{"stored_shape", view->stored.tensor->shape}, {"repeats", view->repeats}};
        if (options.listChunks) {
            json chunks = json::array();
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                json jc;
                jc["rank"] = t.chunks.rank(c) >= 0 ? json(t.chunks.rank(c)) : json(nullptr);
                jc["offsets"] = t.chunks.offsetsOf(c).vec();
                jc["sizes"] = t.chunks.sizesOf(c).vec();
                jc["file"] = t.chunks.fileOf(c);
                chunks.push_back(std::move(jc));
            }
            je["chunks"] = std::move(chunks);
        } else {
            je["chunk_count"] = t.chunks.size();
        }
        if (options.hash && !failed) {
            if (t.storesNoData())
                je["sha256"] = nullptr;
            else
                je["sha256"] = sha256;
        }
    } else {
        je["type"] = "value";
        je["python_type"] = inspectTypeName(e);
        je["value"] = std::move(renderedValue);
    }
    if (failed) je["error"] = error;
    return je;
}

/// a renderer of @p cp's value entries, in entry order, with one budget: entries sharing one large object must not
/// render it once each
ValueJsonRenderer valueRenderer(const Checkpoint& cp)
{
    std::vector<const PyValue*> roots;
    for (const auto& e : cp.entries)
        if (!e.isTensor()) roots.push_back(e.value);
    return ValueJsonRenderer(roots);
}

} // namespace

/// the SHA-256 of every tensor that stores data, in parallel (largest first, so that the pool stays busy): @p hashes
/// and @p errors by entry, an error in place of a hash that could not be made
static void hashEveryTensor(const Checkpoint& cp, const InspectOptions& options, const Progress& progress,
    std::vector<std::string>& hashes, std::vector<std::string>& errors)
{
    std::vector<size_t> order;
    uint64_t totalBytes = 0;
    for (size_t i = 0; i < cp.entries.size(); ++i)
        if (cp.entries[i].isTensor() && !cp.entries[i].tensor->storesNoData()) { // no bytes, no hash (null)
            order.push_back(i);
            totalBytes += cp.entries[i].tensor->nbytes();
        }
    std::sort(order.begin(), order.end(),
        [&](size_t a, size_t b) { return cp.entries[a].tensor->nbytes() > cp.entries[b].tensor->nbytes(); });
    std::atomic<uint64_t> doneBytes {0};
    std::mutex progressMutex;
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const unsigned nthreads = std::max(1u,
        std::min<unsigned>(options.threads > 0 ? unsigned(options.threads) : hw, static_cast<unsigned>(order.size())));
    try {
        forEachOnThreads(order.size(), nthreads, [&](size_t k) {
            const size_t i = order[k];
            uint64_t reported = 0;
            try {
                hashes[i] = hashTensor(cp, cp.entries[i], progress, [&](uint64_t bytes) {
                    doneBytes += bytes - reported;
                    reported = bytes;
                    std::lock_guard<std::mutex> lock(progressMutex);
                    progress(totalBytes ? double(doneBytes) / double(totalBytes) : 1.0, "hashing");
                });
            } catch (const Error& e) {
                if (e.kind() == ErrorKind::Cancelled) throw;
                errors[i] = e.what();
            } catch (const std::exception& e) {
                errors[i] = std::string("cannot hash: ") + e.what();
            }
            doneBytes += cp.entries[i].tensor->nbytes() - reported;
        });
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::Cancelled) throw Error(ErrorKind::Cancelled, cp.path, "cancelled");
        throw;
    }
}

/// the reader's warnings as the report lists them
static json warningsJson(const Checkpoint& cp)
{
    json warnings = json::array();
    for (const auto& w : cp.warnings) {
        const WarningLabel label = warningLabel(cp, w);
        warnings.push_back({{"code", label.code}, {"severity", label.severity}, {"message", w.message},
            {"key", w.key.empty() ? json(nullptr) : json(w.key)}});
    }
    return warnings;
}

static InspectReport inspectCheckpointUnguarded(
    const Checkpoint& cp, const InspectOptions& options, const Progress& progress)
{
    InspectReport report;
    report.ok = !cp.hasErrors();
    // per entry only where something can be there: 100k keys without --hash would carry 6 MB of empty strings
    std::vector<std::string> hashes(options.hash ? cp.entries.size() : 0);
    std::vector<std::string> errors(options.hash ? cp.entries.size() : 0);
    if (options.hash) hashEveryTensor(cp, options, progress, hashes, errors);

    json& j = report.json;
    j["format"] = checkpointFormatName(cp.format);
    j["path"] = displayLocation(cp.path); // a URL without its password and query
    j["detail"] = cp.formatDetail;
    j["pickle_protocol"] = cp.pickleProtocol;
    std::vector<int> ranks;
    std::vector<bool> seenRank;
    size_t tensors = 0, values = 0;
    std::optional<ValueJsonRenderer> renderer;
    if (options.entriesJson) renderer.emplace(valueRenderer(cp));
    json entries = json::array();
    for (size_t i = 0; i < cp.entries.size(); ++i) {
        const Entry& e = cp.entries[i];
        if (!e.error.empty()) {
            if (errors.empty()) errors.resize(cp.entries.size());
            errors[i] = e.error;
        }
        const bool failed = i < errors.size() && !errors[i].empty();
        if (failed) report.ok = false;
        if (e.isTensor()) {
            ++tensors;
            for (size_t c = 0; c < e.tensor->chunks.size(); ++c) {
                const int r = e.tensor->chunks.rank(c);
                if (r < 0) continue;
                if (static_cast<size_t>(r) >= seenRank.size()) seenRank.resize(static_cast<size_t>(r) + 1);
                if (!seenRank[static_cast<size_t>(r)]) ranks.push_back(r);
                seenRank[static_cast<size_t>(r)] = true;
            }
        } else {
            ++values;
        }
        if (!options.entriesJson) continue;
        json rendered = e.isTensor() ? json() : renderer->render(e.value);
        json je = entryJson(e, options, failed, failed ? errors[i] : std::string(),
            i < hashes.size() ? hashes[i] : std::string(), std::move(rendered));
        entries.push_back(std::move(je));
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    j["summary"] = {{"entries", cp.entries.size()}, {"tensors", tensors}, {"values", values},
        {"tensor_bytes", cp.tensorBytes()}, {"ranks", ranks}};
    if (options.entriesJson) j["entries"] = std::move(entries);
    j["warnings"] = warningsJson(cp);
    for (size_t i = 0; i < hashes.size() && i < errors.size(); ++i)
        if (!errors[i].empty()) hashes[i].clear();
    report.sha256 = std::move(hashes);
    report.errors = std::move(errors);
    return report;
}

InspectReport inspectCheckpoint(const Checkpoint& cp, const InspectOptions& options, const Progress& progress)
{
    return readGuarded({&cp}, [&] { return inspectCheckpointUnguarded(cp, options, progress); });
}

void writeInspectJson(
    std::ostream& out, const Checkpoint& cp, const InspectReport& report, const InspectOptions& options)
{
    // one entry at a time: 1.7M value entries (a long trainer_state log) as JSON objects took 1.6 GB at once
    ValueJsonRenderer renderer = valueRenderer(cp);
    out << "{";
    bool first = true;
    for (auto it = report.json.begin(); it != report.json.end(); ++it) {
        if (it.key() == "entries") continue; // a report made with entriesJson: its entries are written below
        out << (first ? "\n  " : ",\n  ") << dumpedJson(json(it.key())) << ": ";
        first = false;
        writeIndented(out, dumpedJson(it.value()), 2);
        if (it.key() != "summary") continue;
        out << ",\n  \"entries\": ";
        if (cp.entries.empty()) {
            out << "[]";
            continue;
        }
        out << "[";
        for (size_t i = 0; i < cp.entries.size(); ++i) {
            const Entry& e = cp.entries[i];
            const std::string& error = report.errorOf(i);
            json rendered = e.isTensor() ? json() : renderer.render(e.value);
            out << (i ? ",\n    " : "\n    ");
            writeIndented(out,
                dumpedJson(entryJson(e, options, !error.empty(), error, report.sha256Of(i), std::move(rendered))), 4);
        }
        out << "\n  ]";
    }
    out << (first ? "}" : "\n}");
}

} // namespace optscope
