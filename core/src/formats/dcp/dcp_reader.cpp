// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/dcp/dcp_reader.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/dcp/dcp_metadata_reader.h"
#include "optscope/formats/state_flattener.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"
#include "optscope/pickle/pickle_machine.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <sys/stat.h>
#include <tuple>
#include <unordered_map>

namespace fs = std::filesystem;

namespace optscope {

namespace {

/// Lightning Fabric's meta.pt (see dcp_reader.h): its keys at the top level, after the DCP part's, where Fabric's
/// consolidation puts them; recorded as a companion file, which reshard copies as it is
void addFabricMeta(Checkpoint& cp, CheckpointBuilder& builder, const std::string& dir, const Progress& progress)
{
    if (!isFile(childLocation(dir, DcpReader::kFabricMetaFile))) return;
    std::set<std::string> dcpKeys;
    for (const auto& e : cp.entries)
        if (!e.path.empty()) dcpKeys.insert(e.path.front().key.str());
    CompanionFile companion {DcpReader::kFabricMetaFile, {}};
    std::set<std::string> duplicates;
    try {
        const PyValue* root
            = builder.addTorchSaveFile(DcpReader::kFabricMetaFile, {}, progress, [&](const KeyPath& path) {
                  if (path.empty() || !dcpKeys.count(path.front().key.str())) return false;
                  duplicates.insert(path.front().key.str());
                  return true;
              });
        if (!root || !root->isMapping())
            builder.error(ReaderCode::UnreadableValue,
                cp.files->absolute(DcpReader::kFabricMetaFile)
                    + " does not hold a dict (Lightning Fabric saves one: its checkpoint.update(meta) would fail)");
        else
            for (size_t i = 0; root->hasContainer() && i < root->size(); ++i)
                if (!dcpKeys.count(pyStr(root->dictKey(i)))) companion.keys.push_back(pyStr(root->dictKey(i)));
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::Cancelled) throw;
        builder.error(ReaderCode::UnreadableValue, std::string(e.what()));
    }
    for (const auto& k : duplicates)
        builder.warn(ReaderCode::DuplicateKey,
            "meta.pt and the DCP part both hold this key; the DCP part's is shown (Fabric's consolidation takes "
            "meta.pt's, and its load reads a module's or optimizer's from the DCP part)",
            k);
    cp.formatDetail += "; Lightning Fabric meta.pt (" + std::to_string(companion.keys.size()) + " keys)";
    cp.companionFiles.push_back(std::move(companion));
}

} // namespace

int DcpReader::rankFromFileName(const std::string& relativePath)
{
    const std::string name = fs::path(relativePath).filename().string();
    if (name.size() < 5 || name.compare(0, 2, "__") != 0) return -1;
    size_t i = 2;
    int rank = 0;
    bool any = false;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && rank < 100000000) {
        rank = rank * 10 + (name[i] - '0');
        any = true;
        ++i;
    }
    if (!any || i >= name.size() || name[i] != '_') return -1;
    return rank;
}

bool DcpReader::looksLikeDcp(const std::string& path)
{
    if (isFolder(path)) return isFile(childLocation(path, kMetadataFile));
    const std::string name = locationName(path);
    if (name == kMetadataFile) return isFile(path);
    // a data file of one: what a user who picks any file of the checkpoint means is the checkpoint (its bytes alone
    // are no pickle and no zip)
    return fs::path(name).extension() == ".distcp" && isFile(childLocation(parentLocation(path), kMetadataFile));
}

std::string DcpReader::folderOf(const std::string& path)
{
    return !isFolder(path) && looksLikeDcp(path) ? parentLocation(path) : path;
}

