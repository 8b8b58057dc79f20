// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/megatron/megatron_dist_reader.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/dcp/dcp_reader.h"
#include "optscope/formats/state_flattener.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"
#include "optscope/model/flat_param_layout.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

namespace fs = std::filesystem;

namespace optscope {

namespace {

constexpr uint64_t kMaxSmallFile = uint64_t(1) << 20;

std::string readSmallText(const Location& p)
{
    auto file = openByteSource(p.string());
    if (file->size() > kMaxSmallFile) throw Error(ErrorKind::Limit, p.string(), "is larger than 1 MiB");
    return std::string(reinterpret_cast<const char*>(file->all()), file->size());
}

std::string trim(std::string s)
{
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
        s.pop_back();
    size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
        ++i;
    return s.substr(i);
}

/// iter_0000042 -> 42; -1 for other names
int64_t iterationNumber(const std::string& name)
{
    if (name.size() < 6 || name.size() > 5 + 12 || name.compare(0, 5, "iter_") != 0
        || name.find_first_not_of("0123456789", 5) != std::string::npos)
        return -1;
    return std::stoll(name.substr(5));
}

/// the newest iter_NNNNNNN/ folder of a save folder that has one with a metadata.json, and how many there are
std::pair<Location, size_t> newestIteration(const Location& dir)
{
    std::error_code ec;
    Location best;
    int64_t bestNum = -1;
    size_t count = 0;
    for (const FolderEntry& it : listFolder(dir)) {
        const int64_t n = iterationNumber(it.name);
        if (n < 0 || !isFile(Location(it.location) / MegatronDistReader::kMetadataJson)) continue;
        ++count;
        if (n > bestNum) {
            bestNum = n;
            best = Location(it.location);
        }
    }
    return {best, count};
}

/// the torch_dist part of a dist_checkpointing folder without its metadata.json: the DCP index and common.pt
bool isTorchDistWithoutMetadataJson(const Location& dir)
{
    std::error_code ec;
    return !(locationKind(dir / MegatronDistReader::kMetadataJson) != LocationKind::Missing)
        && isFile(dir / DcpReader::kMetadataFile) && isFile(dir / MegatronDistReader::kCommonFile);
}

/// the iteration folder: @p path itself, the one latest_checkpointed_iteration.txt in @p path names, or, when a save
/// folder lost that file, its newest iteration (with a warning in @p missingLatest)
Location iterationFolder(const Location& path, std::optional<CheckpointWarning>& missingLatest)
{
    std::error_code ec;
    if (isFile(path / MegatronDistReader::kMetadataJson) || isTorchDistWithoutMetadataJson(path)) return path;
    const Location latest = path / MegatronDistReader::kLatestFile;
    if (!isFile(latest)) {
        const auto [newest, count] = newestIteration(path);
        if (newest.empty())
            throw Error(ErrorKind::Format, path.string(),
                "has neither metadata.json nor " + std::string(MegatronDistReader::kLatestFile));
        const std::string name = newest.filename().string();
        CheckpointWarning w;
        w.code = ReaderCode::MegatronMissingLatest;
        w.message = "no " + std::string(MegatronDistReader::kLatestFile) + " in " + path.string() + ": read " + name
            + ", the newest of " + std::to_string(count) + " iteration folder(s)";
        w.isError = true;
        // megatron/training/checkpointing.py, _load_base_checkpoint: no tracker file and no --ckpt-step
        w.loadError = "Megatron-LM's load_checkpoint prints \"WARNING: could not find the metadata file "
            + latest.string()
            + "\" and \"    will not load any checkpoints and will start from random\": nothing is loaded and "
              "training restarts from iteration 0 (with --exit-on-missing-checkpoint it exits instead)";
        w.fix = "write the iteration into " + latest.string() + " (echo " + std::to_string(iterationNumber(name))
            + " > " + MegatronDistReader::kLatestFile + ") or pass --ckpt-step "
            + std::to_string(iterationNumber(name));
        missingLatest = std::move(w);
        refuseFolderOutside(path.string(), name, "of the newest iteration");
        return newest;
    }
    const std::string text = trim(readSmallText(latest));
    std::string name;
    if (text == "release") {
        name = "release";
    } else {
        // megatron/training/checkpointing.py, read_metadata (core_v0.16.1): print_rank_0 and sys.exit(), status 0
        if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != std::string::npos)
            throw Error(ErrorKind::Format, latest.string(),
                "holds '" + text.substr(0, 40)
                    + "', not an iteration number or 'release'. Megatron-LM's load_checkpoint prints \"ERROR: Invalid "
                      "metadata file "
                    + latest.string()
                    + ". Exiting\" and exits with status 0; write the iteration to load (the number of an iter_ "
                      "folder beside it) or 'release' into the file");
        char buf[32];
        std::snprintf(buf, sizeof buf, "iter_%07lld", std::stoll(text));
        name = buf;
    }
    const Location dir = path / name;
    if (!isFolder(dir)) throw Error(ErrorKind::Io, dir.string(), "is missing (named by " + latest.string() + ")");
    refuseFolderOutside(path.string(), name, "named by " + latest.string());
    return dir;
}

bool startsWith(std::string_view s, std::string_view p)
{
    return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

/// a DCP entry that is one path element (Megatron's keys: planner_data is None)
bool flatKey(const Entry& e)
{
    return e.path.size() == 1;
}

/// weight key -> FQN: Megatron model keys carry the "model." prefix of the training state dict
std::string fqnOf(const std::string& weightKey)
{
    return startsWith(weightKey, "model.") ? weightKey.substr(6) : weightKey;
}

/// "decoder.layers.mlp.linear_fc1.layer_norm_weight": a transformer block's layers saved as one tensor with a leading
/// layer axis (core_v0.16.1 transformer_block.py sharded_state_dict, the default); its per-layer parameter has one
/// dimension less, which is what Megatron's no-weight-decay rule looks at. "decoder.layers.0.mlp..." is not stacked.
bool stackedLayers(const std::string& key)
{
    const size_t at = key.find("layers.");
    if (at == std::string::npos || (at > 0 && key[at - 1] != '.')) return false;
    const size_t next = at + 7;
    return next < key.size() && !std::isdigit(static_cast<unsigned char>(key[next]));
}

KeyPath modelPath(const std::string& fqn)
{
    return {KeyPathElem::fromKey("model"), KeyPathElem::fromKey(fqn)};
}
KeyPath statePath(const std::string& fqn, const std::string& name)
{
    return {KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("state"), KeyPathElem::fromKey(fqn),
        KeyPathElem::fromKey(name)};
}

void setPath(Entry& e, KeyPath path)
{
    e.path = std::move(path);
    e.key = joinKeyPath(e.path);
}

/// One flat bucket tensor: optimizer.distributed.dp_group_idx_G.gbuf_idx_I.dtype_D.bucket_idx_B.<state>
struct BucketKey
{
    int dpGroup = 0;
    int gbuf = 0;
    std::string dtypeText; ///< "(torch.float32, torch.float32)"
    int bucket = 0;
    std::string state;
    bool operator<(const BucketKey& o) const
    {
        return std::tie(dpGroup, gbuf, dtypeText, bucket) < std::tie(o.dpGroup, o.gbuf, o.dtypeText, o.bucket);
    }
};

bool parseInt(const std::string& s, size_t& i, int& out)
{
    const size_t start = i;
    long long v = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && v < 1000000000)
        v = v * 10 + (s[i++] - '0');
    out = static_cast<int>(v);
    return i > start;
}

std::optional<BucketKey> parseBucketKey(const std::string& key)
{
    static const std::string p = "optimizer.distributed.dp_group_idx_";
    if (!startsWith(key, p)) return std::nullopt;
    BucketKey k;
    size_t i = p.size();
    if (!parseInt(key, i, k.dpGroup) || key.compare(i, 10, ".gbuf_idx_") != 0) return std::nullopt;
    i += 10;
    if (!parseInt(key, i, k.gbuf) || key.compare(i, 7, ".dtype_") != 0) return std::nullopt;
    i += 7;
    const size_t b = key.rfind(".bucket_idx_");
    if (b == std::string::npos || b < i) return std::nullopt;
    k.dtypeText = key.substr(i, b - i);
    size_t j = b + 12;
    if (!parseInt(key, j, k.bucket) || j >= key.size() || key[j] != '.') return std::nullopt;
    k.state = key.substr(j + 1);
    if (k.state.empty()) return std::nullopt;
    return k;
}

/// "(torch.bfloat16, torch.float32)" -> bfloat16
std::optional<DType> paramDtypeOf(const std::string& dtypeText)
{
    if (dtypeText.size() < 3 || dtypeText.front() != '(') return std::nullopt;
    const size_t comma = dtypeText.find(',');
    if (comma == std::string::npos) return std::nullopt;
    return dtypeFromName(trim(dtypeText.substr(1, comma - 1)));
}

class Mapper
{
public:
    Mapper(Checkpoint& cp, CheckpointBuilder& builder, const Progress& progress)
        : m_cp(cp)
        , m_builder(builder)
        , m_progress(progress)
    { }

