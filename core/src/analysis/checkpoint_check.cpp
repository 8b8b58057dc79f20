// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/base/error.h"
#include "optscope/base/look_ahead.h"
#include "optscope/formats/unsafe_globals.h"
#include "optscope/io/job.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"
#include "optscope/io/zip_archive.h"
#include "optscope/model/read_guard.h"
#include "optscope/model/shard_layout.h"
#include "optscope/optim/optimizer_view.h"
#include "optscope/tensor/chunk_reader.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_stats.h"
#include "optscope/tensor/tensor_values.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

namespace optscope {

bool CheckReport::clean() const
{
    for (const auto& f : findings)
        if (f.severity != Severity::Info) return false;
    return true;
}

nlohmann::ordered_json CheckReport::toJson() const
{
    nlohmann::ordered_json j;
    j["clean"] = clean();
    j["tensors_checked"] = tensorsChecked;
    j["chunks_checked"] = chunksChecked;
    j["optimizers_checked"] = optimizersChecked;
    j["findings"] = nlohmann::ordered_json::array();
    for (const auto& f : findings)
        j["findings"].push_back(f.toJson());
    return j;
}

namespace {

std::string numberText(double v)
{
    std::ostringstream o;
    o << v;
    return o.str();
}

class Checker
{
public:
    Checker(const Checkpoint& cp, const CheckOptions& opt, const Progress& progress)
        : m_cp(cp)
        , m_opt(opt)
        , m_progress(progress)
    { }

    CheckReport run()
    {
        for (const auto& w : m_cp.warnings) {
            const ReaderCodeInfo& code = readerCodeInfo(w.code);
            if (w.code == ReaderCode::UnsafeGlobal) {
                addGlobal(w);
                continue;
            }
            if (!w.isError) {
                if (code.checkedWhenWarning) add(code.finding, w.key, w.message).fix = w.fix;
                continue;
            }
            Finding& f = add(code.finding, w.key, w.message);
            f.pytorchError = w.loadError; // the loading library's own error text (DeepSpeed's, for ZeRO folders)
            f.fix = w.fix;
            if (!w.file.empty()) m_missingFiles.insert(w.file); // a data file that is not read

            if (w.code == ReaderCode::ChunkOutOfRange) m_rangeFindings[w.key].push_back(m_report.findings.size() - 1);
        }
        const size_t warningCount = m_report.findings.size();
        // Run as several processes, each reads and checks the tensors splitByWeight gives it (by bytes); rank 0
        // merges the findings in the one-process order, adds the checks of what is left (records no chunk pointed
        // at, the optimizers) and every process returns the whole report. Metadata alone is not worth splitting.
        Job& job = Job::current();
        m_split = job.distributed() && m_opt.readChunks && !m_opt.firstChunkPerFile;
        const bool split = m_split;
        const size_t n = m_cp.entries.size();
        std::vector<uint64_t> weights(n, 0);
        uint64_t totalWeight = 0;
        for (size_t i = 0; i < n; ++i)
            if (m_cp.entries[i].isTensor()) {
                weights[i] = m_cp.entries[i].tensor->nbytes();
                totalWeight += weights[i];
            }
        const std::vector<int> owner = split ? splitByWeight(weights, job.size()) : std::vector<int>();
        JobProgress checked(job, "check-bytes", totalWeight, m_progress, "checking", split);
        askAheadPlan(weights, owner);
        uint64_t unshown = 0;
        std::vector<size_t> entryOfFinding; // per finding from warningCount on: the entry it is about
        for (size_t i = 0; i < n; ++i) {
            if (i % 64 == 0) {
                m_progress.checkCancelled();
                checked.add(unshown);
                unshown = 0;
            }
            const Entry& e = m_cp.entries[i];
            if (!e.isTensor() || (split && owner[i] != job.rank())) continue;
            m_entryIndex = i;
            if (m_ahead && m_opt.readChunks) m_ahead->before(i);
            checkTensor(e);
            entryOfFinding.resize(m_report.findings.size() - warningCount, i);
            unshown += weights[i];
        }
        checked.add(unshown);
        if (split) checked.flush();
        // rank 0 (of a split: with every process's findings) checks what is left
        if (!split || mergeAcrossJob(warningCount, entryOfFinding, checked)) {
            if (m_opt.readChunks && m_opt.checksums) verifyRemainingRecords();
            if (m_opt.optimizers) checkOptimizers();
        }
        if (split) shareWithJob();
        m_progress(1.0, "checking");
        return std::move(m_report);
    }

private:
    Finding& add(FindingCode code, std::string key, std::string message)
    {
        m_report.findings.emplace_back(code, std::move(message), std::move(key));
        return m_report.findings.back();
    }