namespace {

/// The storage entries sorted by (fqn, has offsets, offsets), first written first among equals: a chunk finds its
/// entry by binary search, with no per-chunk key string
class StorageIndex
{
public:
    explicit StorageIndex(DcpMetadata& md)
        : m_md(md)
    {
        // in place (stable_sort's buffer was a copy of the whole table, 89 MB at 2.2M chunks, at the peak of the
        // open): ties are ordered by where they were written, which offsetsAt says (dims are appended in write
        // order; an entry without offsets has no use for it and gets its position)
        for (size_t i = 0; i < md.storage.size(); ++i)
            if (!md.storage[i].hasOffset) md.storage[i].offsetsAt = i;
        std::sort(md.storage.begin(), md.storage.end(), [&](const Storage& a, const Storage& b) {
            if (a.fqn != b.fqn) return a.fqn < b.fqn;
            if (a.hasOffset != b.hasOffset) return a.hasOffset < b.hasOffset;
            const auto [a0, a1] = offsetsOf(a);
            const auto [b0, b1] = offsetsOf(b);
            const auto [ma, mb] = std::mismatch(a0, a1, b0, b1);
            if (ma != a1 && mb != b1) return *ma < *mb;
            if (ma != a1 || mb != b1) return mb != b1; // a is a prefix of b
            return a.offsetsAt < b.offsetsAt;
        });
        m_fqnIds.reserve(md.storageFqns.size());
        for (size_t i = 0; i < md.storageFqns.size(); ++i)
            m_fqnIds.emplace(md.storageFqns[i], static_cast<uint32_t>(i));
    }

    /// the entry of @p fqn's chunk at @p offsets (a tensor chunk), or of its value (@p offsets null)
    const DcpMetadata::Storage* find(const std::string& fqn, const int64_t* offsets, uint32_t ndim)
    {
        auto id = m_fqnIds.find(fqn);
        if (id == m_fqnIds.end()) return nullptr;
        Storage probe;
        probe.fqn = id->second;
        probe.hasOffset = offsets != nullptr;
        if (offsets) {
            probe.ndim = ndim;
            probe.offsetsAt = kProbe;
            m_probeOffsets.assign(offsets, offsets + ndim);
        }
        auto less = [&](const Storage& a, const Storage& b) {
            if (a.fqn != b.fqn) return a.fqn < b.fqn;
            if (a.hasOffset != b.hasOffset) return a.hasOffset < b.hasOffset;
            const auto [a0, a1] = offsetsOf(a);
            const auto [b0, b1] = offsetsOf(b);
            return std::lexicographical_compare(a0, a1, b0, b1);
        };
        auto it = std::lower_bound(m_md.storage.begin(), m_md.storage.end(), probe, less);
        const bool found = it != m_md.storage.end() && !less(probe, *it);
        return found ? &*it : nullptr;
    }

private:
    using Storage = DcpMetadata::Storage;
    static constexpr uint64_t kProbe = ~uint64_t(0); ///< a search key: its offsets are in m_probeOffsets

    std::pair<const int64_t*, const int64_t*> offsetsOf(const Storage& s) const
    {
        const auto& dims = m_md.dims;
        if (s.ndim == 0) return std::make_pair(dims.data(), dims.data());
        const int64_t* p = s.offsetsAt == kProbe ? m_probeOffsets.data() : dims.data() + s.offsetsAt;
        return std::make_pair(p, p + s.ndim);
    }

    DcpMetadata& m_md;
    std::vector<int64_t> m_probeOffsets;
    std::unordered_map<std::string_view, uint32_t> m_fqnIds;
};

/// One open of a DCP folder: its .metadata, then an entry per item, each chunk placed in its data file (whose
/// existence and size are checked once each)
class DcpOpening
{
public:
    DcpOpening(const std::string& path, const Progress& progress)
        : m_progress(progress)
        , m_dir(isFolder(path) ? path : parentLocation(path))
        , m_cp(std::make_shared<Checkpoint>())
        , m_builder(*m_cp)
    {
        m_cp->format = CheckpointFormat::Dcp;
        m_cp->path = path;
        m_cp->arena = std::make_shared<PyArena>();
        m_cp->files = std::make_shared<CheckpointFiles>(m_dir);
    }