    void run(const std::string& shardingType)
    {
        // model weights: every "model.*" tensor (and every weight an optimizer state names) under model.<fqn>
        for (size_t i = 0; i < m_cp.entries.size(); ++i) {
            const Entry& e = m_cp.entries[i];
            if (flatKey(e) && e.isTensor()) m_byKey.emplace(e.key, i);
        }
        for (size_t i = 0; i < m_cp.entries.size(); ++i) {
            Entry& e = m_cp.entries[i];
            if (!flatKey(e) || !e.isTensor()) continue;
            // a model weight: "model.<name>" as a sharded_state_dict(prefix="model.") saves it, or any other tensor
            // outside "optimizer." (Megatron-LM's training saves the model with no prefix: "decoder.layers...")
            if (!startsWith(e.key, "optimizer.")) {
                m_weights.push_back(i);
                continue;
            }
            // optimizer.state.<name>.<weight key>: state names have no dots
            static const std::string p = "optimizer.state.";
            if (!startsWith(e.key, p)) continue;
            const size_t dot = e.key.find('.', p.size());
            if (dot == std::string::npos) continue;
            const std::string name = e.key.substr(p.size(), dot - p.size());
            const std::string weight = e.key.substr(dot + 1);
            if (!m_byKey.count(weight)) continue;
            m_trainable.insert(weight);
            if (name != "param") setPath(e, statePath(fqnOf(weight), name));
        }
        if (shardingType == "dp_reshardable") mapBuckets();
        // param groups are assigned later, after entries may have moved: keep what they need by value
        for (size_t i : m_weights) {
            Entry& w = m_cp.entries[i];
            if (m_trainable.count(w.key)) m_trainableInOrder.emplace_back(w.key, w.tensor->shape.size());
            setPath(w, modelPath(fqnOf(w.key)));
        }
    }