    /// a global outside the safe set: the writer library's own class (info), pure data the format's loader reads
    /// (info), or unsafe (a warning; for pure data, with what torch.load(weights_only=True) says of it)
    void addGlobal(const CheckpointWarning& w)
    {
        const FindingCode kind = globalFinding(m_cp.format, w.classPath);
        if (kind == FindingCode::LibraryGlobal || !isPureDataClass(w.classPath)) {
            add(kind, w.key, w.message);
            return;
        }
        const std::string& cls = w.classPath;
        const std::string shortName = cls.substr(cls.rfind('.') + 1);
        // the key is the finding's own: said once
        const std::string holder = w.key.empty() ? std::string("the checkpoint holds ") : std::string();
        // PyTorch 2.6's own words (torch.load(weights_only=True) of such a value)
        const std::string refused = "Unsupported global: GLOBAL " + cls + " was not an allowed global by default";
        const std::string refusal = refused + ". Please use `torch.serialization.add_safe_globals([" + shortName
            + "])` or the `torch.serialization.safe_globals([" + shortName
            + "])` context manager to allowlist this global if you trust this class/function.";
        if (kind == FindingCode::DcpDataGlobal) {
            add(FindingCode::DcpDataGlobal, w.key,
                holder + "an object of class '" + cls
                    + "' (pure data: a bytes buffer), kept inert: DCP saved it with torch.save, and dcp.load reads "
                      "it back with torch.load(weights_only=False) (DefaultLoadPlanner.load_bytes), as torchtitan "
                      "resumes its train state; torch.load(weights_only=True) of it (after dcp_to_torch_save) "
                      "refuses it unless it is allowed with torch.serialization.add_safe_globals([io."
                    + shortName + "])");
            return;
        }
        Finding& f = add(FindingCode::UnsafeGlobal, w.key,
            holder + "an object of class '" + cls
                + "', kept inert: it is pure data (a bytes buffer) and runs no code, but "
                  "torch.load(weights_only=True), "
                  "PyTorch's default since 2.6, refuses it (\""
                + refused + "\")");
        f.pytorchError = "_pickle.UnpicklingError: Weights only load failed. ... WeightsUnpickler error: " + refusal;
        f.fix = "load it with torch.load(PATH, weights_only=False), or allow the class: `with "
                "torch.serialization.safe_globals([io."
            + shortName + "]): torch.load(PATH)`";
    }

    bool sameBytes(const Entry& e, size_t a, size_t b)
    {
        try {
            const ChunkData x = ChunkReader::resolve(m_cp, e, e.tensor->chunks[a]);
            const ChunkData y = ChunkReader::resolve(m_cp, e, e.tensor->chunks[b]);
            return x.isContiguous() && y.isContiguous() && x.nbytes() == y.nbytes()
                && std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
        } catch (const Error&) {
            return false;
        }
    }

    void checkTensor(const Entry& e)
    {
        ++m_report.tensorsChecked;
        const TensorEntry& t = *e.tensor;
        if (t.storesNoData() && t.shardsElsewhere) {
            // one rank's file, of a rank without rows: the others hold all of it (as a gap of a file holding one
            // shard, said the same way)
            const std::string cls = t.subclass.str();
            auto& f = add(FindingCode::ChunkGap, e.key,
                "this file holds no shard of the " + cls.substr(cls.rfind('.') + 1) + " " + shapeText(t.shape)
                    + ": its metadata places every shard on other ranks (torch.chunk left this rank without rows); "
                      "their files hold it, and the folder of all rank files reads it whole");
            f.offsets = {std::vector<int64_t>(t.shape.size(), 0)};
            return;
        }
        if (t.withoutData()) {
            add(FindingCode::TensorWithoutData, e.key, t.withoutDataText());
            return;
        }
        // a lazy conj/neg bit in a torch.save file's pickle, known at open (a DCP item's: below, as it is read)
        if (t.lazyBits) add(FindingCode::LazyBit, e.key, lazyBitText(t.lazyBits, t.dtype));
        checkLayout(e, ShardLayout::of(t));
        if (m_opt.readChunks || m_opt.firstChunkPerFile) checkStoredChunks(e);
    }