    std::shared_ptr<const Checkpoint> run()
    {
        readMetadata();
        StorageIndex index(m_md);
        m_index = &index;
        const size_t fileCount = m_md.files->size();
        m_fileSizes.assign(fileCount, -2);
        m_fileProblems.assign(fileCount, {});
        m_fileRanks.resize(fileCount);
        for (size_t f = 0; f < fileCount; ++f)
            m_fileRanks[f] = DcpReader::rankFromFileName(m_md.files->name(static_cast<uint32_t>(f)));
        askAhead();
        findSharedValueRanges();
        const size_t total = m_md.items.size();
        for (size_t i = 0; i < total; ++i) {
            if (i % 64 == 0) {
                m_progress.checkCancelled();
                m_progress(0.9 + 0.1 * static_cast<double>(i) / static_cast<double>(total), "reading metadata");
            }
            addItem(m_md.items[i]);
        }
        addFabricMeta(*m_cp, m_builder, m_dir, m_progress);
        m_builder.finish();
        m_progress(1.0, "reading metadata");
        return m_cp;
    }

private:
    /// .metadata by the fast reader, or by the pickle machine where the fast reader declines
    void readMetadata()
    {
        m_progress(0.0, "reading metadata");
        const std::string metaPath = childLocation(m_dir, DcpReader::kMetadataFile);
        // through the checkpoint's files: a .metadata that is a symlink out of the folder is not read (statInside)
        auto meta = m_cp->files->open(DcpReader::kMetadataFile);
        std::optional<DcpMetadata> fast = DcpMetadataReader::read(*meta, m_progress);
        if (fast) {
            m_md = std::move(*fast);
            m_cp->pickleProtocol = m_md.protocol;
        } else {
            m_cp->arena->keepAlive(meta);
            PickleOptions opt;
            opt.sourceName = metaPath;
            PickleResult r = unpickle(meta->all(), meta->size(), *m_cp->arena, opt);
            m_cp->pickleProtocol = r.protocol;
            m_cp->root = r.root;
            m_builder.addPickleWarnings(r.warnings);
            m_md = DcpMetadataReader::fromGraph(r.root, metaPath, r.protocol);
        }
        // .metadata is checked for change like the data files (checkUnchanged): one replaced while it was read, or
        // while the chunks it names were, is "changed while being read", not a silently mixed view. Its pages leave
        // our resident memory (a 1,024-rank .metadata is hundreds of MB); the map itself costs nothing.
        if (fast) meta->release(0, meta->size());
        m_cp->formatDetail = "DCP";
        if (!m_md.version.empty()) m_cp->formatDetail += " version " + m_md.version;
        for (const auto& e : m_md.storageErrors)
            m_builder.error(ReaderCode::BadStorageInfo, e);
        if (!m_md.hasStorageData)
            m_builder.error(ReaderCode::NoStorageData, "Metadata has no storage_data: chunk locations are unknown");
    }

    /// a data file's size, -1 when it cannot be read (said once, with what it is: "is missing", "is a FIFO")
    int64_t fileSize(uint32_t file)
    {
        int64_t& size = m_fileSizes[file];
        if (size != -2) return size;
        const std::string& rel = m_md.files->name(file);
        const MemberStat m = statInside(m_dir, rel);
        size = m.ok() ? static_cast<int64_t>(m.size) : -1;
        if (m.ok())
            m_cp->files->expectSize(rel, m.size);
        else
            m_builder.memberProblem(m, rel, DcpReader::kMetadataFile, "in " + m_dir);
        if (!m.ok()) m_fileProblems[file] = m.what;
        return size;
    }

