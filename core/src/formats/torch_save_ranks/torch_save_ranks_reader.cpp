// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/torch_save_ranks/torch_save_ranks_reader.h"

#include "optscope/base/error.h"
#include "optscope/base/look_ahead.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"
#include "optscope/pickle/value_json.h"
#include "optscope/tensor/scalar_value.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace fs = std::filesystem;

namespace optscope {

namespace {

/// the name with its last run of digits replaced by '#', and that number; false without digits
bool splitLastNumber(const std::string& name, std::string& pattern, long& number)
{
    size_t end = name.size();
    while (end > 0 && !(name[end - 1] >= '0' && name[end - 1] <= '9'))
        --end;
    if (end == 0) return false;
    size_t begin = end;
    while (begin > 0 && name[begin - 1] >= '0' && name[begin - 1] <= '9')
        --begin;
    if (end - begin > 6) return false; // a step or a date, not a rank
    pattern = name.substr(0, begin) + "#" + name.substr(end);
    number = std::stol(name.substr(begin, end - begin));
    return true;
}

/// rank-file names as training scripts commonly write them ('#' the rank): what is asked for where a folder cannot
/// be listed (plain HTTP)
constexpr const char* kCommonRankNames[] = {"rank#.pt", "rank_#.pt", "rank-#.pt", "rank#.pth", "model_rank#.pt",
    "optim_rank#.pt", "ckpt_rank#.pt", "checkpoint_rank#.pt", "shard#.pt", "shard_#.pt"};

std::string rankName(const std::string& pattern, long rank)
{
    const auto hash = pattern.find('#');
    return pattern.substr(0, hash) + std::to_string(rank) + pattern.substr(hash + 1);
}

/// a folder that cannot be listed (plain HTTP): the common names' ranks 0 and 1 asked for together, then each set
/// found followed up in batches (8, 16, ... at once) until a rank is missing. A set with gaps ends at its first gap.
std::map<std::string, std::map<long, std::string>> guessedSets(const std::string& folder)
{
    std::vector<std::string> first;
    for (const char* p : kCommonRankNames)
        for (long r : {0L, 1L})
            first.push_back(childLocation(folder, rankName(p, r)));
    statAhead(first);
    std::map<std::string, std::map<long, std::string>> sets;
    for (const char* p : kCommonRankNames) {
        if (!isFile(childLocation(folder, rankName(p, 0))) || !isFile(childLocation(folder, rankName(p, 1)))) continue;
        auto& ranks = sets[p];
        for (long next = 0, batch = 8; ranks.size() == static_cast<size_t>(next); next += batch, batch *= 2) {
            std::vector<std::string> ask;
            for (long r = next; r < next + batch; ++r)
                ask.push_back(childLocation(folder, rankName(p, r)));
            statAhead(ask);
            for (long r = next; r < next + batch && isFile(ask[static_cast<size_t>(r - next)]); ++r)
                ranks[r] = rankName(p, r);
        }
    }
    return sets;
}

/// the folder's files named alike but for their last number: pattern -> number -> file name
std::map<std::string, std::map<long, std::string>> numberedSets(const std::string& folder)
{
    if (!canListFolder(folder)) return guessedSets(folder);
    std::map<std::string, std::map<long, std::string>> sets;
    for (const FolderEntry& it : listFolder(folder)) {
        if (!isFile(it.location)) continue;
        const std::string name = it.name;
        if (name.empty() || name[0] == '.') continue;
        std::string pattern;
        long rank = 0;
        if (splitLastNumber(name, pattern, rank)) sets[pattern][rank] = name;
    }
    return sets;
}

/// whether rank r's own copy of a replicated entry (a step counter, a hyperparameter: every rank saves its own) says
/// the same as rank 0's. Values compare as inspect --json renders them; tensors by their stored bytes when each is one
/// plain storage record of at most kReplicaBytes in a local file (an object store would pay a request per copy);
/// nullopt: not compared
constexpr uint64_t kReplicaBytes = uint64_t(1) << 20;
std::optional<bool> sameReplica(const Checkpoint& c0, const Entry& e0, const Checkpoint& cr, const Entry& er)
{
    if (e0.isTensor() != er.isTensor()) return false;
    if (!e0.isTensor()) return valueToJson(e0.value) == valueToJson(er.value);
    const TensorEntry& t0 = *e0.tensor;
    const TensorEntry& tr = *er.tensor;
    if (t0.dtype != tr.dtype || t0.shape != tr.shape) return false;
    if (t0.chunks.size() != 1 || tr.chunks.size() != 1 || t0.lazyBits != tr.lazyBits) return std::nullopt;
    const TensorChunk a = t0.chunks[0], b = tr.chunks[0];
    if (a.source.kind != ChunkSource::Kind::StorageRecord || b.source.kind != ChunkSource::Kind::StorageRecord
        || a.source.length != b.source.length || a.source.length > kReplicaBytes
        || a.source.storageOffset != b.source.storageOffset || a.source.strides != b.source.strides
        || a.source.bigEndian != b.source.bigEndian || !c0.files || !cr.files
        || isUrl(c0.files->absolute(a.source.file)))
        return std::nullopt;
    const auto fa = c0.files->open(a.source.file);
    const auto fb = cr.files->open(b.source.file);
    if (a.source.offset + a.source.length > fa->size() || b.source.offset + b.source.length > fb->size())
        return std::nullopt; // cut short: the reader's own warning says so
    return std::memcmp(fa->bytes(a.source.offset, a.source.length), fb->bytes(b.source.offset, b.source.length),
               a.source.length)
        == 0;
}

/// a replicated entry's value as a message shows it ("2.0", "0.5"); empty when it is no short number or string
std::string replicaText(const Checkpoint& cp, const Entry& e)
{
    try {
        if (auto scalar = scalarValueText(cp, e)) return *scalar;
    } catch (const Error&) { }
    if (e.isTensor()) return {};
    const std::string text = valueToJson(e.value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return text.size() <= 40 ? text : std::string();
}

} // namespace

std::vector<std::string> TorchSaveRanksReader::rankFiles(const std::string& folder)
{
    const auto sets = numberedSets(folder);
    std::vector<std::string> found;
    int complete = 0;
    for (const auto& [pattern, ranks] : sets) {
        // ranks 0..N-1, N >= 2
        if (ranks.size() < 2 || ranks.begin()->first != 0 || ranks.rbegin()->first != long(ranks.size()) - 1) continue;
        ++complete;
        found.clear();
        for (const auto& [rank, name] : ranks)
            found.push_back((Location(folder) / name).string());
    }
    if (complete != 1) return {}; // none, or several sets (model_rank#.pt and optim_rank#.pt): which one?
    return found;
}

std::string TorchSaveRanksReader::missingRankFiles(const std::string& folder)
{
    std::string found;
    for (const auto& [pattern, ranks] : numberedSets(folder)) {
        // from rank 0, with gaps: a set of rank files that lost some (a step_100, step_300 series has no rank 0)
        if (ranks.size() < 2 || ranks.begin()->first != 0 || ranks.rbegin()->first == long(ranks.size()) - 1) continue;
        try {
            const auto first = openByteSource((Location(folder) / ranks.begin()->second).string());
            if (!looksLikeTorchSave(first->bytes(0, std::min(first->size(), kTorchSaveHeadBytes)),
                    std::min(first->size(), kTorchSaveHeadBytes)))
                continue;
        } catch (const Error& e) {
            if (isReadFailure(e)) throw; // a rank file listed but not readable: say so, not "no gaps"
            continue;
        }
        if (!found.empty()) return {}; // several such sets: no one answer
        std::vector<std::string> missing;
        const auto hash = pattern.find('#');
        for (long r = 0; r < ranks.rbegin()->first; ++r)
            if (!ranks.count(r))
                missing.push_back(pattern.substr(0, hash) + std::to_string(r) + pattern.substr(hash + 1));
        std::string list;
        for (size_t i = 0; i < missing.size() && i < 8; ++i)
            list += (i ? ", " : "") + missing[i];
        if (missing.size() > 8) list += ", ... (" + std::to_string(missing.size()) + " in all)";
        found = "holds per-rank torch.save files " + ranks.begin()->second + " to " + ranks.rbegin()->second
            + " with gaps: " + list + (missing.size() == 1 ? " is" : " are") + " missing";
    }
    return found;
}

bool TorchSaveRanksReader::looksLikeRankFiles(const std::string& folder)
{
    const auto files = rankFiles(folder);
    if (files.empty()) return false;
    try {
        const auto first = openByteSource(files.front());
        return looksLikeTorchSave(first->bytes(0, std::min(first->size(), kTorchSaveHeadBytes)),
            std::min(first->size(), kTorchSaveHeadBytes));
    } catch (const Error& e) {
        if (isReadFailure(e)) throw; // listed but not readable: say so, not "holds none of the formats"
        return false;
    }
}

namespace {

bool isShardedTensor(const Entry& e)
{
    return e.isTensor() && !e.tensor->subclass.empty();
}

std::string fileNameOf(const std::string& path)
{
    return Location(path).filename().string();
}

/// every rank file read as a torch.save checkpoint of its own, in rank order
std::vector<CheckpointPtr> readRankFiles(
    const std::string& folder, const std::vector<std::string>& paths, const Progress& progress)
{
    // remote rank files: while one is read, the first bytes of the next ones are fetched (a round trip or three for
    // each file one after the other, at 1,024 ranks, was most of the time); opened as they are read, a missing one
    // fails where it did
    std::vector<std::shared_ptr<const ByteSource>> files(paths.size());
    auto fileOf = [&](size_t r) -> const std::shared_ptr<const ByteSource>& {
        if (!files[r]) files[r] = openByteSource(paths[r]);
        return files[r];
    };
    LookAhead ahead(
        paths.size(), [&](size_t) { return uint64_t(128) << 10; },
        [&](size_t r) {
            try {
                prefetchTorchSaveArchive(*fileOf(r), 0, fileOf(r)->size());
            } catch (const Error&) {
                // met again when rank r is read, and said there
            }
        },
        uint64_t(4) << 20, 16);
    std::vector<CheckpointPtr> ranks;
    for (size_t r = 0; r < paths.size(); ++r) {
        progress.checkCancelled();
        progress(double(r) / double(paths.size()), "reading rank files");
        if (isUrl(folder)) ahead.before(r);
        Progress quiet; // one file's own fractions would run back to 0 for every rank
        quiet.cancelled = progress.cancelled;
        ranks.push_back(TorchSaveReader::open(fileOf(r), quiet));
        files[r].reset(); // the rank's checkpoint holds it
    }
    return ranks;
}

/// the ranks' files into @p cp's, and their warnings: each once, naming the rank's file past rank 0
void addRankFilesAndWarnings(
    Checkpoint& cp, const std::vector<CheckpointPtr>& ranks, const std::vector<std::string>& paths)
{
    for (size_t r = 0; r < paths.size(); ++r) {
        const std::string name = fileNameOf(paths[r]);
        cp.files->add(name, ranks[r]->files->open(name));
        for (const auto& w : ranks[r]->warnings) {
            CheckpointWarning copy = w;
            if (r > 0) copy.message = name + ": " + copy.message;
            // the same warning of every rank once
            const bool seen = r > 0 && std::any_of(cp.warnings.begin(), cp.warnings.end(), [&](const auto& o) {
                return o.code == w.code && o.key == w.key;
            });
            if (!seen) cp.warnings.push_back(std::move(copy));
        }
    }
}

/// How the ranks' entries disagree with rank 0's, by rank: the sharded tensors a rank lacks, and rank 0's entries
/// whose replicated copy differs on that rank (1,000 at most)
struct RankDisagreement
{
    std::vector<std::vector<std::string>> missing;
    std::vector<std::vector<size_t>> differing;
};

/// rank 0's entries, each sharded tensor with every rank's shards (a replicated shard once: the first rank's)
RankDisagreement mergeRankEntries(Checkpoint& cp, const std::vector<CheckpointPtr>& ranks,
    const std::vector<std::string>& paths, const std::vector<std::unordered_map<std::string, size_t>>& byKey)
{
    const Checkpoint& first = *ranks.front();
    const auto fileTable = std::make_shared<FileNameTable>();
    RankDisagreement d;
    d.missing.resize(ranks.size());
    d.differing.resize(ranks.size());
    cp.entries.reserve(first.entries.size());
    for (const Entry& e0 : first.entries) {
        Entry e = e0;
        if (e0.isTensor()) {
            e.tensor->chunks = ChunkTable();
            e.tensor->chunks.useFileTable(fileTable);
            std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;
            auto add = [&](const ChunkTable& from, int rank) {
                for (size_t i = 0; i < from.size(); ++i) {
                    // a replicated shard every rank holds: the first rank's
                    if (!boxes.emplace(from.offsetsOf(i).vec(), from.sizesOf(i).vec()).second) continue;
                    TensorChunk c = from[i];
                    c.rank = rank;
                    e.tensor->chunks.push_back(c);
                }
            };
            add(e0.tensor->chunks, 0);
            if (isShardedTensor(e0))
                for (size_t r = 1; r < ranks.size(); ++r) {
                    const auto it = byKey[r].find(e0.key);
                    if (it == byKey[r].end()) {
                        d.missing[r].push_back(e0.key);
                        continue;
                    }
                    const Entry& er = ranks[r]->entries[it->second];
                    if (!er.isTensor() || er.tensor->shape != e0.tensor->shape
                        || er.tensor->dtype != e0.tensor->dtype) {
                        cp.warnings.push_back({ReaderCode::RankFilesDisagree,
                            fileNameOf(paths[r]) + " holds '" + e0.key
                                + "' with another type, shape or dtype than rank 0's: its shard is left out",
                            e0.key, true, "", "", "", ""});
                        continue;
                    }
                    add(er.tensor->chunks, static_cast<int>(r));
                }
            // the ranks' shards together: held here now (rank 0 itself may be the rank without rows)
            if (!e.tensor->chunks.empty()) e.tensor->shardsElsewhere = false;
        }
        if (!isShardedTensor(e0))
            for (size_t r = 1; r < ranks.size(); ++r) {
                const auto it = byKey[r].find(e0.key);
                if (it == byKey[r].end() || d.differing[r].size() >= 1000) continue;
                const Entry& er = ranks[r]->entries[it->second];
                if (sameReplica(first, e0, *ranks[r], er) == std::optional<bool>(false))
                    d.differing[r].push_back(&e0 - first.entries.data());
            }
        cp.entries.push_back(std::move(e));
    }
    return d;
}

/// what each rank's file holds that rank 0's does not, lacks, or holds otherwise, as warnings
void addRankDisagreementWarnings(Checkpoint& cp, const std::vector<CheckpointPtr>& ranks,
    const std::vector<std::string>& paths, const std::vector<std::unordered_map<std::string, size_t>>& byKey,
    const RankDisagreement& d)
{
    const Checkpoint& first = *ranks.front();
    const std::string firstName = fileNameOf(paths[0]);
    for (size_t r = 1; r < ranks.size(); ++r) {
        // keys a rank's file has and rank 0's does not
        std::vector<std::string> extra;
        for (const Entry& er : ranks[r]->entries)
            if (!first.find(er.key)) extra.push_back(er.key);
        const std::string name = fileNameOf(paths[r]);
        if (!d.missing[r].empty())
            cp.warnings.push_back({ReaderCode::RankFilesDisagree,
                name + " lacks " + std::to_string(d.missing[r].size()) + " sharded tensor(s) that " + firstName
                    + " has, first '" + d.missing[r].front() + "': their shards of that rank are missing",
                d.missing[r].front(), true, "", "", "", ""});
        if (!d.differing[r].empty()) {
            // each rank loads its own file: ranks that saved different replicated state resume out of step (Adam's
            // bias correction by another step, another lr) and nothing in PyTorch says so
            const Entry& e0 = first.entries[d.differing[r].front()];
            const Entry& er = ranks[r]->entries[byKey[r].at(e0.key)];
            const std::string v0 = replicaText(first, e0), vr = replicaText(*ranks[r], er);
            cp.warnings.push_back({ReaderCode::RankFilesDisagree,
                name + " holds " + std::to_string(d.differing[r].size()) + (d.differing[r].size() >= 1000 ? "+" : "")
                    + " replicated value(s) that differ from " + firstName + "'s, first '" + e0.key + "'"
                    + (v0.empty() || vr.empty() ? std::string() : " (" + vr + ", rank 0: " + v0 + ")")
                    + ": each rank loads its own file, so the ranks resume out of step; rank 0's are shown",
                e0.key, true, "", "", "", ""});
        }
        if (!extra.empty())
            cp.warnings.push_back({ReaderCode::RankFilesDisagree,
                name + " has " + std::to_string(extra.size()) + " key(s) that " + firstName + " lacks, first '"
                    + extra.front() + "': rank 0's keys are read",
                extra.front(), false, "", "", "", ""});
    }
}

} // namespace

CheckpointPtr TorchSaveRanksReader::open(const std::string& folder, const Progress& progress)
{
    const std::vector<std::string> paths = rankFiles(folder);
    if (paths.empty()) throw Error(ErrorKind::Format, folder, "holds no set of per-rank torch.save files");
    const std::vector<CheckpointPtr> ranks = readRankFiles(folder, paths, progress);
    const Checkpoint& first = *ranks.front();
    if (std::none_of(first.entries.begin(), first.entries.end(), isShardedTensor))
        throw Error(ErrorKind::Format, folder,
            "holds per-rank torch.save files (" + fileNameOf(paths.front()) + " to " + fileNameOf(paths.back())
                + ") without a DTensor or ShardedTensor: each rank's file stands alone. Open one of them; raw FSDP1 "
                  "optimizer files (flat parameters) become FQN-keyed with `optscope-cli unflatten FILES... --model "
                  "MODEL`");

    auto cp = std::make_shared<Checkpoint>();
    cp->format = CheckpointFormat::TorchSaveRanks;
    cp->path = folder;
    cp->pickleProtocol = first.pickleProtocol;
    cp->formatDetail = std::to_string(paths.size()) + " rank files " + fileNameOf(paths.front()) + " to "
        + fileNameOf(paths.back()) + "; " + first.formatDetail;
    cp->root = first.root;
    cp->arena = first.arena; // rank 0's values; the other ranks give chunks only, which point into their files
    cp->files = std::make_shared<CheckpointFiles>(folder);
    addRankFilesAndWarnings(*cp, ranks, paths);
    std::vector<std::unordered_map<std::string, size_t>> byKey(ranks.size());
    for (size_t r = 1; r < ranks.size(); ++r)
        for (size_t i = 0; i < ranks[r]->entries.size(); ++i)
            byKey[r].emplace(ranks[r]->entries[i].key, i);
    const RankDisagreement d = mergeRankEntries(*cp, ranks, paths, byKey);
    addRankDisagreementWarnings(*cp, ranks, paths, byKey, d);
    cp->buildIndex();
    progress(1.0, "read");
    return cp;
}

} // namespace optscope
