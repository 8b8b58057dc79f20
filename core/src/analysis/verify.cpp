// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/reshard.h"
#include "optscope/analysis/value_compare.h"
#include "optscope/analysis/verify_report.h"
#include "optscope/base/display_text.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/dcp/dcp_reader.h"
#include "optscope/formats/state_flattener.h"
#include "optscope/gpu/gpu_assembler.h"
#include "optscope/io/csv.h"
#include "optscope/io/job.h"
#include "optscope/model/flat_param_layout.h"
#include "optscope/model/read_guard.h"
#include "optscope/model/shard_layout.h"
#include "optscope/pickle/value_json.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_values.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;

namespace optscope {

// a report's entries between the processes of a job (CBOR): every field, so that rank 0's output is the one-process
// output byte for byte
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(VerifyRankResult, rank, elements, differing, firstDiff)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(VerifyEntry, key, type, status, detail, shape, elements, differing, ranks)

bool VerifyReport::identical() const
{
    for (const auto& e : entries)
        if (e.status != VerifyStatus::Identical && e.status != VerifyStatus::LeftOut) return false;
    return !entries.empty();
}

const char* verifyStatusName(VerifyStatus status)
{
    switch (status) {
    case VerifyStatus::Identical:
        return "identical";
    case VerifyStatus::Different:
        return "different";
    case VerifyStatus::Missing:
        return "missing";
    case VerifyStatus::Unexpected:
        return "unexpected";
    case VerifyStatus::Error:
        return "error";
    case VerifyStatus::LeftOut:
        return "left_out";
    }
    return "?";
}

size_t VerifyReport::count(VerifyStatus status) const
{
    size_t n = 0;
    for (const auto& e : entries)
        n += e.status == status;
    return n;
}

std::string VerifyReport::toCsv() const
{
    std::ostringstream out;
    writeCsv(out);
    return out.str();
}

void VerifyReport::writeCsv(std::ostream& out) const
{
    CsvWriter w(out);
    w.row({"key", "type", "status", "rank", "elements", "differing", "first_diff", "detail"});
    for (const auto& e : entries) {
        const bool tensor = e.type == "tensor";
        w.row({e.key, e.type, verifyStatusName(e.status), "", tensor ? std::to_string(e.elements) : "",
            tensor ? std::to_string(e.differing) : "", "", e.detail});
        for (const auto& r : e.ranks)
            w.row({e.key, "rank", r.differing ? "different" : "identical", std::to_string(r.rank),
                std::to_string(r.elements), std::to_string(r.differing),
                r.firstDiff >= 0 ? std::to_string(r.firstDiff) : "", ""});
    }
}

nlohmann::ordered_json VerifyReport::toJson() const
{
    using json = nlohmann::ordered_json;
    json j;
    j["identical"] = identical();
    j["source"] = source;
    j["target"] = target;
    j["device"] = device;
    j["world_size"] = worldSize;
    j["bytes_compared"] = bytesCompared;
    j["summary"] = {{"identical", count(VerifyStatus::Identical)}, {"different", count(VerifyStatus::Different)},
        {"missing", count(VerifyStatus::Missing)}, {"unexpected", count(VerifyStatus::Unexpected)},
        {"error", count(VerifyStatus::Error)}};
    j["entries"] = json::array();
    for (const auto& e : entries) {
        json je {{"key", e.key}, {"type", e.type}, {"status", verifyStatusName(e.status)}};
        if (!isUtf8(e.key)) je["key_hex"] = hexBytes(e.key); // the exact bytes (README: JSON output)
        if (!e.detail.empty()) je["detail"] = e.detail;
        if (e.type == "tensor") {
            je["shape"] = e.shape;
            je["elements"] = e.elements;
            je["differing"] = e.differing;
            json ranks = json::array();
            for (const auto& r : e.ranks)
                ranks.push_back({{"rank", r.rank}, {"elements", r.elements}, {"differing", r.differing},
                    {"first_diff", r.firstDiff >= 0 ? json(r.firstDiff) : json(nullptr)}});
            je["ranks"] = std::move(ranks);
        }
        j["entries"].push_back(std::move(je));
    }
    return j;
}

namespace {

/// the box of a tensor as dense bytes; @p tensor is kept from box to box (it finds each box's chunks by rows)
std::vector<uint8_t> collect(TensorAssembler& tensor, const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& sizes, const Progress& progress)
{
    std::vector<uint8_t> out;
    tensor.streamBox(
        offsets, sizes, [&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); }, progress);
    return out;
}

/// row-major index of element @p k of box (offsets, sizes) in a tensor of @p shape
int64_t globalIndex(int64_t k, const std::vector<int64_t>& shape, const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& sizes)
{
    int64_t idx = 0;
    int64_t stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
        const int64_t coord = k % sizes[d] + offsets[d];
        k /= sizes[d];
        idx += coord * stride;
        stride *= shape[d];
    }
    return idx;
}