    /// what the metadata alone says of the chunks' placement: outside the tensor, overlapping, gaps
    void checkLayout(const Entry& e, const ShardLayout& L)
    {
        const TensorEntry& t = *e.tensor;
        for (size_t i : L.outOfBounds) {
            auto& f = add(FindingCode::ChunkOutOfBounds, e.key,
                "chunk at offsets " + shapeText(t.chunks[i].offsets) + " sizes " + shapeText(t.chunks[i].sizes)
                    + " lies outside the tensor " + shapeText(t.shape));
            f.ranks = {t.chunks[i].rank};
            f.offsets = {t.chunks[i].offsets};
        }
        // A region listed k times is one finding (the k - 1 pairs ShardLayout lists for it, each repeat with the
        // first), partly overlapping pairs one finding each up to kMaxPairFindings, then one that counts the rest:
        // 2,000 listings of one row were 1,999,001 findings (1.37 GB of output)
        constexpr size_t kMaxPairFindings = 16;
        size_t pairFindings = 0, pairsNotListed = 0;
        for (size_t k = 0; k < L.overlaps.size();) {
            const auto& o = L.overlaps[k];
            const TensorChunk a = t.chunks[o.first];
            const TensorChunk b = t.chunks[o.second];
            if (a.offsets != b.offsets || a.sizes != b.sizes) {
                ++k;
                if (pairFindings == kMaxPairFindings) {
                    ++pairsNotListed;
                    continue;
                }
                ++pairFindings;
                Finding& f = add(FindingCode::ChunkOverlap, e.key,
                    "chunks of ranks " + std::to_string(a.rank) + " and " + std::to_string(b.rank) + " overlap at "
                        + boxText(o.region));
                f.ranks = {a.rank, b.rank};
                f.offsets = {a.offsets, b.offsets};
                continue;
            }
            // the listings of one region: o.first and every o.second paired with it
            std::vector<size_t> listed {o.first};
            for (; k < L.overlaps.size() && L.overlaps[k].first == o.first; ++k)
                listed.push_back(L.overlaps[k].second);
            addRepeatedRegion(e, o.region, listed);
        }
        if (pairsNotListed > 0 || L.overlapsTruncated)
            add(FindingCode::ChunkOverlap, e.key,
                (L.overlapsTruncated ? "more than " + std::to_string(pairsNotListed + kMaxPairFindings)
                                     : std::to_string(pairsNotListed))
                    + " further pairs of chunks overlap (not listed one by one)");
        for (const auto& g : L.gaps) {
            auto& f = add(FindingCode::ChunkGap, e.key,
                "no chunk covers " + boxText(g) + " of the tensor " + shapeText(t.shape) + " ("
                    + std::to_string(g.numel()) + " elements)");
            f.offsets = {g.offsets};
        }
        if (!L.gapsExact)
            add(FindingCode::ChunkGap, e.key,
                "chunks cover " + std::to_string(L.coveredElements) + " of " + std::to_string(L.totalElements)
                    + " elements");
    }

    /// one region listed by the chunks @p listed (two or more): the same bytes (a duplicate), a step counter whose
    /// values differ between ranks, or an overlap of different bytes
    void addRepeatedRegion(const Entry& e, const TensorBox& region, const std::vector<size_t>& listed)
    {
        const TensorEntry& t = *e.tensor;
        const TensorChunk a = t.chunks[listed[0]];
        const TensorChunk b = t.chunks[listed[1]];
        std::vector<int> ranks;
        for (size_t idx : listed)
            ranks.push_back(t.chunks.rank(idx));
        std::string rankList;
        for (size_t r = 0; r < ranks.size() && r < 8; ++r)
            rankList += (r ? ", " : "") + std::to_string(ranks[r]);
        if (ranks.size() > 8) rankList += ", ...";
        const std::string times = listed.size() == 2 ? "twice" : std::to_string(listed.size()) + " times";
        const bool isStep = !e.path.empty() && e.path.back().key == "step";
        Finding* f = nullptr;
        bool same = m_opt.readChunks;
        for (size_t r = 1; same && r < listed.size(); ++r)
            same = sameBytes(e, listed[0], listed[r]);
        if (same) {
            f = &add(FindingCode::ChunkDuplicate, e.key,
                "the same region " + boxText(region) + " is listed " + times + " "
                    + (listed.size() == 2 && a.rank == b.rank
                            ? "(both entries point to rank " + std::to_string(a.rank) + "'s copy)"
                            : listed.size() == 2
                            ? "(ranks " + std::to_string(a.rank) + " and " + std::to_string(b.rank) + ")"
                            : "(ranks " + rankList + ")")
                    + " with identical bytes");
        } else if (isStep && m_opt.readChunks) {
            f = &add(
                FindingCode::StepRankConflict, e.key, "step differs between ranks (" + stepValues(e, listed) + ")");
        } else if (listed.size() == 2) {
            f = &add(FindingCode::ChunkOverlap, e.key,
                "chunks of ranks " + std::to_string(a.rank) + " and " + std::to_string(b.rank) + " overlap at "
                    + boxText(region) + " (same region, different bytes)");
        } else {
            f = &add(FindingCode::ChunkOverlap, e.key,
                "the same region " + boxText(region) + " is listed " + times + " (ranks " + rankList
                    + "), not all with the same bytes");
        }
        f->ranks = ranks;
        f->offsets = {a.offsets};
        if (listed.size() == 2) f->offsets.push_back(b.offsets);
    }