    /// param_groups (from common.pt or the pickled optimizer) under optim.param_groups with FQN params; step per
    /// parameter from its group
    void addParamGroups(const PyValue* groups, const std::string& where)
    {
        if (!groups || !groups->isSequence() || groups->size() == 0) return;
        // the trainable weights in registration order
        std::vector<std::string> names;
        std::map<std::string, size_t> ndims;
        for (const auto& [key, ndim] : m_trainableInOrder) {
            names.push_back(key);
            ndims[key] = stackedLayers(key) && ndim > 0 ? ndim - 1 : ndim;
        }
        std::vector<std::vector<std::string>> members(groups->size());
        bool assigned = false;
        if (groups->size() == 1) {
            members[0] = names;
            assigned = true;
        } else if (groups->size() == 2) {
            // Megatron's default no_weight_decay_cond: biases and 1-D weights go to the group with wd_mult 0
            int noWd = -1;
            int count = 0;
            for (size_t g = 0; g < 2; ++g) {
                const PyValue* wd = groups->item(g)->get("wd_mult");
                if (wd
                    && ((wd->kind == PyKind::Float && wd->real == 0.0)
                        || (wd->kind == PyKind::Int && wd->integer == 0))) {
                    noWd = static_cast<int>(g);
                    ++count;
                }
            }
            if (count == 1) {
                for (const auto& n : names) {
                    const bool bias = ndims[n] == 1 || (n.size() >= 5 && n.compare(n.size() - 5, 5, ".bias") == 0);
                    members[bias ? noWd : 1 - noWd].push_back(n);
                }
                assigned = true;
            }
        }
        if (!assigned) {
            m_builder.warn(ReaderCode::MegatronParamGroups,
                "the " + std::to_string(groups->size()) + " param_groups in " + where
                    + " do not list their parameters and are not Megatron's default weight-decay / no-weight-decay "
                      "pair (a no_weight_decay_cond or scale_lr_cond makes more): their params lists are left empty "
                      "and each parameter's state is shown without its group's lr, weight decay and step");
            m_cp.warnings.back().fix
                = "the grouping comes from the training script's conditions, not from the files: a conversion to "
                  "PyTorch (reshard --layout fsdp2) writes these groups with empty params lists, which PyTorch's "
                  "loaders cannot attach to parameters";
        }
        for (size_t g = 0; g < groups->size(); ++g) {
            const PyValue* group = groups->item(g);
            if (!group->isMapping()) continue;
            const KeyPath base {KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("param_groups"),
                KeyPathElem::fromIndex(static_cast<int64_t>(g))};
            for (size_t k = 0; k < group->size(); ++k) {
                KeyPath p = base;
                p.push_back(KeyPathElem::fromKey(pyStr(group->dictKey(k))));
                // tuples (betas) are leaves in DCP's flattening only as lists; keep the value whole
                m_builder.addValue(std::move(p), group->dictValue(k));
            }
            PyValue* params = m_cp.arena->makeContainer(PyKind::List);
            for (const auto& n : members[g])
                params->container->items.push_back(m_cp.arena->makeStr(fqnOf(n), true));
            KeyPath p = base;
            p.push_back(KeyPathElem::fromKey("params"));
            m_builder.addValue(std::move(p), params);
            if (const PyValue* step = group->get("step"))
                for (const auto& n : members[g])
                    m_builder.addValue(statePath(fqnOf(n), "step"), step);
        }
    }

private:
    struct Bucket
    {
        std::map<std::string, size_t> states; ///< state name -> entry
        int64_t numel = -1; ///< unpadded (the tensors' length)
        DType dtype = DType::Unknown;
    };
    struct Blob
    {
        bool ok = false;
        TensorChunk base; ///< StorageRecord chunk of the item's tensor
    };

    /// the item's tensor as a StorageRecord chunk (the storage inside the embedded archive), cached per item
    const Blob& blob(const Entry& e, size_t c)
    {
        const TensorChunk ch = e.tensor->chunks[c];
        const std::string id = ch.source.file + "@" + std::to_string(ch.source.offset);
        auto it = m_blobs.find(id);
        if (it != m_blobs.end()) return it->second;
        Blob& b = m_blobs[id];
        const std::string where = m_cp.files->absolute(ch.source.file) + "[" + std::to_string(ch.source.offset) + "+"
            + std::to_string(ch.source.length) + "]";
        try {
            if (ch.source.kind != ChunkSource::Kind::TorchSaveBlob)
                throw Error(ErrorKind::Format, where, "is not a DCP item");
            auto file = m_cp.files->open(ch.source.file);
            TorchSaveArchive ar = readTorchSaveArchive(file, ch.source.offset, ch.source.length, *m_cp.arena, where);
            if (!ar.root || ar.root->kind != PyKind::Tensor || !ar.root->tensor->storage)
                throw Error(ErrorKind::Format, where, "does not hold a tensor");
            const PyTensorInfo& t = *ar.root->tensor;
            const int64_t n = ch.sizes.empty() ? 0 : ch.sizes[0];
            if (t.sizes.size() != 1 || t.sizes[0] != n || (n > 1 && t.strides[0] != 1))
                throw Error(ErrorKind::Format, where,
                    "holds a tensor of shape " + shapeText(t.sizes) + ", not the 1-D contiguous chunk of "
                        + std::to_string(n) + " elements the metadata announces");
            b.base = CheckpointBuilder::chunkFromTensor(t, ar, ch.source.file, where);
            b.ok = true;
        } catch (const Error& err) {
            if (err.kind() == ErrorKind::Cancelled) throw;
            m_builder.error(ReaderCode::UnreadableValue, std::string("flat bucket item: ") + err.what(), e.key);
        }
        return b;
    }

    /// how the writers' ranks are laid out: rank = tp + TP * dp + TP * DP * pp (core_v0.16.1 parallel_state.py)
    struct ParallelLayout
    {
        int tp = 1, pp = 1, dp = 1;
    };

    /// the tensor and pipeline parallel sizes that explain every bucket item's writer (group g = tp + TP * pp is
    /// written by ranks r with r % TP == g % TP and r / (TP * DP) == g / TP); sets @p failure when none or several do
    ParallelLayout parallelLayout(const std::map<BucketKey, Bucket>& buckets, std::string& failure) const
    {
        std::set<int> groups;
        std::vector<std::pair<int, int>> writers; // (group, rank)
        int world = 0;
        for (const auto& [k, b] : buckets) {
            groups.insert(k.dpGroup);
            for (const auto& [state, idx] : b.states) {
                const ChunkTable& chunks = m_cp.entries[idx].tensor->chunks;
                for (size_t c = 0; c < chunks.size(); ++c) {
                    writers.emplace_back(k.dpGroup, chunks.rank(c));
                    world = std::max(world, chunks.rank(c) + 1);
                }
            }
        }
        for (size_t w : m_weights) {
            const ChunkTable& chunks = m_cp.entries[w].tensor->chunks;
            for (size_t c = 0; c < chunks.size(); ++c)
                world = std::max(world, chunks.rank(c) + 1);
        }
        const int G = static_cast<int>(groups.size());
        if (G <= 1) return {};
        if (*groups.rbegin() != G - 1) {
            failure = "the dp groups are not numbered 0.." + std::to_string(G - 1);
            return {};
        }
        std::vector<ParallelLayout> fits;
        for (int tp = 1; tp <= G; ++tp) {
            if (G % tp != 0 || world % G != 0) continue;
            ParallelLayout L {tp, G / tp, world / G};
            bool ok = true;
            for (const auto& [g, r] : writers)
                ok = ok && r >= 0 && r % L.tp == g % L.tp && r / (L.tp * L.dp) == g / L.tp;
            if (ok) fits.push_back(L);
        }
        if (fits.size() != 1) {
            failure = std::to_string(G) + " dp groups written by " + std::to_string(world)
                + " ranks: " + (fits.empty() ? std::string("no") : std::to_string(fits.size()))
                + " tensor x pipeline parallel layout explains which rank wrote which group's buckets";
            return {};
        }
        return fits.front();
    }