/// compares the source's box, streamed, with @p expected (the loaded shard); fills differing/firstDiff
void compareBox(TensorAssembler& source, const TensorEntry& t, const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& sizes, const uint8_t* loaded, size_t loadedBytes, VerifyRankResult& r,
    uint64_t& bytesCompared, const Progress& progress)
{
    const size_t elem = dtypeSize(t.dtype);
    size_t pos = 0;
    bool sizeMismatch = false;
    source.streamBox(
        offsets, sizes,
        [&](const uint8_t* p, size_t n) {
            if (pos + n > loadedBytes) {
                sizeMismatch = true;
                n = pos < loadedBytes ? loadedBytes - pos : 0;
            }
            if (n && std::memcmp(p, loaded + pos, n) != 0) {
                for (size_t k = 0; k < n; k += elem) {
                    if (std::memcmp(p + k, loaded + pos + k, elem) != 0) {
                        const int64_t idx = static_cast<int64_t>((pos + k) / elem);
                        if (r.firstDiff < 0) r.firstDiff = globalIndex(idx, t.shape, offsets, sizes);
                        ++r.differing;
                    }
                }
            }
            pos += n;
            bytesCompared += n;
        },
        progress);
    if (sizeMismatch || pos != loadedBytes) {
        r.differing = r.elements;
        if (r.firstDiff < 0) r.firstDiff = globalIndex(0, t.shape, offsets, sizes);
    }
}

/// what a rank loads of the box (offsets, sizes) from @p loaded, compared with the same box of @p source, in runs of
/// rows of at most 64 MiB: a rank's whole shard in memory was the whole tensor for a one-rank copy (a 320 MiB tensor
/// verified at 653 MiB resident, now 141)
void compareLoadedBox(TensorAssembler& loaded, TensorAssembler& source, const TensorEntry& t,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes, VerifyRankResult& r,
    uint64_t& bytesCompared, const Progress& progress)
{
    constexpr uint64_t kRunBytes = uint64_t(64) << 20;
    uint64_t rowBytes = dtypeSize(t.dtype);
    for (size_t d = 1; d < sizes.size(); ++d)
        rowBytes *= static_cast<uint64_t>(sizes[d]);
    const int64_t rows = sizes.empty() ? 1 : sizes[0];
    const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(kRunBytes / std::max<uint64_t>(rowBytes, 1)));
    std::vector<int64_t> runOffsets = offsets, runSizes = sizes;
    for (int64_t row = 0; row < rows; row += step) {
        if (!sizes.empty()) {
            runOffsets[0] = offsets[0] + row;
            runSizes[0] = std::min(step, rows - row);
        }
        const std::vector<uint8_t> shard = collect(loaded, runOffsets, runSizes, progress);
        compareBox(source, t, runOffsets, runSizes, shard.data(), shard.size(), r, bytesCompared, progress);
    }
}

class TempFolder
{
public:
    /// the resharded copy goes to @p keep when given (kept), else into a scratch folder under the temporary directory,
    /// "optscope-verify-PID-N", locked while this run lives and removed after it (or by the next verify once its
    /// owner is dead: a verify killed with SIGKILL leaves a whole resharded copy behind)
    explicit TempFolder(const std::string& keep)
    {
        if (!keep.empty()) {
            path = keep;
            return;
        }
        std::error_code tmpError;
        const fs::path tmp = fs::temp_directory_path(tmpError);
        if (tmpError) {
            const char* named = std::getenv("TMPDIR");
            throw Error(ErrorKind::Io, named ? named : "/tmp",
                std::string("cannot use it for verify's resharded copy (") + (named ? "TMPDIR" : "the temporary folder")
                    + "): " + tmpError.message() + "; point TMPDIR at a folder with room, or give --keep FOLDER");
        }
        removeDeadEntries(tmp.string(), kPrefix);
        std::random_device rd;
        for (;;) {
            scratch = (tmp / (kPrefix + std::to_string(::getpid()) + "-" + std::to_string(rd()))).string();
            std::error_code ec;
            if (!fs::create_directory(scratch, ec)) {
                if (ec) throw Error(ErrorKind::Io, scratch, "cannot create the scratch folder: " + ec.message());
                continue; // the name was taken
            }
            if (lock.lock(scratch) && fs::exists(scratch, ec)) break;
        }
        path = scratch + "/resharded";
    }
    ~TempFolder()
    {
        std::error_code ec;
        if (!scratch.empty()) fs::remove_all(scratch, ec);
    }
    std::string path;