    /// "rank 0: 3 vs rank 1: 4": the step counter each of the first 8 chunks @p listed holds
    std::string stepValues(const Entry& e, const std::vector<size_t>& listed)
    {
        const TensorEntry& t = *e.tensor;
        std::string values;
        for (size_t r = 0; r < listed.size() && r < 8; ++r) {
            const size_t idx = listed[r];
            try {
                TensorEntry one = t;
                one.chunks = {t.chunks[idx]};
                Entry tmp = e;
                tmp.tensor = one;
                const auto v = readTensorValues(m_cp, tmp, 1);
                values += (values.empty() ? "" : " vs ") + std::string("rank ") + std::to_string(t.chunks.rank(idx))
                    + ": " + (v.empty() ? "?" : numberText(v[0]));
            } catch (const Error&) { }
        }
        if (listed.size() > 8) values += " vs ...";
        return values;
    }

    /// What a tensor's chunks read back: CRCs, the stored dtype and shape against the metadata's, lazy bits and
    /// (reading every byte anyway) NaN and ±inf. Sampling (firstChunkPerFile) reads one chunk's header per file.
    struct ChunkTally
    {
        NonFiniteCounts nonFinite;
        std::set<int> nonFiniteRanks;
        /// regions counted already: one listed twice (a replicated chunk, a duplicate) counts once
        std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> counted;
        // a DCP item's lazy conj/neg bit, in its own pickle: the stored bytes of a tensor with a bit are checked as
        // any (CRCs, shapes), its values are not counted (a neg bit swaps +inf and -inf)
        std::set<int> lazyBitRanks;
        uint8_t itemBits = 0;
    };
    void checkStoredChunks(const Entry& e)
    {
        const TensorEntry& t = *e.tensor;
        ChunkTally tally;
        for (size_t i = 0; i < t.chunks.size(); ++i) {
            // already reported (missing-storage-info / missing-file): decided per file id, with no value per chunk
            // (2.2M chunks whose files are missing took 20% of check in set lookups and chunk copies)
            if (!t.chunks.hasFile(i) || fileMissing(t.chunks, i)) continue;
            const TensorChunk c = t.chunks[i];
            if (!m_opt.readChunks && !m_sampledFiles.insert(c.source.file).second) continue;
            if (m_ahead && !m_opt.readChunks)
                if (auto k = m_sampledAhead.find(c.source.file); k != m_sampledAhead.end()) m_ahead->before(k->second);
            ++m_report.chunksChecked;
            try {
                checkStoredChunk(e, c, tally);
            } catch (const Error& err) {
                if (err.kind() == ErrorKind::Cancelled) throw;
                addUnreadableChunk(e, c, err);
            }
        }
        if (tally.nonFinite.any()) addNonFinite(e, tally.nonFinite, tally.nonFiniteRanks);
        if (!tally.lazyBitRanks.empty()) { // one finding per tensor, with the ranks whose items carry the bit
            auto& f = add(FindingCode::LazyBit, e.key, lazyBitText(tally.itemBits, t.dtype));
            f.ranks.assign(tally.lazyBitRanks.begin(), tally.lazyBitRanks.end());
        }
    }

    void checkStoredChunk(const Entry& e, const TensorChunk& c, ChunkTally& tally)
    {
        const TensorEntry& t = *e.tensor;
        // sampling reads a chunk's header only (dtype, shape): a remote chunk's bytes are left where they are
        const ChunkData d = ChunkReader::resolveAsStored(m_cp, e, c, !m_opt.readChunks, true);
        if (m_opt.readChunks && m_opt.checksums) verifyCrc(e, c, d);
        if (d.lazyBits && !t.lazyBits) {
            tally.lazyBitRanks.insert(c.rank);
            tally.itemBits |= d.lazyBits;
        }
        if (d.dtype != t.dtype) {
            auto& f = add(FindingCode::ChunkDtypeMismatch, e.key,
                "chunk of rank " + std::to_string(c.rank) + " stores " + std::string(dtypeName(d.dtype))
                    + ", the tensor is " + std::string(dtypeName(t.dtype)));
            f.ranks = {c.rank};
            f.offsets = {c.offsets};
        }
        const bool countValues = m_opt.readChunks && dtypeHasNonFinite(t.dtype);
        if (d.sizes != c.sizes) {
            auto& f = add(FindingCode::ChunkShapeMismatch, e.key,
                "chunk of rank " + std::to_string(c.rank) + " stores shape " + shapeText(d.sizes)
                    + ", the metadata says " + shapeText(c.sizes));
            f.ranks = {c.rank};
            f.offsets = {c.offsets};
        } else if (countValues && d.dtype == t.dtype && !d.lazyBits && !t.lazyBits
            && tally.counted.emplace(c.offsets, c.sizes).second) {
            const NonFiniteCounts n = countNonFinite(d);
            m_cp.files->checkFaults(); // a fault zeroed what was counted: that chunk is unreadable
            tally.nonFinite += n;
            if (n.any()) tally.nonFiniteRanks.insert(c.rank);
        }
        // a DCP item read whole (its CRCs summed, its values counted from d's own copy): a remote object gives its
        // blocks back as the items are done
        ChunkReader::finishItem(d, c);
    }