    /// the part of weight @p t that the rank (@p tp, @p pp) holds: its own chunk (a tensor-parallel shard, or a
    /// whole weight), or a replicated weight another tensor-parallel rank wrote (then @p emit is false: the copy is
    /// placed in the buffer but gives no data twice); false when the rank holds none of it
    static bool rankPart(const TensorEntry& t, const ParallelLayout& L, int tp, int pp, std::vector<int64_t>& offsets,
        std::vector<int64_t>& sizes, bool& emit, bool stacked)
    {
        emit = true;
        if (L.tp == 1 && L.pp == 1) {
            offsets.assign(t.shape.size(), 0);
            sizes = t.shape;
            return true;
        }
        std::vector<size_t> own, stage;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const int r = t.chunks.rank(c);
            if (r < 0 || r / (L.tp * L.dp) != pp) continue;
            stage.push_back(c);
            if (r % L.tp == tp) own.push_back(c);
        }
        if (!own.empty()) return boundingBoxOf(t, own, offsets, sizes);
        // written by another tensor-parallel rank: replicated when the stage's chunks hold it whole (but for the
        // layer axis of stacked layers, which the stage's rows cut)
        if (stage.empty() || !boundingBoxOf(t, stage, offsets, sizes)) return false;
        for (size_t d = 0; d < sizes.size(); ++d)
            if (sizes[d] != t.shape[d] && !(d == 0 && stacked)) return false;
        emit = false;
        return true;
    }

    /// the box the chunks @p cs fill exactly; false when they do not tile one box
    static bool boundingBoxOf(
        const TensorEntry& t, const std::vector<size_t>& cs, std::vector<int64_t>& offsets, std::vector<int64_t>& sizes)
    {
        const size_t nd = t.shape.size();
        std::vector<int64_t> lo(nd, INT64_MAX), hi(nd, 0);
        int64_t elements = 0;
        for (size_t c : cs) {
            const IntSpan o = t.chunks.offsetsOf(c), z = t.chunks.sizesOf(c);
            if (o.size() != nd) return false;
            for (size_t d = 0; d < nd; ++d) {
                lo[d] = std::min(lo[d], o[d]);
                hi[d] = std::max(hi[d], o[d] + z[d]);
            }
            elements += t.chunks.numelOf(c);
        }
        offsets = nd ? lo : std::vector<int64_t> {};
        sizes.assign(nd, 0);
        for (size_t d = 0; d < nd; ++d)
            sizes[d] = hi[d] - lo[d];
        return elements == numelOf(sizes);
    }

    static int64_t numelOf(const std::vector<int64_t>& shape)
    {
        int64_t n = 1;
        for (auto d : shape)
            n *= d;
        return n;
    }

    static std::string boxText(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes)
    {
        std::string s = "[";
        for (size_t d = 0; d < sizes.size(); ++d)
            s += (d ? ", " : "") + std::to_string(offsets[d]) + ":" + std::to_string(offsets[d] + sizes[d]);
        return s + "]";
    }

    /// The flat per-bucket tensors of a dp_reshardable DistributedOptimizer checkpoint, as one entry per weight and
    /// state: where each rank's part of each weight lies in its buckets (placeInBuffers), then those ranges as the
    /// weights' chunks (emitPlaced). Buckets the model weights do not explain stay as they are, with a warning.
    void mapBuckets()
    {
        const std::map<BucketKey, Bucket> buckets = collectBuckets();
        if (buckets.empty()) {
            m_builder.warn(ReaderCode::MegatronBucketLayout, "dp_reshardable checkpoint without flat bucket tensors");
            return;
        }
        std::string failure;
        const std::vector<Placed> placed = placeInBuffers(buckets, failure);
        if (!failure.empty()) {
            m_builder.warn(ReaderCode::MegatronBucketLayout,
                "the flat dp_reshardable buckets are shown as they are: the model weights in reverse order at "
                "64-element-aligned offsets do not explain them: "
                    + failure);
            return;
        }
        emitPlaced(buckets, placed);
    }

    std::map<BucketKey, Bucket> collectBuckets() const
    {
        std::map<BucketKey, Bucket> buckets;
        for (size_t i = 0; i < m_cp.entries.size(); ++i) {
            const Entry& e = m_cp.entries[i];
            if (!flatKey(e) || !e.isTensor()) continue;
            auto k = parseBucketKey(e.key);
            if (!k) continue;
            Bucket& b = buckets[*k];
            b.states[k->state] = i;
            if (e.tensor->shape.size() == 1) b.numel = e.tensor->shape[0];
        }
        return buckets;
    }

    static std::string bucketName(const BucketKey& k)
    {
        return "dp group " + std::to_string(k.dpGroup) + ", buffer " + std::to_string(k.gbuf) + " " + k.dtypeText
            + ", bucket " + std::to_string(k.bucket);
    }

    /// a rank's part of one weight at its place in a bucket
    struct Placed
    {
        const BucketKey* key;
        size_t weight;
        int64_t start;
        std::vector<int64_t> offsets, sizes; ///< the rank's part of the weight (the whole weight without TP)
        bool emit; ///< false for the copies of a replicated weight on tensor-parallel ranks after the first
    };