    /// Another process of a job, whose rank 0 made the scratch folder of @p resharded: when this process leaves by an
    /// exception because rank 0 is lost (Job::rootLost: killed, so its lock is free), it removes that folder. Only
    /// rank 0 removed it, so a rank 0 killed mid-verify left a whole resharded copy behind. (Not by
    /// removeDeadEntries' PID rule: a killed rank 0 not yet reaped by its launcher still has its PID.)
    class RemovedIfRootIsLost
    {
    public:
        RemovedIfRootIsLost(const Job& job, const std::string& resharded)
            : m_job(job)
        {
            const fs::path scratch = fs::path(resharded).parent_path();
            if (fs::path(resharded).filename() == "resharded" && scratch.filename().string().rfind(kPrefix, 0) == 0)
                m_scratch = scratch.string();
        }
        ~RemovedIfRootIsLost()
        {
            if (m_scratch.empty() || std::uncaught_exceptions() == 0 || !m_job.rootLost()) return;
            TemporaryLock lock;
            if (!lock.lock(m_scratch)) return; // rank 0 holds it still: it removes it itself
            std::error_code ec;
            fs::remove_all(m_scratch, ec);
        }
        RemovedIfRootIsLost(const RemovedIfRootIsLost&) = delete;
        RemovedIfRootIsLost& operator=(const RemovedIfRootIsLost&) = delete;

    private:
        const Job& m_job;
        std::string m_scratch;
    };

private:
    static constexpr const char* kPrefix = "optscope-verify-";
    std::string scratch;
    TemporaryLock lock;
};

int sourceRanks(const Checkpoint& cp)
{
    const std::vector<int> ranks = cp.ranks();
    return ranks.empty() || ranks.back() < 0 ? 1 : ranks.back() + 1;
}

/// "key: why" lines (DcpWriteStats::leftOut) by key
std::map<std::string, std::string> leftOutByKey(const std::vector<std::string>& lines)
{
    std::map<std::string, std::string> out;
    for (const auto& l : lines) {
        const size_t colon = l.find(": ");
        out.emplace(l.substr(0, colon), colon == std::string::npos ? std::string() : l.substr(colon + 2));
    }
    return out;
}

/// A value the source's reader kept whole (past the flattening's budget for shared containers) that @p other's
/// reader flattened into entries (one DCP item per value, read on its own): the value's leaves, flattened the same
/// way, each equal to @p other's entry of that key. Returns how many entries it matched (their keys into @p seen),
/// 0 when the value is not so flattened in @p other or a leaf differs.
size_t sameValueAsFlattened(const Checkpoint& src, const Entry& e, const Checkpoint& other, std::set<std::string>& seen)
{
    if (e.isTensor() || !e.value) return 0;
    std::vector<std::string> keys;
    bool same = true;
    const int depthLeft = std::max(0, kMaxStateDepth - static_cast<int>(e.path.size()));
    forEachStateLeaf(
        e.value,
        [&](FlattenedLeaf&& leaf) {
            if (!same || leaf.path.empty()) {
                same = false;
                return;
            }
            KeyPath full = e.path;
            full.insert(full.end(), leaf.path.begin(), leaf.path.end());
            std::string key = joinKeyPath(full);
            const Entry* back = other.find(key);
            same = back && !back->isTensor()
                && compareValueEntries(src, e, leaf.value, other, *back, back->value, 0, 0).equal;
            keys.push_back(std::move(key));
        },
        depthLeft);
    if (!same || keys.empty()) return 0;
    for (auto& key : keys)
        seen.insert(std::move(key));
    return keys.size();
}