    /// the item's bytes lie inside a readable data file, untransformed (reported for check when not)
    bool checkRange(const DcpMetadata::Storage& s, const std::string& key)
    {
        const int64_t size = fileSize(s.file);
        if (size < 0) return false;
        if (s.offset > static_cast<uint64_t>(size) || s.length > static_cast<uint64_t>(size) - s.offset) {
            m_builder.error(ReaderCode::ChunkOutOfRange,
                "item [" + std::to_string(s.offset) + ", +" + std::to_string(s.length) + ") lies past the end of '"
                    + m_md.files->name(s.file) + "' (" + std::to_string(size) + " bytes)",
                key);
            return false;
        }
        if (s.hasTransforms) {
            m_builder.error(ReaderCode::UnsupportedTransform,
                "item is stored through DCP stream transforms (compression/extensions), which are not supported", key);
            return false;
        }
        return true;
    }

    /// what a remote checkpoint would otherwise ask for one round trip at a time
    void askAhead()
    {
        // over plain HTTP each data file's size is a HEAD: asked for together, not one round trip per rank file
        std::vector<std::string> names(m_md.files->size());
        for (size_t f = 0; f < names.size(); ++f)
            names[f] = m_md.files->name(static_cast<uint32_t>(f));
        statInsideAhead(m_dir, names);
        // values stored as pickles (param_groups, extra state) are read one by one below, each a round trip on a
        // remote checkpoint: ask for them all first, so that they are fetched together (a local file has nothing to
        // ask). Quiet: what is wrong with a file or an item is reported below, in item order.
        if (!isUrl(m_dir)) return;
        constexpr uint64_t kAskAtMost = uint64_t(64) << 20;
        uint64_t asked = 0;
        for (const auto& item : m_md.items) {
            if (item.kind != DcpMetadata::ItemKind::Bytes) continue;
            const DcpMetadata::Storage* s = m_index->find(item.fqn, nullptr, 0);
            if (!s || s->hasTransforms) continue;
            const std::string& rel = m_md.files->name(s->file);
            const MemberStat m = statInside(m_dir, rel); // remembered: the loop's own stat costs nothing
            if (!m.ok() || s->offset > m.size || s->length > m.size - s->offset) continue;
            if ((asked += s->length) > kAskAtMost) break;
            try {
                m_cp->files->expectSize(rel, m.size);
                m_cp->files->open(rel)->prefetch(s->offset, s->length);
            } catch (const Error&) {
                // the loop meets it again and says so
            }
        }
    }

    void addItem(DcpMetadata::Item& item)
    {
        if (item.kind == DcpMetadata::ItemKind::Unknown && item.fqn.empty()) {
            m_builder.error(ReaderCode::BadMetadata, item.unknownText);
            return;
        }
        KeyPath path = item.path.empty() ? KeyPath {KeyPathElem::fromKey(item.fqn)} : std::move(item.path);
        if (item.kind == DcpMetadata::ItemKind::Tensor)
            addTensor(item, std::move(path));
        else if (item.kind == DcpMetadata::ItemKind::Bytes)
            addValue(item, std::move(path));
        else {
            m_builder.warn(ReaderCode::UnknownMetadata, item.unknownText, item.fqn);
            m_builder.addValue(std::move(path), item.value ? item.value : m_cp->arena->makeNone());
        }
    }