    /// Each dp group is the model chunk of one (tensor, pipeline) parallel rank (core_v0.16.1: dp_group_idx = tp +
    /// TP * pp; a writer's rank = tp + TP * dp + TP * DP * pp). Its buffer holds the parameters that rank holds, in
    /// reverse registration order at 64-element-aligned offsets, cut into buckets that each end with a parameter: for
    /// a tensor-parallel weight the rank's shard (its chunk of the weight), for a replicated one (a row-parallel bias)
    /// the whole tensor, which every tensor-parallel rank holds and the first one gives. @p failure says why the
    /// buckets do not fit that.
    std::vector<Placed> placeInBuffers(const std::map<BucketKey, Bucket>& buckets, std::string& failure) const
    {
        // the weights that fill the buffers, per parameter dtype, in registration (file) order
        std::map<std::string, std::vector<size_t>> byDtype; // dtype text -> weights
        for (const auto& [k, b] : buckets) {
            if (byDtype.count(k.dtypeText)) continue;
            const auto dt = paramDtypeOf(k.dtypeText);
            auto& list = byDtype[k.dtypeText];
            for (size_t w : m_weights)
                if (!dt || m_cp.entries[w].tensor->dtype == *dt) list.push_back(w);
        }
        const ParallelLayout layout = parallelLayout(buckets, failure);
        std::vector<Placed> placed;
        std::set<int> groups;
        for (const auto& [k, b] : buckets)
            groups.insert(k.dpGroup);
        for (auto g = groups.begin(); failure.empty() && g != groups.end(); ++g) {
            const int tp = *g % layout.tp, pp = *g / layout.tp;
            std::map<std::string, std::vector<std::pair<const BucketKey*, int64_t>>> groupBuckets; // dtype -> buckets
            for (const auto& [k, b] : buckets)
                if (k.dpGroup == *g) groupBuckets[k.dtypeText].push_back({&k, b.numel});
            for (const auto& [dtype, list] : groupBuckets) {
                std::vector<Placed> parts = rankParts(byDtype[dtype], layout, tp, pp, failure);
                if (failure.empty()) fillBuckets(parts, list, placed, failure);
                if (failure.empty() && !parts.empty())
                    failure = std::to_string(parts.size()) + " model weights of " + dtype + " of dp group "
                        + std::to_string(*g)
                        + " are left over after its last bucket (buffers, frozen weights or other model chunks)";
                if (!failure.empty()) break;
            }
        }
        return placed;
    }

    /// The rank (@p tp, @p pp)'s parts of the weights @p ws of its stage, in registration order. A block's layers
    /// stacked on one axis (decoder.layers.<name>, the default) are registered layer by layer, each layer with every
    /// weight of the stack: the stage's rows of the run of stacked weights, one layer at a time.
    std::vector<Placed> rankParts(
        const std::vector<size_t>& ws, const ParallelLayout& layout, int tp, int pp, std::string& failure) const
    {
        std::vector<Placed> parts;
        const auto stacked = [&](size_t k) {
            const Entry& e = m_cp.entries[ws[k]];
            return stackedLayers(e.key) && !e.tensor->shape.empty();
        };
        for (size_t i = 0; i < ws.size();) {
            size_t j = i + 1;
            if (stacked(i))
                while (j < ws.size() && stacked(j))
                    ++j;
            std::vector<Placed> run;
            for (size_t k = i; k < j; ++k) {
                Placed part {nullptr, ws[k], 0, {}, {}, true};
                if (rankPart(
                        *m_cp.entries[ws[k]].tensor, layout, tp, pp, part.offsets, part.sizes, part.emit, stacked(k)))
                    run.push_back(std::move(part));
            }
            if (!stacked(i) || run.empty()) {
                parts.insert(parts.end(), run.begin(), run.end());
            } else {
                const int64_t first = run.front().offsets[0], layers = run.front().sizes[0];
                for (const auto& r : run)
                    if (r.offsets[0] != first || r.sizes[0] != layers) {
                        failure = "the stacked weights from '" + m_cp.entries[ws[i]].key
                            + "' hold different layers on pipeline stage " + std::to_string(pp);
                        return parts;
                    }
                for (int64_t l = first; l < first + layers; ++l)
                    for (const auto& r : run) {
                        Placed layer = r;
                        layer.offsets[0] = l;
                        layer.sizes[0] = 1;
                        parts.push_back(std::move(layer));
                    }
            }
            i = j;
        }
        return parts;
    }

    /// places @p parts into the buckets @p list (key, numel) of one buffer, from the last part (the buffer's order
    /// is reversed), each at the next 64-element boundary; what is placed moves to @p placed, what no bucket took
    /// stays in @p parts
    void fillBuckets(std::vector<Placed>& parts, const std::vector<std::pair<const BucketKey*, int64_t>>& list,
        std::vector<Placed>& placed, std::string& failure) const
    {
        for (const auto& [k, numel] : list) {
            if (numel <= 0) {
                failure = bucketName(*k) + " has no 1-D flat tensors";
                return;
            }
            for (int64_t pos = 0; pos < numel;) {
                if (parts.empty()) {
                    failure = bucketName(*k) + " holds " + std::to_string(numel)
                        + " elements, more than the weights of its rank fill";
                    return;
                }
                Placed part = std::move(parts.back());
                parts.pop_back();
                const int64_t start = (pos + 63) / 64 * 64;
                const int64_t end = start + numelOf(part.sizes);
                if (end > numel) {
                    failure = "'" + m_cp.entries[part.weight].key + "' (" + std::to_string(numelOf(part.sizes))
                        + " elements at " + std::to_string(start) + ") does not end inside " + bucketName(*k) + " ("
                        + std::to_string(numel) + " elements)";
                    return;
                }
                part.key = k;
                part.start = start;
                placed.push_back(std::move(part));
                pos = end;
            }
        }
    }