/// The per-entry frame both verifications share: every source entry is looked up in @p other, values are compared
/// by value, tensors by dtype and shape and then by @p compareTensor (which adds ranks and differing counts); errors
/// of one entry are reported on that entry; entries only @p other has are listed as unexpected. Progress runs from
/// @p progressBase to 1.

template<typename CompareTensor>
void compareEntries(const Checkpoint& src, const Checkpoint& other, const std::string& otherName, double progressBase,
    const char* label, VerifyReport& report, const Progress& progress, const CompareTensor& compareTensor,
    const std::map<std::string, std::string>& leftOut = {}, const std::vector<int>* owner = nullptr)
{
    std::set<std::string> seen;
    std::map<std::pair<const PyValue*, const PyValue*>, ValueComparison> sharedPairs;
    const size_t n = src.entries.size();
    Job& job = Job::current();
    const int self = job.rank();
    // progress by bytes (plus one per entry), from progressBase to 1; a job's is every process's, shown by rank 0
    const auto weight = [](const Entry& e) { return (e.isTensor() ? e.tensor->nbytes() : 0) + 1; };
    uint64_t total = 0;
    for (const Entry& e : src.entries)
        total += weight(e);
    Progress phase = progress;
    phase.report = [&](double f, std::string_view stage) { progress(progressBase + (1.0 - progressBase) * f, stage); };
    JobProgress compared(job, "verify-work", total, phase, label, owner != nullptr);
    uint64_t pending = 0; // the entry compared last, counted once it is done (its branches all end the iteration)
    for (size_t i = 0; i < n; ++i) {
        progress.checkCancelled();
        compared.add(pending);
        pending = 0;
        const Entry& e = src.entries[i];
        seen.insert(e.key);
        if (owner && (*owner)[i] != self) continue; // another process of the job compares it
        pending = weight(e);
        VerifyEntry ve;
        ve.key = e.key;
        ve.type = e.isTensor() ? "tensor" : "value";
        const Entry* back = other.find(e.key);
        if (!back) {
            if (const size_t leaves = sameValueAsFlattened(src, e, other, seen)) {
                ve.status = VerifyStatus::Identical;
                ve.detail = "the same value, as " + std::to_string(leaves) + " entries under its key in " + otherName;
                report.entries.push_back(std::move(ve));
                continue;
            }
            const auto why = leftOut.find(e.key);
            ve.status = why != leftOut.end() ? VerifyStatus::LeftOut : VerifyStatus::Missing;
            ve.detail = why != leftOut.end() ? "not written: " + why->second : "not in " + otherName;
            report.entries.push_back(std::move(ve));
            continue;
        }
        try {
            if (e.isTensor() != back->isTensor() && sameNumberStoredTwoWays(src, e, other, *back)) {
                ve.status = VerifyStatus::Identical;
                ve.detail = "the same number, as a "
                    + (back->isTensor() ? "0-dim " + std::string(dtypeName(back->tensor->dtype)) + " tensor"
                                        : std::string("Python number"))
                    + " in " + otherName;
                report.entries.push_back(std::move(ve));
                continue;
            }
            if (!e.isTensor()) {
                // as diff compares values, bit-identical (value_compare.h): tensors inside too, by their bytes
                // (a value shared by many keys is compared once: a shared subtree of a million leaves at each)
                const bool shared = !back->isTensor() && e.value && e.value->pinned;
                const auto known = shared ? sharedPairs.find({e.value, back->value}) : sharedPairs.end();
                const ValueComparison c = back->isTensor() ? ValueComparison {false, {}, false}
                    : known != sharedPairs.end()
                    ? known->second
                    : compareValueEntries(src, e, e.value, other, *back, back->value, 0, 0);
                if (shared && known == sharedPairs.end()) sharedPairs.emplace(std::make_pair(e.value, back->value), c);
                ve.status = c.equal ? VerifyStatus::Identical : VerifyStatus::Different;
                if (!c.equal)
                    ve.detail = (back->isTensor() ? std::string("a tensor") : pyRepr(back->value, 80))
                        + " != " + pyRepr(e.value, 80) + (c.reason.empty() ? std::string() : " (" + c.reason + ")");
                else if (c.partly)
                    ve.detail = c.reason;
                report.entries.push_back(std::move(ve));
                continue;
            }
            const TensorEntry& t = *e.tensor;
            ve.elements = t.numel();
            ve.shape = t.shape;
            if (!back->isTensor() || back->tensor->dtype != t.dtype || back->tensor->shape != t.shape) {
                ve.status = VerifyStatus::Different;
                ve.detail = "is "
                    + (back->isTensor() ? std::string(dtypeName(back->tensor->dtype)) + shapeText(back->tensor->shape)
                                        : "a value")
                    + ", the source " + std::string(dtypeName(t.dtype)) + shapeText(t.shape);
                ve.differing = ve.elements;
                report.entries.push_back(std::move(ve));
                continue;
            }
            compareTensor(e, *back, ve);
            ve.status = ve.differing == 0 ? VerifyStatus::Identical : VerifyStatus::Different;
        } catch (const Error& err) {
            if (err.kind() == ErrorKind::Cancelled) throw;
            ve.status = VerifyStatus::Error;
            ve.detail = err.what();
        }
        report.entries.push_back(std::move(ve));
    }
    compared.add(pending);
    compared.flush();
    if (owner && self != 0) return; // rank 0 lists what only the copy has
    for (const auto& e : other.entries)
        if (!seen.count(e.key))
            report.entries.push_back({e.key, e.isTensor() ? "tensor" : "value", VerifyStatus::Unexpected,
                "only in " + otherName, {}, 0, 0, {}});
    progress(1.0, label);
}