    /// a tensor: every chunk placed in its data file
    void addTensor(DcpMetadata::Item& item, KeyPath path)
    {
        const std::string& fqn = item.fqn;
        TensorEntry t;
        if (!item.dtype)
            m_builder.error(ReaderCode::BadMetadata, "tensor has no readable dtype in its properties", fqn);
        t.dtype = item.dtype.value_or(DType::Unknown);
        if (!item.shapeOk) m_builder.error(ReaderCode::BadMetadata, "tensor has no readable size", fqn);
        t.shape = std::move(item.shape);
        t.chunks.useFileTable(m_md.files);
        t.chunks.reserve(item.chunkCount, 0);
        for (uint64_t k = item.firstChunk; k < item.firstChunk + item.chunkCount; ++k) {
            const DcpMetadata::Chunk& c = m_md.chunks[k];
            if (!c.ok) {
                while (m_nextChunkError < m_md.chunkErrors.size() && m_md.chunkErrors[m_nextChunkError].first < k)
                    ++m_nextChunkError;
                if (m_nextChunkError < m_md.chunkErrors.size() && m_md.chunkErrors[m_nextChunkError].first == k)
                    m_builder.error(ReaderCode::BadMetadata, m_md.chunkErrors[m_nextChunkError].second, fqn);
                continue;
            }
            const int64_t* offsets = m_md.dims.data() + c.dimsAt;
            const int64_t* sizes = offsets + c.ndim;
            const DcpMetadata::Storage* s = m_index->find(fqn, offsets, c.ndim);
            if (!s) {
                m_builder.error(ReaderCode::MissingStorageInfo,
                    "no storage_data entry for the chunk at offsets " + shapeText({offsets, offsets + c.ndim}), fqn);
                t.chunks.appendBox(-1, offsets, sizes, c.ndim);
                continue;
            }
            checkRange(*s, fqn);
            t.chunks.appendBlob(m_fileRanks[s->file], s->file, s->offset, s->length, offsets, sizes, c.ndim);
        }
        m_builder.addTensor(std::move(path), std::move(t));
    }

    using ByteRange = std::tuple<uint32_t, uint64_t, uint64_t>; ///< file, offset, length

    /// the byte ranges that more than one value item points at: a writer that keeps one object shared by several
    /// keys writes it once (OptScope's, for a value shared through the pickle memo); dcp.save never does
    void findSharedValueRanges()
    {
        std::map<ByteRange, bool> seen; // range -> met more than once
        for (const auto& item : m_md.items) {
            if (item.kind != DcpMetadata::ItemKind::Bytes) continue;
            if (const DcpMetadata::Storage* s = m_index->find(item.fqn, nullptr, 0)) {
                auto [at, added] = seen.emplace(ByteRange {s->file, s->offset, s->length}, false);
                if (!added) at->second = true;
            }
        }
        for (const auto& [range, shared] : seen)
            if (shared) m_sharedValues.emplace(range, nullptr);
    }