    /// the placed parts as entries: one per weight and state, its chunks gathered from every group that holds a part
    /// of it, in place of the flat buckets
    void emitPlaced(const std::map<BucketKey, Bucket>& buckets, const std::vector<Placed>& placed)
    {
        std::set<size_t> consumed;
        std::map<const BucketKey*, int> bufferIds;
        std::map<std::pair<size_t, std::string>, Entry> outputs; // (weight, state) -> entry
        std::vector<std::pair<size_t, std::string>> outputOrder;
        for (const Placed& p : placed) {
            m_progress.checkCancelled();
            const Bucket& b = buckets.at(*p.key);
            const Entry& w = m_cp.entries[p.weight];
            const int64_t numel = numelOf(p.sizes);
            m_trainable.insert(w.key);
            for (const auto& [state, idx] : b.states)
                consumed.insert(idx);
            if (!p.emit) continue;
            std::string ranksNote;
            for (const auto& [state, idx] : b.states) {
                const Entry& flat = m_cp.entries[idx];
                auto [it, added] = outputs.try_emplace({p.weight, state});
                Entry& out = it->second;
                if (added) {
                    outputOrder.push_back(it->first);
                    out.kind = EntryKind::Tensor;
                    out.tensor->dtype = flat.tensor->dtype;
                    out.tensor->shape = w.tensor->shape;
                    if (state == "param")
                        out.path = {KeyPathElem::fromKey("optimizer.state.param." + w.key)};
                    else
                        out.path = statePath(fqnOf(w.key), state);
                    out.key = joinKeyPath(out.path);
                }
                // the part's elements lie row-major in the bucket: strides of the part, offsets of the weight
                const auto strides = contiguousStrides(p.sizes);
                std::set<int> ranks;
                for (size_t c = 0; c < flat.tensor->chunks.size(); ++c) {
                    const int64_t o = flat.tensor->chunks.offsetsOf(c)[0];
                    const int64_t n = flat.tensor->chunks.sizesOf(c)[0];
                    const int64_t a = std::max(o, p.start);
                    const int64_t z = std::min(o + n, p.start + numel);
                    if (a >= z) continue;
                    const Blob& bl = blob(flat, c);
                    if (!bl.ok) continue;
                    ranks.insert(flat.tensor->chunks.rank(c));
                    const int64_t begin = a - p.start;
                    for (const auto& box : flatRangeBoxes(p.sizes, begin, z - p.start)) {
                        TensorChunk piece;
                        piece.rank = flat.tensor->chunks.rank(c);
                        piece.offsets = box.offsets;
                        for (size_t d = 0; d < piece.offsets.size(); ++d)
                            piece.offsets[d] += p.offsets[d];
                        piece.sizes = box.sizes;
                        piece.source = bl.base.source;
                        piece.source.storageOffset = bl.base.source.storageOffset + (a - o) + (box.flatStart - begin);
                        piece.source.strides = p.sizes.empty() ? std::vector<int64_t> {} : strides;
                        out.tensor->chunks.push_back(piece);
                    }
                }
                if (ranksNote.empty())
                    for (int r : ranks)
                        ranksNote += (ranksNote.empty() ? "rank " : ", ") + std::to_string(r);
            }
            FlatPartitionSlot slot;
            slot.fqn = fqnOf(w.key);
            slot.buffer = bufferIds.emplace(p.key, static_cast<int>(bufferIds.size())).first->second;
            slot.bufferName = "dp group " + std::to_string(p.key->dpGroup) + " buffer " + std::to_string(p.key->gbuf)
                + " bucket " + std::to_string(p.key->bucket);
            slot.offset = p.start;
            slot.note = "elements [" + std::to_string(p.start) + ", " + std::to_string(p.start + numel) + ") of "
                + std::to_string(b.numel)
                + (p.sizes == w.tensor->shape ? std::string() : "; the rank's part " + boxText(p.offsets, p.sizes))
                + (ranksNote.empty() ? std::string() : "; held by " + ranksNote);
            m_cp.flatSlots.push_back(std::move(slot));
        }
        std::vector<Entry> added;
        for (const auto& k : outputOrder)
            added.push_back(std::move(outputs.at(k)));
        // the flat buckets are now the per-parameter entries; their padding is no data
        std::vector<Entry> kept;
        std::vector<size_t> newIndex(m_cp.entries.size(), SIZE_MAX);
        for (size_t i = 0; i < m_cp.entries.size(); ++i) {
            if (consumed.count(i)) continue;
            newIndex[i] = kept.size();
            kept.push_back(std::move(m_cp.entries[i]));
        }
        for (auto& e : added)
            kept.push_back(std::move(e));
        m_cp.entries = std::move(kept);
        for (size_t& i : m_weights)
            i = newIndex[i];
        m_byKey.clear();
        for (size_t i = 0; i < m_cp.entries.size(); ++i)
            if (flatKey(m_cp.entries[i]) && m_cp.entries[i].isTensor()) m_byKey.emplace(m_cp.entries[i].key, i);
    }

    Checkpoint& m_cp;
    CheckpointBuilder& m_builder;
    const Progress& m_progress;
    std::map<std::string, size_t> m_byKey; ///< flat tensor key -> entry
    std::vector<size_t> m_weights; ///< "model.*" tensor entries, in file (registration) order
    std::set<std::string> m_trainable; ///< weight keys with optimizer state
    std::vector<std::pair<std::string, size_t>> m_trainableInOrder; ///< weight key, ndim
    std::map<std::string, Blob> m_blobs;
};