/// A report's entries and byte count as CBOR, for the processes of a job: every field (the NLOHMANN definitions
/// above), keys as their bytes
std::string reportToWire(const VerifyReport& r)
{
    const std::vector<uint8_t> bytes = nlohmann::json::to_cbor({{"bytes", r.bytesCompared}, {"entries", r.entries}});
    return std::string(bytes.begin(), bytes.end());
}

void reportFromWire(const std::string& wire, std::vector<VerifyEntry>& entries, uint64_t& bytesCompared)
{
    const nlohmann::json j = nlohmann::json::from_cbor(wire);
    bytesCompared = j.at("bytes").get<uint64_t>();
    for (auto& e : j.at("entries").get<std::vector<VerifyEntry>>())
        entries.push_back(std::move(e));
}

/// Run as several processes, each compared the source entries @p owner gives it (rank 0 also those only the copy
/// has): rank 0 puts them back in the source's order, and every process returns the whole report.
void mergeAcrossJob(VerifyReport& report, const std::vector<int>& owner)
{
    Job& job = Job::current();
    const std::vector<std::string> parts = job.gather("verify-entries", reportToWire(report));
    std::string merged;
    if (job.isRoot()) {
        std::vector<std::vector<VerifyEntry>> lists(parts.size());
        uint64_t bytes = 0;
        for (size_t p = 0; p < parts.size(); ++p) {
            uint64_t b = 0;
            reportFromWire(parts[p], lists[p], b);
            bytes += b;
        }
        std::vector<size_t> next(parts.size(), 0);
        report.entries.clear();
        for (const int p : owner) {
            auto& list = lists[static_cast<size_t>(p)];
            if (next[p] >= list.size())
                throw Error(ErrorKind::Format, report.source, "rank " + std::to_string(p) + " compared fewer entries");
            report.entries.push_back(std::move(list[next[p]++]));
        }
        for (size_t k = next[0]; k < lists[0].size(); ++k) // only in the copy
            report.entries.push_back(std::move(lists[0][k]));
        report.bytesCompared = bytes;
        merged = reportToWire(report);
    }
    merged = job.broadcast("verify-report", merged);
    if (!job.isRoot()) {
        report.entries.clear();
        reportFromWire(merged, report.entries, report.bytesCompared);
    }
}

/// The scratch folder of the resharded copy: rank 0's (a TempFolder, in @p folder), broadcast to the job; each
/// process checks that it sees where the copy goes
std::string scratchFolderOfJob(Job& job, const VerifyOptions& options, std::unique_ptr<TempFolder>& folder)
{
    std::string folderPath;
    if (job.isRoot()) {
        folder = std::make_unique<TempFolder>(options.keepResharded);
        folderPath = folder->path;
    }
    if (!job.distributed()) return folderPath;
    folderPath = job.broadcast("verify-folder", folderPath);
    std::error_code ec;
    // (the copy itself appears only when it is complete: its parent is what must be there)
    const fs::path parent = fs::path(folderPath).parent_path();
    if (!job.isRoot() && !fs::is_directory(parent.empty() ? fs::path(".") : parent, ec))
        throw Error(ErrorKind::Io, folderPath,
            "rank 0's scratch folder for the resharded copy is not visible to this process: give every process "
            "a TMPDIR (or --keep DIR) on a file system they share");
    return folderPath;
}