    void addUnreadableChunk(const Entry& e, const TensorChunk& c, const Error& err)
    {
        if (err.kind() == ErrorKind::Truncated) {
            // the reader found this range past the end of its file already: that finding gets the rank and
            // offsets, rather than a second finding of the same chunk
            auto it = m_rangeFindings.find(e.key);
            if (it != m_rangeFindings.end() && !it->second.empty()) {
                Finding& f = m_report.findings[it->second.front()];
                m_completedWarnings.push_back(it->second.front());
                it->second.erase(it->second.begin());
                f.ranks = {c.rank};
                f.offsets = {c.offsets};
                return;
            }
        }
        auto& f = add(err.kind() == ErrorKind::Truncated ? FindingCode::ChunkTruncated : FindingCode::UnreadableChunk,
            e.key, err.what());
        f.ranks = {c.rank};
        f.offsets = {c.offsets};
    }

    /// one finding per tensor holding NaN or ±inf, with torch.isnan / isposinf / isneginf's counts
    void addNonFinite(const Entry& e, const NonFiniteCounts& n, const std::set<int>& ranks)
    {
        std::string counts;
        auto part = [&counts](int64_t k, const char* what) {
            if (k) counts += (counts.empty() ? "" : ", ") + std::to_string(k) + " " + what;
        };
        part(n.nan, "NaN");
        part(n.posInf, "+inf");
        part(n.negInf, "-inf");
        auto& f = add(FindingCode::NonFinite, e.key,
            counts + " in the " + std::to_string(n.numel) + " elements of this "
                + std::string(dtypeName(e.tensor->dtype)) + " tensor " + shapeText(e.tensor->shape));
        f.counts = {{"numel", n.numel}, {"nan", n.nan}, {"posinf", n.posInf}, {"neginf", n.negInf}};
        f.fix = "resume from an earlier checkpoint whose values are finite: the training step that wrote these "
                "spread them through the weights and moments, and loading them carries them on";
        for (int r : ranks)
            if (r >= 0) f.ranks.push_back(r);
    }

    /// A remote checkpoint: the chunks check reads are asked for ahead, each a round trip otherwise (a 1,024-rank
    /// diagnose sampled the first chunk of each rank file one after the other). Every chunk: the next tensors', up to
    /// 128 MiB or 8 tensors; sampling: the next 64 files' sampled chunks, found here in the order checkTensor meets
    /// them.
    void askAheadPlan(const std::vector<uint64_t>& weights, const std::vector<int>& owner)
    {
        if (!isUrl(m_cp.path) || (!m_opt.readChunks && !m_opt.firstChunkPerFile)) return;
        const Job& job = Job::current();
        if (m_opt.readChunks) {
            m_ahead.emplace(
                weights.size(),
                // copies: the look-ahead is a member, and run()'s vectors are gone when it returns
                [weights, owner, rank = job.rank()](
                    size_t i) { return owner.empty() || owner[i] == rank ? weights[i] : 0; },
                [this](size_t i) {
                    try {
                        TensorAssembler::prefetch(m_cp, m_cp.entries[i], lookAheadBytes());
                    } catch (const Error&) {
                        // the read meets it again, and reports it
                    }
                },
                lookAheadBytes(), 8);
            return;
        }
        std::vector<TensorChunk> sampled; // in checkTensor's order: the first chunk of each file
        for (const auto& e : m_cp.entries) {
            if (!e.isTensor()) continue;
            const ChunkTable& chunks = e.tensor->chunks;
            for (size_t c = 0; c < chunks.size(); ++c)
                if (chunks.hasFile(c) && !fileMissing(chunks, c)
                    && m_sampledAhead.emplace(chunks.fileOf(c), sampled.size()).second)
                    sampled.push_back(chunks[c]);
        }
        const size_t count = sampled.size(); // before the move below (arguments are evaluated in any order)
        m_ahead.emplace(
            count, [](size_t) { return uint64_t(128) << 10; },
            [this, sampled = std::move(sampled)](size_t k) {
                try {
                    ChunkReader::prefetch(m_cp, sampled[k], uint64_t(64) << 10);
                } catch (const Error&) {
                    // the read meets it again, and reports it
                }
            },
            uint64_t(16) << 20, 64);
    }