/// metadata.json, which Megatron-Core's loader reads first: its backend must be torch_dist (the one it registers
/// for loading); a torch_dist folder without the file reads on, the error Megatron-Core's load raises a finding
struct Backend
{
    std::string version; ///< sharded_backend_version, as written
    std::optional<CheckpointWarning> missingMetadata;
};
Backend readBackend(const Location& dir, const Location& metaJson)
{
    std::string backend = "torch_dist";
    std::string version;
    std::optional<CheckpointWarning> missingMetadata;
    if (isTorchDistWithoutMetadataJson(dir)) {
        CheckpointWarning w;
        w.code = ReaderCode::MegatronMissingMetadata;
        w.message = "no metadata.json in " + dir.string()
            + ": read as Megatron-Core's torch_dist format, as its .metadata and common.pt say";
        w.isError = true;
        // megatron/core/dist_checkpointing/validation.py, verify_checkpoint_and_load_strategy (core_v0.16.1)
        w.loadError = "dist_checkpointing.load raises CheckpointingException: " + dir.string()
            + " is not a distributed checkpoint (Megatron-LM's load_checkpoint does not take it for torch_dist "
              "either: a folder with .metadata and no metadata.json is its torch_dcp format)";
        w.fix = "write " + metaJson.string()
            + " with {\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1, \"common_backend\": "
              "\"torch\", \"common_backend_version\": 1}";
        missingMetadata = std::move(w);
    } else {
        try {
            const auto j = nlohmann::json::parse(readSmallText(metaJson));
            if (!j.is_object() || !j.contains("sharded_backend") || !j["sharded_backend"].is_string())
                throw Error(ErrorKind::Format, metaJson.string(), "has no sharded_backend string");
            backend = j["sharded_backend"].get<std::string>();
            if (j.contains("sharded_backend_version")) version = j["sharded_backend_version"].dump();
        } catch (const nlohmann::json::exception& e) {
            throw Error(ErrorKind::Format, metaJson.string(), std::string("is not valid JSON: ") + e.what());
        }
    }
    if (backend != "torch_dist") {
        // strategies/base.py, get_default_strategy (core_v0.16.1): only ('torch_dist', 1) is registered for loading
        const bool quotable = !version.empty() && version.find_first_not_of("0123456789") == std::string::npos
            && backend.size() <= 60 && backend.find_first_of("'\\\n") == std::string::npos;
        throw Error(ErrorKind::Unsupported, metaJson.string(),
            "names sharded_backend '" + backend.substr(0, 60)
                + "'; only Megatron-Core's torch_dist backend (a torch.distributed.checkpoint folder) can be read"
                + (quotable
                        ? ". Megatron-Core 0.16 cannot load it either: CheckpointingException: Cannot find a default "
                          "strategy for: ('load_sharded', '"
                            + backend + "', " + version + ")"
                        : std::string()));
    }
    return {version, std::move(missingMetadata)};
}

/// common.pt, the objects not sharded (iteration, args, the optimizer's param_groups), with its leaves; missing or
/// unreadable, a finding and no objects
struct CommonFile
{
    const PyValue* root = nullptr;
    std::vector<FlattenedLeaf> leaves;
    TorchSaveArchive archive; ///< what the leaves' values were read from
};
CommonFile readCommon(const std::shared_ptr<Checkpoint>& cp, CheckpointBuilder& builder, const Location& dir,
    const std::string& commonAbs)
{
    CommonFile out;
    if (!isFile(dir / MegatronDistReader::kCommonFile)) {
        CheckpointWarning w;
        w.code = ReaderCode::MegatronMissingCommon;
        w.message = "'" + commonAbs
            + "' is missing: Megatron-Core's load_common_state_dict needs it (iteration, args, optimizer param_groups)";
        w.isError = true;
        // megatron/core/dist_checkpointing/strategies/common.py, TorchCommonLoadStrategy.load_common (core_v0.16.1)
        w.loadError
            = "dist_checkpointing.load raises CheckpointingException: Common file " + commonAbs + " does not exist";
        w.fix = "restore common.pt of this iteration from where the folder was copied from or a backup: it cannot be "
                "rebuilt from the sharded part";
        cp->warnings.push_back(std::move(w));
    } else {
        try {
            auto file = cp->files->openArchive(MegatronDistReader::kCommonFile);
            if (file->size() == 0) throw Error(ErrorKind::Format, commonAbs, "is empty (0 bytes)");
            out.archive = readTorchSaveArchive(file, 0, file->size(), *cp->arena, commonAbs);
            builder.addPickleWarnings(out.archive.warnings);
            out.root = out.archive.root;
            out.leaves = flattenStateDict(out.archive.root);
        } catch (const Error& e) {
            if (e.kind() == ErrorKind::Cancelled) throw;
            builder.error(ReaderCode::UnreadableValue, e.what());
            out.root = nullptr;
        }
    }
    return out;
}

/// Maps the DCP entries to Megatron's names (@p mapper); the DCP reader's warnings named entries by their keys in
/// the files, and follow the renames
void mapEntries(const std::shared_ptr<Checkpoint>& cp, Mapper& mapper, const std::string& sharding)
{
    std::vector<std::string> oldKeys;
    for (const auto& e : cp->entries)
        oldKeys.push_back(e.key);
    const size_t dcpEntries = cp->entries.size();
    mapper.run(sharding);
    // the DCP reader's warnings name entries by their keys in the files: follow the renames
    if (cp->entries.size() == dcpEntries) {
        std::map<std::string, std::string> renamed;
        for (size_t i = 0; i < dcpEntries; ++i)
            if (oldKeys[i] != cp->entries[i].key) renamed.emplace(oldKeys[i], cp->entries[i].key);
        for (auto& w : cp->warnings) {
            auto it = renamed.find(w.key);
            if (it != renamed.end()) w.key = it->second;
        }
    }
}