/// what each of @p M ranks holds of @p t in the resharded copy: torch.chunk on dim 0 (a 0-dim tensor: rank 0 alone)
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> rankBoxesOf(const TensorEntry& t, int M)
{
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;
    for (int r = 0; r < (t.shape.empty() ? 1 : M); ++r) {
        std::vector<int64_t> off(t.shape.size(), 0), size(t.shape);
        if (!t.shape.empty()) {
            const Dim0Chunk c = chunkDim0(t.shape[0], M, r);
            off[0] = c.offset;
            size[0] = c.size;
        }
        boxes.emplace_back(off, size);
    }
    return boxes;
}

/// One source tensor against the resharded copy's: every rank's shard loaded and compared with the source's box
struct ReshardedTensorComparison
{
    const Checkpoint& src;
    const Checkpoint& copy;
    int M;
    bool gpu;
    VerifyReport& report;
    const Progress& progress;

    void operator()(const Entry& e, const Entry& back, VerifyEntry& ve) const
    {
        TensorAssembler::prefetch(src, e); // a remote source's chunks in flight while the shards are loaded
        const auto boxes = rankBoxesOf(*e.tensor, M);
        TensorAssembler loaded(copy, back), source(src, e);
        if (gpu)
            onGpu(e, boxes, loaded, source, ve);
        else
            onCpu(*e.tensor, boxes, loaded, source, ve);
    }

    /// each rank's shard loaded and compared a run of rows at a time
    void onCpu(const TensorEntry& t, const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& boxes,
        TensorAssembler& loaded, TensorAssembler& source, VerifyEntry& ve) const
    {
        for (size_t r = 0; r < boxes.size(); ++r) {
            VerifyRankResult rr;
            rr.rank = static_cast<int>(r);
            rr.elements = TensorBox {boxes[r].first, boxes[r].second}.numel();
            compareLoadedBox(loaded, source, t, boxes[r].first, boxes[r].second, rr, report.bytesCompared, progress);
            ve.differing += rr.differing;
            ve.ranks.push_back(rr);
        }
    }

    /// with the GPUs, the shards are gathered and compared there; the CPU looks again only at a rank whose shard
    /// differs (for the first differing index) and must find the same count
    void onGpu(const Entry& e, const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& boxes,
        TensorAssembler& loaded, TensorAssembler& source, VerifyEntry& ve) const
    {
        const TensorEntry& t = *e.tensor;
        const size_t elem = dtypeSize(t.dtype);
        std::vector<std::vector<uint8_t>> shards;
        for (const auto& [off, size] : boxes)
            shards.push_back(collect(loaded, off, size, progress)); // what each rank loads
        std::vector<uint64_t> onDevice;
        uint64_t total = 0;
        for (const auto& s : shards)
            total += s.size();
        if (total == t.nbytes()) onDevice = gpuCompareShards(src, e, shards);
        for (size_t r = 0; r < boxes.size(); ++r) {
            VerifyRankResult rr;
            rr.rank = static_cast<int>(r);
            rr.elements = static_cast<int64_t>(shards[r].size() / elem);
            if (!onDevice.empty() && onDevice[r] == 0) {
                report.bytesCompared += shards[r].size();
            } else {
                compareBox(source, t, boxes[r].first, boxes[r].second, shards[r].data(), shards[r].size(), rr,
                    report.bytesCompared, progress);
                if (!onDevice.empty() && static_cast<uint64_t>(rr.differing) != onDevice[r])
                    throw Error(ErrorKind::Unsupported, src.path,
                        "'" + e.key + "': the GPU counted " + std::to_string(onDevice[r])
                            + " differing elements of rank " + std::to_string(r) + ", the CPU "
                            + std::to_string(rr.differing));
            }
            ve.differing += rr.differing;
            ve.ranks.push_back(rr);
        }
    }
};

} // namespace

