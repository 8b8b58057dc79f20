// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/base/error.h"
#include "optscope/formats/format_registry.h"
#include "optscope/formats/state_flattener.h"

#include <algorithm>
#include <unordered_set>

namespace optscope {

bool metadataShardsCover(const PyTensorWrapperInfo& w, const std::vector<int64_t>& shape)
{
    if (!w.shards.empty() || w.metadataShards.empty() || !shapeIsRepresentable(shape, 1)) return false;
    int64_t numel = 1;
    for (auto s : shape)
        numel *= s;
    // in bounds and, as a ShardedTensor's shards do not overlap (its constructors validate that), covering the
    // tensor when their sizes add up to it
    int64_t covered = 0;
    for (const auto& b : w.metadataShards) {
        if (b.offsets.size() != shape.size() || b.sizes.size() != shape.size()) return false;
        int64_t n = 1;
        for (size_t d = 0; d < shape.size(); ++d) {
            if (b.offsets[d] < 0 || b.sizes[d] < 0 || b.offsets[d] > shape[d] || b.sizes[d] > shape[d] - b.offsets[d])
                return false;
            n *= b.sizes[d];
        }
        covered += n;
        if (covered > numel) return false;
    }
    return covered == numel;
}

bool shapeIsRepresentable(const std::vector<int64_t>& shape, size_t elementSize)
{
    for (auto s : shape)
        if (s < 0) return false;
    for (auto s : shape)
        if (s == 0) return true;
    auto bytes = static_cast<int64_t>(std::max<size_t>(elementSize, 1));
    for (auto s : shape) {
        if (bytes > INT64_MAX / s) return false;
        bytes *= s;
    }
    return true;
}

void CheckpointBuilder::chargeKeyPath(const KeyPath& path)
{
    m_keyPathBytes += keyPathBytes(path);
    if (m_keyPathBytes > kMaxKeyPathBytes)
        throw Error(ErrorKind::Limit, m_cp.path,
            "the entries' key paths take more than " + std::to_string(kMaxKeyPathBytes >> 20)
                + " MiB (long keys repeated through deep nesting)");
}

TensorChunk CheckpointBuilder::chunkFromTensor(
    const PyTensorInfo& t, const TorchSaveArchive& archive, const std::string& fileRel, const std::string& where)
{
    const PyStorageInfo& storage = torchSaveStorageOf(t, where);
    checkTorchSaveTensorExtent(t, storage.recordLength, where);
    TensorChunk c;
    c.offsets.assign(t.sizes.size(), 0);
    c.sizes = t.sizes;
    c.source.kind = ChunkSource::Kind::StorageRecord;
    c.source.file = fileRel;
    c.source.offset = storage.recordOffset;
    c.source.length = storage.recordLength;
    c.source.storageOffset = t.storageOffset;
    c.source.strides = t.strides;
    c.source.bigEndian = archive.bigEndian;
    return c;
}

void CheckpointBuilder::addLeaf(KeyPath path, const PyValue* value, const TorchSaveArchive& archive,
    const std::string& fileRel, const std::string& where, bool shared)
{
    if (value->kind != PyKind::Tensor) {
        if (path.size() >= static_cast<size_t>(kMaxStateDepth) && m_locatedStorage.holds(value))
            warn(ReaderCode::NestedTooDeep,
                "tensors nested deeper than " + std::to_string(kMaxStateDepth)
                    + " levels are kept inside this value: they are not listed, checked or written as tensors",
                joinKeyPath(path));
        addValue(std::move(path), value, fileRel);
        m_cp.entries.back().valueBigEndian = archive.bigEndian;
        return;
    }
    const PyTensorInfo& t = *value->tensor;
    const std::string key = joinKeyPath(path);
    TensorEntry e;
    // one table of file names for all entries, not one each: the name goes in first, or the first push would copy it
    m_fileNames->intern(fileRel);
    e.chunks.useFileTable(m_fileNames);
    e.dtype = t.dtype;
    e.requiresGrad = t.requiresGrad;
    e.isParameter = t.isParameter;
    e.subclass = std::string(t.subclass);
    if (t.wrapper) e.placements = std::string(t.wrapper->placements);
    e.lazyBits = static_cast<uint8_t>((t.conj ? kLazyConj : 0) | (t.neg ? kLazyNeg : 0));
    // bits every read applies need no word at open (check names them); those no read can apply do
    if (e.lazyBits && !lazyBitsUnreadable(e.lazyBits, e.dtype).empty())
        warn(ReaderCode::LazyBit, lazyBitText(e.lazyBits, e.dtype), key);
    if (t.storage) {
        e.chunks.push_back(chunkFromTensor(t, archive, fileRel, where));
    } else if (t.wrapper && !t.wrapper->shards.empty()) {
        for (const auto& s : t.wrapper->shards) {
            if (!s.tensor || !s.tensor->tensor->storage) continue;
            TensorChunk c = chunkFromTensor(*s.tensor->tensor, archive, fileRel, where);
            c.rank = s.rank;
            if (s.offsets.size() == c.sizes.size())
                c.offsets = s.offsets;
            else
                warn(ReaderCode::UnknownOffsets, "local shard of " + e.subclass.str() + " has no known global offset",
                    key);
            e.chunks.push_back(std::move(c));
        }
    } else if (t.wrapper && metadataShardsCover(*t.wrapper, t.sizes)) {
        // a rank without rows (FSDP1's SHARDED_STATE_DICT of 4 rows on 3 ranks): the other ranks' files hold the
        // tensor, and the folder of all of them reads it whole (torch_save_ranks)
        e.shardsElsewhere = true;
    }
    if (m_consumeGraphTensors && !shared && t.storage) {
        // no other path reaches this tensor value, and its chunk has copied what it needs
        auto& owned = const_cast<PyTensorInfo&>(t);
        e.shape = std::move(owned.sizes);
        std::vector<int64_t>().swap(owned.strides);
    } else {
        e.shape = t.sizes;
    }
    addTensor(std::move(path), std::move(e));
    // after addTensor, which refuses a shape whose size does not fit
    if (const TensorEntry& added = *m_cp.entries.back().tensor; added.withoutData())
        warn(ReaderCode::TensorWithoutData, added.withoutDataText(), key);
}

const PyValue* CheckpointBuilder::addTorchSaveFile(const std::string& fileRel, const KeyPath& prefix,
    const Progress& progress, const std::function<bool(const KeyPath&)>& skip)
{
    auto file = m_cp.files->openArchive(fileRel);
    const std::string where = m_cp.files->absolute(fileRel);
    if (file->size() == 0) throw Error(ErrorKind::Format, where, "is empty (0 bytes)");
    TorchSaveArchive ar = readTorchSaveArchive(file, 0, file->size(), *m_cp.arena, where);
    addPickleWarnings(ar.warnings);
    std::vector<FlattenedLeaf> leaves;
    try {
        leaves = flattenStateDict(ar.root);
    } catch (const Error& e) {
        throw Error(e.kind(), where, e.detail(), e.offset());
    }
    for (auto& leaf : leaves) {
        progress.checkCancelled();
        KeyPath path = prefix;
        path.insert(path.end(), leaf.path.begin(), leaf.path.end());
        if (skip && skip(path)) continue;
        addLeaf(std::move(path), leaf.value, ar, fileRel, where);
    }
    return ar.root;
}

void CheckpointBuilder::addValue(KeyPath path, const PyValue* value, const std::string& storageFile)
{
    chargeKeyPath(path);
    Entry e;
    e.key = joinKeyPath(path);
    e.path = std::move(path);
    e.kind = EntryKind::Value;
    e.value = value;
    if (!storageFile.empty() && m_locatedStorage.holds(value)) e.valueFile = storageFile;
    m_cp.entries.push_back(std::move(e));
}

void CheckpointBuilder::addTensor(KeyPath path, TensorEntry tensor)
{
    chargeKeyPath(path);
    Entry e;
    e.key = joinKeyPath(path);
    if (!shapeIsRepresentable(tensor.shape, dtypeSize(tensor.dtype))) {
        // every size computation downstream (numel, bytes, chunk bounds, buffers) relies on this
        std::string text;
        for (auto s : tensor.shape)
            text += (text.empty() ? "" : ", ") + std::to_string(s);
        error(ReaderCode::BadShape, "tensor shape [" + text + "] has a negative dimension or more than 2^63 bytes",
            e.key);
        tensor.shape.clear();
        tensor.chunks.clear();
    }
    e.path = std::move(path);
    e.kind = EntryKind::Tensor;
    e.tensor = std::move(tensor);
    m_cp.entries.push_back(std::move(e));
}

void CheckpointBuilder::addPickleWarnings(const std::vector<PickleWarning>& warnings)
{
    for (const auto& w : warnings) {
        if (w.code == ReaderCode::UnsafeGlobal)
            m_unsafeGlobals.emplace(w.classPath, w.message);
        else
            warn(w.code, w.message);
    }
}

void CheckpointBuilder::warn(ReaderCode code, std::string message, std::string key, bool isError)
{
    CheckpointWarning w;
    w.code = code;
    w.message = std::move(message);
    w.key = std::move(key);
    w.isError = isError;
    m_cp.warnings.push_back(std::move(w));
}

void CheckpointBuilder::memberProblem(
    const MemberStat& m, const std::string& fileRel, const std::string& namedBy, const std::string& detail)
{
    const ReaderCode code = m.kind == MemberStat::Outside             ? ReaderCode::PathOutsideCheckpoint
        : m.kind == MemberStat::Special || m.kind == MemberStat::Loop ? ReaderCode::SpecialFile
                                                                      : ReaderCode::MissingFile;
    std::string message = "data file '" + fileRel + "' named by " + namedBy + " " + m.what;
    if (!detail.empty()) message += " (" + detail + ")";
    if (m.kind == MemberStat::Outside) message += "; not read (--allow-outside-reads reads it)";
    warn(code, std::move(message), {}, true);
    m_cp.warnings.back().file = fileRel;
}

void CheckpointBuilder::finish()
{
    std::set<std::string> attributed;
    if (!m_unsafeGlobals.empty()) {
        // one walk over the whole graph: a value shared by many entries is attributed to the first that holds it
        // (a fresh walk per entry would be quadratic in the file's size)
        std::unordered_set<const PyValue*> seen;
        for (const auto& e : m_cp.entries) {
            if (e.isTensor()) continue;
            std::set<std::string> found;
            collectUnsafeGlobals(e.value, found, seen);
            for (const auto& path : found) {
                auto it = m_unsafeGlobals.find(path);
                warn(ReaderCode::UnsafeGlobal,
                    it != m_unsafeGlobals.end() ? it->second : "global '" + path + "' kept inert", e.key);
                m_cp.warnings.back().classPath = path;
                attributed.insert(path);
            }
        }
    }
    for (const auto& [path, message] : m_unsafeGlobals)
        if (!attributed.count(path)) {
            warn(ReaderCode::UnsafeGlobal, message);
            m_cp.warnings.back().classPath = path;
        }
    for (const size_t i : m_cp.buildIndex()) // (the index keeps the first of equal keys)
        warn(ReaderCode::DuplicateKey, "two entries flatten to the same key (DCP would refuse to save this state dict)",
            m_cp.entries[i].key);
}

} // namespace optscope