    /// A torch.save archive whose records check verifies: the file's own (a torch.save file) or a DCP item's
    struct ZipCrcs
    {
        std::shared_ptr<const ByteSource> file;
        std::optional<ZipArchive> zip; ///< none: not a zip (legacy torch.save, safetensors)
        uint64_t offset = 0; ///< of the archive in the file
        std::vector<bool> verified; ///< per zip entry
        std::unordered_map<uint64_t, size_t> byData; ///< absolute data offset -> entry
        bool matched = false; ///< a chunk's record is one of its entries: the archive is the file's own
    };

    /// no record of @p z verified yet; all of them when its writer recorded no CRC-32s:
    /// torch.serialization.set_crc32_options(False) stores 0 for every record, and PyTorch reads such files as any
    /// other (a record of no bytes sums to 0 too, so those prove nothing either way)
    static void startVerifying(ZipCrcs& z)
    {
        const auto& entries = z.zip->entries();
        const bool recorded
            = std::any_of(entries.begin(), entries.end(), [](const ZipEntry& e) { return e.size > 0 && e.crc32 != 0; });
        z.verified.assign(entries.size(), !recorded);
    }

    /// The CRC-32 of the zip record holding chunk @p c, once per record: the writer stored one per record, and
    /// nothing else notices a flipped bit in tensor bytes (torch.load does not check it)
    void verifyCrc(const Entry& e, const TensorChunk& c, const ChunkData& d)
    {
        const ByteSource& file = *d.file;
        if (c.source.kind == ChunkSource::Kind::StorageRecord) {
            ZipCrcs& z = zipOf(c.source.file);
            if (!z.zip) return;
            const auto it = z.byData.find(c.source.offset);
            if (it == z.byData.end()) return;
            z.matched = true;
            // a record that several entries share (tied weights) is verified by the first, wherever it is checked
            if (m_split && recordCheckers(c.source.file).at(c.source.offset) != m_entryIndex) return;
            verifyEntry(z, it->second, e.key, c.rank, &d);
            return;
        }
        // a DCP item: an archive of its own, verified whole (its tensor record and its pickle)
        if (!looksLikeZip(file.bytes(c.source.offset, std::min<uint64_t>(c.source.length, 4)),
                std::min<uint64_t>(c.source.length, 4)))
            return;
        ZipCrcs item;
        item.file = d.file;
        item.offset = c.source.offset;
        item.zip = ZipArchive::parseInPlace(file, c.source.offset, c.source.length, file.path());
        startVerifying(item);
        for (size_t k = 0; k < item.verified.size(); ++k)
            verifyEntry(item, k, e.key, c.rank, &d);
    }

    /// for the torch.save file @p name: each record a chunk points at -> the first entry pointing at it (one pass
    /// over every chunk, for all files, the first time a record is verified)
    const std::unordered_map<uint64_t, size_t>& recordCheckers(const std::string& name)
    {
        if (!m_recordCheckersBuilt) {
            m_recordCheckersBuilt = true;
            for (size_t i = m_cp.entries.size(); i-- > 0;) {
                const Entry& e = m_cp.entries[i];
                if (!e.isTensor()) continue;
                for (size_t c = 0; c < e.tensor->chunks.size(); ++c) {
                    if (!e.tensor->chunks.hasFile(c)) continue;
                    const TensorChunk chunk = e.tensor->chunks[c];
                    if (chunk.source.kind == ChunkSource::Kind::StorageRecord)
                        m_recordChecker[chunk.source.file][chunk.source.offset] = i;
                }
            }
        }
        return m_recordChecker[name];
    }

    /// the whole-file archive of @p name, parsed once (not a zip: empty)
    ZipCrcs& zipOf(const std::string& name)
    {
        auto [it, added] = m_zips.try_emplace(name);
        ZipCrcs& z = it->second;
        if (!added) return z;
        z.file = m_cp.files->open(name);
        if (!looksLikeZip(
                z.file->bytes(0, std::min<uint64_t>(z.file->size(), 4)), std::min<uint64_t>(z.file->size(), 4)))
            return z;
        try {
            z.zip = ZipArchive::parseInPlace(*z.file, 0, z.file->size(), z.file->path());
        } catch (const Error&) {
            return z; // the reader read it; a directory it cannot parse again is reported by what reads the chunks
        }
        startVerifying(z);
        for (size_t k = 0; k < z.zip->entries().size(); ++k)
            z.byData.emplace(z.zip->entries()[k].dataOffset, k);
        return z;
    }