    /// a value stored as a pickle (BYTE_IO): read now, its leaves under the item's path; None with the reason when
    /// it cannot be read
    void addValue(const DcpMetadata::Item& item, KeyPath path)
    {
        const std::string& fqn = item.fqn;
        const DcpMetadata::Storage* found = m_index->find(fqn, nullptr, 0);
        std::string err;
        if (!found) {
            err = "no storage_data entry for this value";
            m_builder.error(ReaderCode::MissingStorageInfo, err, fqn);
        } else if (checkRange(*found, fqn)) {
            const DcpMetadata::Storage& s = *found;
            const std::string& rel = m_md.files->name(s.file);
            const std::string where
                = m_cp->files->absolute(rel) + "[" + std::to_string(s.offset) + "+" + std::to_string(s.length) + "]";
            try {
                // a value several items share is read once and stays one value at each (not flattened, as a
                // repeated container past the flattening's budget stays one): flattening it at every key would
                // multiply what the writer kept shared
                const auto sharedRange = m_sharedValues.find(ByteRange {s.file, s.offset, s.length});
                if (sharedRange != m_sharedValues.end() && sharedRange->second) {
                    m_builder.addLeaf(std::move(path), sharedRange->second->root, *sharedRange->second, rel, where);
                    return;
                }
                auto file = m_cp->files->open(rel);
                TorchSaveArchive ar = readTorchSaveArchive(file, s.offset, s.length, *m_cp->arena, where);
                m_builder.addPickleWarnings(ar.warnings);
                if (sharedRange != m_sharedValues.end()) {
                    sharedRange->second = std::make_unique<TorchSaveArchive>(std::move(ar));
                    m_builder.addLeaf(std::move(path), sharedRange->second->root, *sharedRange->second, rel, where);
                    return;
                }
                // values of old (<= 2.3) checkpoints may still be nested (param_groups as one list): flatten them,
                // as deep as the state dict is descended from its root (an item already that deep stays whole)
                const int depthLeft = std::max(0, kMaxStateDepth - static_cast<int>(path.size()));
                auto leaves = flattenStateDict(ar.root, depthLeft);
                if (leaves.empty()) leaves.push_back({{}, ar.root}); // an empty mapping stays one value
                size_t partial = 0;
                for (auto& leaf : leaves) {
                    KeyPath full = path;
                    full.insert(full.end(), leaf.path.begin(), leaf.path.end());
                    if (isPartOfShardedTensor(leaf.value)) ++partial;
                    m_builder.addLeaf(std::move(full), leaf.value, ar, rel, where);
                }
                if (partial)
                    m_builder.warn(ReaderCode::ShardedTensorPickled,
                        "this value holds " + std::to_string(partial)
                            + " sharded tensor(s) (DTensor or ShardedTensor) pickled whole rather than saved as "
                              "tensor items, as dcp.save does when its planner does not flatten the state dict "
                              "(DefaultSavePlanner(flatten_state_dict=False)); a value is written by one rank, so "
                              "only that rank's shards are in the checkpoint and the others' are lost",
                        fqn);
                return;
            } catch (const Error& e) {
                err = e.what();
                m_builder.error(ReaderCode::UnreadableValue, err, fqn);
            }
        } else {
            // say which file and why (checkRange reported it for check; gather and the GUI show this text)
            const DcpMetadata::Storage& s = *found;
            const std::string abs = m_cp->files->absolute(m_md.files->name(s.file));
            const int64_t size = fileSize(s.file);
            err = size < 0 ? "its data file '" + abs + "' " + m_fileProblems[s.file] + " (written by rank "
                    + std::to_string(m_fileRanks[s.file]) + ")"
                : s.hasTransforms
                ? "it is stored in '" + abs + "' through DCP stream transforms, which are not supported"
                : "its bytes [" + std::to_string(s.offset) + ", +" + std::to_string(s.length)
                    + ") lie past the end of '" + abs + "' (" + std::to_string(size) + " bytes)";
        }
        m_builder.addValue(std::move(path), m_cp->arena->makeNone());
        m_cp->entries.back().error = err;
    }

    /// a DTensor's or ShardedTensor's local shards that do not make up the whole tensor
    static bool isPartOfShardedTensor(const PyValue* v)
    {
        if (!v || v->kind != PyKind::Tensor || !v->tensor->wrapper || v->tensor->wrapper->shards.empty()) return false;
        int64_t whole = 1, held = 0;
        for (const int64_t d : v->tensor->sizes)
            whole = d < 0 ? 0 : whole * d;
        for (const auto& s : v->tensor->wrapper->shards)
            if (s.tensor && s.tensor->kind == PyKind::Tensor) {
                int64_t n = 1;
                for (const int64_t d : s.tensor->tensor->sizes)
                    n *= d;
                held += n;
            }
        return held < whole;
    }

    const Progress& m_progress;
    const std::string m_dir;
    std::shared_ptr<Checkpoint> m_cp;
    CheckpointBuilder m_builder;
    DcpMetadata m_md;
    StorageIndex* m_index = nullptr; ///< run()'s, over m_md's storage entries
    std::vector<int64_t> m_fileSizes; ///< per data file: -2 unchecked, -1 cannot be read
    std::vector<std::string> m_fileProblems; ///< what a data file that is not read is ("is missing", "is a FIFO")
    std::vector<int> m_fileRanks;
    size_t m_nextChunkError = 0; ///< into m_md.chunkErrors, which are in chunk order
    /// findSharedValueRanges: each shared range's archive, once read
    std::map<ByteRange, std::unique_ptr<TorchSaveArchive>> m_sharedValues;
};

} // namespace

std::shared_ptr<const Checkpoint> DcpReader::open(const std::string& path, const Progress& progress)
{
    return DcpOpening(path, progress).run();
}

} // namespace optscope