/// The optimizer's param_groups where common.pt has none (dp_reshardable): rebuilt from the leaves the DCP reader
/// made of the pickled optimizer of dp group 0, which are dropped (the groups become optim.param_groups); nullptr
/// when there are none
const PyValue* groupsOfPickledOptimizer(const std::shared_ptr<Checkpoint>& cp)
{
    // the DCP reader flattened the pickled optimizer object into leaves; rebuild the group dicts from them
    std::map<int64_t, PyValue*> byGroup;
    for (size_t i = 0; i < cp->entries.size(); ++i) {
        const Entry& e = cp->entries[i];
        if (e.isTensor() || e.path.size() != 5
            || !startsWith(e.path[0].key, "optimizer.distributed.dp_group_idx_0.optimizer/") || e.path[1].index != 0
            || e.path[2].key != "param_groups" || !e.path[3].isIndex())
            continue;
        PyValue*& g = byGroup[e.path[3].index];
        if (!g) g = cp->arena->makeContainer(PyKind::Dict);
        g->container->items.push_back(cp->arena->makeStr(e.path[4].key, true));
        g->container->items.push_back(const_cast<PyValue*>(e.value));
    }
    if (!byGroup.empty()) {
        // the leaves are now optim.param_groups: drop them rather than show the groups twice
        std::vector<Entry> kept;
        for (size_t i = 0; i < cp->entries.size(); ++i) {
            const Entry& e = cp->entries[i];
            if (!e.isTensor() && e.path.size() == 5
                && startsWith(e.path[0].key, "optimizer.distributed.dp_group_idx_0.optimizer/") && e.path[1].index == 0
                && e.path[2].key == "param_groups" && e.path[3].isIndex())
                continue;
            kept.push_back(std::move(cp->entries[i]));
        }
        cp->entries = std::move(kept);
        PyValue* list = cp->arena->makeContainer(PyKind::List);
        for (auto& [gi, g] : byGroup)
            list->container->items.push_back(g);
        return list;
    }
    return nullptr;
}

/// common.pt's other objects at their own keys (its optimizer's param_groups become optim.param_groups); a key the
/// sharded part holds too stays the sharded part's
void addCommonObjects(
    const std::shared_ptr<Checkpoint>& cp, CheckpointBuilder& builder, CommonFile& common, const std::string& commonAbs)
{
    std::set<std::string> keys;
    for (const auto& e : cp->entries)
        keys.insert(e.key);
    for (auto& leaf : common.leaves) {
        if (leaf.path.size() >= 3 && leaf.path[0].key == "optimizer" && leaf.path[1].key == "optimizer"
            && leaf.path[2].key == "param_groups")
            continue;
        const std::string key = joinKeyPath(leaf.path);
        if (keys.count(key)) {
            builder.warn(ReaderCode::DuplicateKey,
                "common.pt and the sharded part both hold this key; the sharded one is shown", key);
            continue;
        }
        builder.addLeaf(std::move(leaf.path), leaf.value, common.archive, MegatronDistReader::kCommonFile, commonAbs);
    }
}

} // namespace

bool MegatronDistReader::looksLikeMegatron(const std::string& path)
{
    std::error_code ec;
    if (!isFolder(path)) return false;
    const Location dir(path);
    if (isFile(dir / MegatronDistReader::kLatestFile)) return true;
    if (isTorchDistWithoutMetadataJson(dir)) return true; // its finding says what Megatron makes of it
    if (!isFile(dir / MegatronDistReader::kMetadataJson) && !isFile(dir / DcpReader::kMetadataFile)
        && !newestIteration(dir).first.empty())
        return true; // a save folder that lost its tracker file
    if (!isFile(dir / MegatronDistReader::kMetadataJson)) return false;
    // dist_checkpointing's metadata.json names its backends
    try {
        const std::string text = readSmallText(dir / MegatronDistReader::kMetadataJson);
        return text.find("sharded_backend") != std::string::npos;
    } catch (const Error&) {
        return isFile(dir / DcpReader::kMetadataFile);
    }
}

std::shared_ptr<const Checkpoint> MegatronDistReader::open(const std::string& path, const Progress& progress)
{
    progress(0.0, "reading Megatron checkpoint");
    std::optional<CheckpointWarning> missingLatest;
    const Location dir = iterationFolder(Location(path), missingLatest);
    const Location metaJson = dir / MegatronDistReader::kMetadataJson;
    Backend backend = readBackend(dir, metaJson);
    if (!isFile(dir / DcpReader::kMetadataFile))
        throw Error(ErrorKind::Io, (dir / DcpReader::kMetadataFile).string(),
            "is missing: metadata.json says torch_dist, whose sharded part is a DCP folder with a .metadata file");

    auto base = DcpReader::open(dir.string(), progress);
    auto cp = std::make_shared<Checkpoint>(*base);
    cp->format = CheckpointFormat::MegatronDist;
    cp->path = path;
    if (missingLatest) cp->warnings.insert(cp->warnings.begin(), std::move(*missingLatest));
    if (backend.missingMetadata) cp->warnings.insert(cp->warnings.begin(), std::move(*backend.missingMetadata));
    CheckpointBuilder builder(*cp);

    // common.pt: the non-sharded objects
    const std::string commonAbs = (dir / MegatronDistReader::kCommonFile).string();
    CommonFile common = readCommon(cp, builder, dir, commonAbs);
    auto commonGet = [&](std::initializer_list<const char*> keys) -> const PyValue* {
        const PyValue* v = common.root;
        for (const char* k : keys) {
            if (!v || !v->isMapping()) return nullptr;
            v = v->get(k);
        }
        return v;
    };
    std::string sharding;
    if (const PyValue* s = commonGet({"content_metadata", "distrib_optim_sharding_type"}); s && s->kind == PyKind::Str)
        sharding = std::string(s->text);
    else if (const PyValue* s2 = commonGet({"optimizer", "param_state_sharding_type"}); s2 && s2->kind == PyKind::Str)
        sharding = std::string(s2->text);

    Mapper mapper(*cp, builder, progress);
    mapEntries(cp, mapper, sharding);

    // param_groups: common.pt (fully_reshardable) or the pickled optimizer of dp group 0 (dp_reshardable)
    const PyValue* groups = commonGet({"optimizer", "optimizer", "param_groups"});
    std::string groupsWhere = commonAbs;
    if (!groups && (groups = groupsOfPickledOptimizer(cp))) groupsWhere = "the pickled optimizer of " + dir.string();

    addCommonObjects(cp, builder, common, commonAbs);
    mapper.addParamGroups(groups, groupsWhere);

    cp->formatDetail = "Megatron-Core dist_checkpointing, torch_dist backend"
        + (backend.version.empty() ? std::string() : " version " + backend.version)
        + (sharding.empty() ? std::string() : ", distributed optimizer " + sharding) + "; " + base->formatDetail;
    builder.finish();
    progress(1.0, "reading Megatron checkpoint");
    return cp;
}

} // namespace optscope