static VerifyReport verifyByLoadUnguarded(const Checkpoint& src, const VerifyOptions& options, const Progress& progress)
{
    VerifyReport report;
    report.source = src.path;
    report.worldSize = options.worldSize > 0 ? options.worldSize : sourceRanks(src);
    const int M = report.worldSize;
    report.target = "resharded to " + std::to_string(M) + " ranks (FSDP2 Shard(0))";

    const bool gpu = options.device == ComputeDevice::Cuda;
    report.device = describeComputeDevice(options.device); // throws if no GPU can be used
    if (gpu) report.device += " (all-gather of " + std::to_string(M) + " rank shards)";

    // 1-2. gather + reshard: the resharded files are written for real, then read back like any checkpoint
    // run as several processes (Job), rank 0's scratch folder is the job's: on one machine, or under a TMPDIR (or
    // --keep) that every node sees; each process writes its share of the files and compares its share of the keys
    Job& job = Job::current();
    std::unique_ptr<TempFolder> folder;
    const std::string folderPath = scratchFolderOfJob(job, options, folder);
    const TempFolder::RemovedIfRootIsLost lostRootsScratch(job, job.isRoot() ? std::string() : folderPath);
    ReshardOptions ro;
    ro.worldSize = M;
    ro.device = options.device;
    // a scratch copy, removed afterwards, needs no durability: no fsync (a kept copy, --keep, is synced)
    ro.write.fsync = !options.keepResharded.empty();
    Progress writing;
    writing.cancelled = progress.cancelled;
    writing.report = [&](double f, std::string_view) { progress(0.5 * f, "resharding"); };
    const DcpWriteStats written = reshardCheckpoint(src, folderPath, ro, writing);
    const std::map<std::string, std::string> leftOut = leftOutByKey(written.leftOut);
    const CheckpointPtr rs = DcpReader::open(folderPath);
    std::vector<int> owner;
    if (job.distributed()) {
        std::vector<uint64_t> weights;
        for (const auto& e : src.entries)
            weights.push_back(e.isTensor() ? e.tensor->nbytes() : 0);
        owner = splitByWeight(weights, job.size());
    }

    // 3-4. every rank loads its shard; the shards are gathered back and compared with the source
    compareEntries(src, *rs, "the resharded checkpoint", 0.5, "loading and comparing", report, progress,
        ReshardedTensorComparison {src, *rs, M, gpu, report, progress}, leftOut, job.distributed() ? &owner : nullptr);
    if (job.distributed()) mergeAcrossJob(report, owner);
    return report;
}

VerifyReport verifyByLoad(const Checkpoint& src, const VerifyOptions& options, const Progress& progress)
{
    if (const std::string why = src.missingDataReason(); !why.empty())
        throw Error(ErrorKind::Format, src.path, "is not whole, nothing verified: " + why);
    return readGuarded({&src}, [&] { return verifyByLoadUnguarded(src, options, progress); });
}

static VerifyReport verifyAgainstUnguarded(const Checkpoint& src, const Checkpoint& other, const Progress& progress,
    const std::vector<std::string>& leftOutLines)
{
    const std::map<std::string, std::string> leftOut = leftOutByKey(leftOutLines);
    VerifyReport report;
    report.source = src.path;
    report.target = other.path;
    report.device = "cpu";
    report.worldSize = sourceRanks(other);
    compareEntries(
        src, other, other.path, 0.0, "comparing", report, progress,
        [&](const Entry& e, const Entry& back, VerifyEntry& ve) {
            if (!ShardLayout::of(*back.tensor).complete()) {
                throw Error(
                    ErrorKind::Format, other.path, "its chunks do not tile the tensor (run `optscope-cli check`)");
            }
            TensorAssembler loaded(other, back), source(src, e);
            const ChunkTable& chunks = back.tensor->chunks;
            for (size_t i = 0; i < chunks.size(); ++i) {
                if (chunks.numelOf(i) == 0) continue;
                VerifyRankResult rr;
                rr.rank = chunks.rank(i);
                rr.elements = chunks.numelOf(i);
                compareLoadedBox(loaded, source, *e.tensor, chunks.offsetsOf(i).vec(), chunks.sizesOf(i).vec(), rr,
                    report.bytesCompared, progress);
                ve.differing += rr.differing;
                ve.ranks.push_back(rr);
            }
        },
        leftOut);
    return report;
}

VerifyReport verifyAgainst(
    const Checkpoint& src, const Checkpoint& other, const Progress& progress, const std::vector<std::string>& leftOut)
{
    return readGuarded({&src, &other}, [&] { return verifyAgainstUnguarded(src, other, progress, leftOut); });
}

} // namespace optscope