    /// @p read: the chunk being checked; a remote chunk's own copy of this record is summed, not fetched again
    void verifyEntry(ZipCrcs& z, size_t k, const std::string& key, int rank, const ChunkData* read = nullptr)
    {
        if (z.verified[k]) return;
        z.verified[k] = true;
        const ZipEntry& ze = z.zip->entries()[k];
        const uint64_t at = z.offset + ze.dataOffset;
        const bool copied
            = read && read->owned && read->file == z.file && read->storageAt == at && read->storageBytes == ze.size;
        const uint8_t* bytes = copied ? read->owned.get() : z.file->bytes(at, ze.size);
        const uint32_t crc = recordCrc32(bytes, ze.size, 64u << 20, [&](uint64_t done) {
            m_progress.checkCancelled();
            // pages of a large record leave this process once summed (they stay in the page cache)
            if (!copied && ze.size > (64u << 20))
                z.file->release(at + done - std::min<uint64_t>(done, 64u << 20), 64u << 20);
        });
        if (crc == ze.crc32) return;
        char text[64];
        std::snprintf(text, sizeof text, "0x%08x stored, 0x%08x now", ze.crc32, crc);
        auto& f = add(FindingCode::RecordCrcMismatch, key,
            "the " + std::to_string(ze.size) + " bytes of record '" + std::string(ze.name) + "' in " + z.file->path()
                + (z.offset ? " (the item at byte " + std::to_string(z.offset) + ")" : std::string())
                + " do not match the CRC-32 its writer stored (" + text
                + "): the file changed after it was written; torch.load does not check it and reads the changed bytes"
                + (key.empty() ? std::string() : " as '" + key + "'"));
        if (rank >= 0) f.ranks = {rank};
        f.fix = "restore the file from a good copy (or the save that wrote it): its values are not the ones saved";
    }

    /// the records no chunk pointed at (the pickle, byteorder, version, values that are not tensors)
    void verifyRemainingRecords()
    {
        for (auto& [name, z] : m_zips) {
            if (!z.zip || !z.matched) continue;
            for (size_t k = 0; k < z.verified.size(); ++k)
                verifyEntry(z, k, {}, -1);
        }
    }

    /// whether chunk @p i's file is one the reader found missing, cached per file id of its table
    bool fileMissing(const ChunkTable& chunks, size_t i)
    {
        const uint32_t id = chunks.fileIdOf(i);
        auto& states = m_fileMissing[chunks.fileTable().get()];
        if (id >= states.size()) states.resize(id + 1, -1);
        if (states[id] < 0) states[id] = m_missingFiles.count(chunks.fileOf(i)) ? 1 : 0;
        return states[id] == 1;
    }

    /// What this process found, for rank 0: its entries' findings (each with its entry), the reader's findings it
    /// completed (a truncated chunk's rank and offsets), the records whose CRC it verified, its counts. Rank 0
    /// returns true with the findings in the one-process order; the others false, their part sent.
    bool mergeAcrossJob(size_t warningCount, const std::vector<size_t>& entryOfFinding, JobProgress& checked)
    {
        Job& job = Job::current();
        nlohmann::json found = nlohmann::json::array();
        for (size_t k = warningCount; k < m_report.findings.size(); ++k)
            found.push_back({entryOfFinding[k - warningCount], findingToWire(m_report.findings[k])});
        nlohmann::json completed = nlohmann::json::array();
        for (const size_t k : m_completedWarnings)
            completed.push_back({k, findingToWire(m_report.findings[k])});
        nlohmann::json verified = nlohmann::json::array();
        for (const auto& [name, z] : m_zips) {
            std::vector<size_t> done;
            for (size_t k = 0; k < z.verified.size(); ++k)
                if (z.verified[k]) done.push_back(k);
            verified.push_back({name, z.matched, done});
        }
        const std::vector<uint8_t> cbor
            = nlohmann::json::to_cbor({found, completed, verified, {m_report.tensorsChecked, m_report.chunksChecked}});
        const std::vector<std::string> parts
            = job.gather("check-findings", std::string(cbor.begin(), cbor.end()), [&] { checked.showTotal(); });
        if (!job.isRoot()) return false;
        m_report.findings.erase(
            m_report.findings.begin() + static_cast<std::ptrdiff_t>(warningCount), m_report.findings.end());
        m_report.tensorsChecked = m_report.chunksChecked = 0;
        std::vector<std::pair<size_t, Finding>> all;
        for (const std::string& part : parts) {
            const nlohmann::json j = nlohmann::json::from_cbor(part);
            for (const auto& f : j.at(0))
                all.emplace_back(f.at(0).get<size_t>(), findingFromWire(f.at(1)));
            for (const auto& c : j.at(1)) {
                const auto k = c.at(0).get<size_t>();
                if (k >= warningCount) throw Error(ErrorKind::Format, m_cp.path, "a process completed no finding");
                m_report.findings[k] = findingFromWire(c.at(1));
            }
            for (const auto& v : j.at(2)) {
                ZipCrcs& z = zipOf(v.at(0).get<std::string>());
                z.matched = z.matched || v.at(1).get<bool>();
                for (const auto k : v.at(2).get<std::vector<size_t>>())
                    if (k < z.verified.size()) z.verified[k] = true;
            }
            m_report.tensorsChecked += j.at(3).at(0).get<size_t>();
            m_report.chunksChecked += j.at(3).at(1).get<size_t>();
        }
        // each entry was checked by one process, its findings in order: by entry, as one process finds them
        std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (auto& [entry, f] : all)
            m_report.findings.push_back(std::move(f));
        return true;
    }

    /// rank 0's whole report to every process (each exits as rank 0 does)
    void shareWithJob()
    {
        Job& job = Job::current();
        std::string wire;
        if (job.isRoot()) {
            nlohmann::json found = nlohmann::json::array();
            for (const auto& f : m_report.findings)
                found.push_back(findingToWire(f));
            const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(
                {found, {m_report.tensorsChecked, m_report.chunksChecked, m_report.optimizersChecked}});
            wire.assign(cbor.begin(), cbor.end());
        }
        wire = job.broadcast("check-report", wire);
        if (job.isRoot()) return;
        const nlohmann::json j = nlohmann::json::from_cbor(wire);
        m_report.findings.clear();
        for (const auto& f : j.at(0))
            m_report.findings.push_back(findingFromWire(f));
        m_report.tensorsChecked = j.at(1).at(0).get<size_t>();
        m_report.chunksChecked = j.at(1).at(1).get<size_t>();
        m_report.optimizersChecked = j.at(1).at(2).get<size_t>();
    }

    void checkOptimizers()
    {
        const ParamTable table = ParamTable::build(m_cp);
        m_report.optimizersChecked = table.optimizers.size();
        for (auto& f : optimizerFindings(m_cp, table))
            m_report.findings.push_back(std::move(f));
    }

    const Checkpoint& m_cp;
    const CheckOptions& m_opt;
    const Progress& m_progress;
    CheckReport m_report;
    std::set<std::string> m_missingFiles;
    /// the reader's chunk-out-of-range findings by key, not yet matched with a chunk that fails to read
    std::map<std::string, std::vector<size_t>> m_rangeFindings;
    std::set<std::string> m_sampledFiles; ///< firstChunkPerFile: the data files whose first chunk was opened
    std::optional<LookAhead> m_ahead; ///< askAheadPlan's, remote only
    std::unordered_map<std::string, size_t> m_sampledAhead; ///< sampling: file -> its chunk's place in m_ahead
    std::map<const FileNameTable*, std::vector<signed char>> m_fileMissing; ///< per file id: -1 unknown, 0, 1
    std::map<std::string, ZipCrcs> m_zips; ///< torch.save files whose records are verified, by name
    bool m_split = false; ///< this process checks some of the entries of a job's split
    size_t m_entryIndex = 0; ///< the entry being checked
    std::vector<size_t> m_completedWarnings; ///< the reader's findings this process completed
    /// split: per zip file, the record (data offset) -> the first entry whose chunk points at it, who verifies it
    std::map<std::string, std::unordered_map<uint64_t, size_t>> m_recordChecker;
    bool m_recordCheckersBuilt = false;
};

} // namespace

static CheckReport checkCheckpointUnguarded(
    const Checkpoint& checkpoint, const CheckOptions& options, const Progress& progress)
{
    Job& job = Job::current();
    if (!job.distributed()) return Checker(checkpoint, options, progress).run();
    Progress inJob = progress; // a job's process stops when another one fails
    inJob.cancelled = [&] { return progress.isCancelled() || job.failed(); };
    const CancelScope cancelScope(inJob.cancelled); // a read stalled on a server ends too
    try {
        return Checker(checkpoint, options, inJob).run();
    } catch (const Error& e) {
        job.reportFailure(e.what());
        // a process stopped because another failed says so, naming that process
        if (job.failed() && e.kind() == ErrorKind::Cancelled && !progress.isCancelled())
            throw Error(ErrorKind::Io, checkpoint.path, "stopped: " + job.failure());
        throw;
    }
}

CheckReport checkCheckpoint(const Checkpoint& checkpoint, const CheckOptions& options, const Progress& progress)
{
    return readGuarded({&checkpoint}, [&] { return checkCheckpointUnguarded(checkpoint, options, progress); });
}

} // namespace optscope
