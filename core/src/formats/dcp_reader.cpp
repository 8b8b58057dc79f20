// SPDX-License-Identifier: GPL-3.0-or-later
#include "dcp_reader.h"
#include "checkpoint_builder.h"
#include "dcp_metadata_reader.h"
#include "mapped_file.h"
#include "optscope/error.h"
#include "pickle_machine.h"
#include "state_flattener.h"
#include "torch_save_reader.h"

#include <filesystem>
#include <algorithm>
#include <map>
#include <numeric>
#include <sys/stat.h>
#include <unordered_map>

namespace fs = std::filesystem;

namespace optscope {

namespace {

/// dataclass fields: BUILD {name: value} (or (dict, slots) for __slots__ classes)
const PyValue* field(const PyValue* obj, std::string_view name)
{
    if (!obj || obj->kind != PyKind::Object || !obj->object->state) return nullptr;
    const PyValue* st = obj->object->state;
    if (st->kind == PyKind::Dict) return st->get(name);
    if (st->kind == PyKind::Tuple)
        for (const auto* part : st->items())
            if (part->kind == PyKind::Dict)
                if (const auto* f = part->get(name)) return f;
    return nullptr;
}

bool classEndsWith(const PyValue* obj, std::string_view name)
{
    const std::string cls = obj ? obj->className() : std::string();
    return cls.size() > name.size() && cls.compare(cls.size() - name.size(), name.size(), name) == 0
        && cls[cls.size() - name.size() - 1] == '.';
}

bool intVector(const PyValue* v, std::vector<int64_t>& out)
{
    out.clear();
    if (!v || !v->isSequence()) return false;
    for (const auto* i : v->items()) {
        if (i->kind != PyKind::Int) return false;
        out.push_back(i->integer);
    }
    return true;
}

std::optional<DType> dtypeOfProperties(const PyValue* props)
{
    if (!props || props->kind != PyKind::Object || !props->object->state) return std::nullopt;
    const PyValue* st = props->object->state;
    const PyValue* dt = nullptr;
    if (st->kind == PyKind::Tuple && st->size() >= 1)
        dt = st->item(0); // __getstate__: (dtype, layout, requires_grad, memory_format, pin_memory)
    else if (st->kind == PyKind::Dict)
        dt = st->get("dtype");
    if (dt && dt->kind == PyKind::Dtype) return dt->dtype;
    return std::nullopt;
}

/// The general path: the index from the unpickled object graph (any pickle the fast reader gave up on). Malformed
/// parts become errors in the index, so that the rest can still be browsed.
DcpMetadata metadataFromGraph(const PyValue* md, const std::string& metaPath, int protocol)
{
    DcpMetadata out;
    out.protocol = protocol;
    if (!classEndsWith(md, "Metadata"))
        throw Error(ErrorKind::Format, metaPath, "does not hold a DCP Metadata object (found " + pyRepr(md, 80) + ")");
    const PyValue* sdm = field(md, "state_dict_metadata");
    const PyValue* planner = field(md, "planner_data");
    const PyValue* storageData = field(md, "storage_data");
    const PyValue* version = field(md, "version");
    if (!sdm || sdm->kind != PyKind::Dict)
        throw Error(ErrorKind::Format, metaPath, "Metadata has no state_dict_metadata dict");
    if (version && version->kind == PyKind::Str) out.version = std::string(version->text);

    std::unordered_map<std::string, uint32_t> fqnIds;
    if (storageData && storageData->kind == PyKind::Dict) {
        out.hasStorageData = true;
        for (size_t i = 0; i < storageData->size(); ++i) {
            const PyValue* index = storageData->dictKey(i);
            const PyValue* info = storageData->dictValue(i);
            const PyValue* fqn = field(index, "fqn");
            const PyValue* offset = field(index, "offset");
            const PyValue* rel = field(info, "relative_path");
            const PyValue* off = field(info, "offset");
            const PyValue* len = field(info, "length");
            if (!fqn || fqn->kind != PyKind::Str || !rel || rel->kind != PyKind::Str || !off || off->kind != PyKind::Int
                || !len || len->kind != PyKind::Int || off->integer < 0 || len->integer < 0) {
                out.storageErrors.push_back("storage_data entry " + std::to_string(i) + " is malformed: "
                    + pyRepr(index, 80) + " -> " + pyRepr(info, 120));
                continue;
            }
            DcpMetadata::Storage s;
            const std::string name(fqn->text);
            auto [it, added] = fqnIds.emplace(name, static_cast<uint32_t>(out.storageFqns.size()));
            if (added) out.storageFqns.push_back(name);
            s.fqn = it->second;
            s.file = out.files->intern(std::string(rel->text));
            s.offset = static_cast<uint64_t>(off->integer);
            s.length = static_cast<uint64_t>(len->integer);
            const PyValue* transforms = field(info, "transform_descriptors");
            s.hasTransforms = transforms && transforms->isSequence() && transforms->size() > 0;
            std::vector<int64_t> offs;
            s.hasOffset = offset && offset->kind != PyKind::None && intVector(offset, offs);
            if (s.hasOffset) {
                s.ndim = static_cast<uint32_t>(offs.size());
                s.offsetsAt = out.dims.size();
                out.dims.insert(out.dims.end(), offs.begin(), offs.end());
            }
            out.storage.push_back(s);
        }
    }

    out.items.reserve(sdm->size());
    for (size_t i = 0; i < sdm->size(); ++i) {
        const PyValue* keyValue = sdm->dictKey(i);
        const PyValue* smd = sdm->dictValue(i);
        DcpMetadata::Item it;
        if (keyValue->kind != PyKind::Str) {
            it.kind = DcpMetadata::ItemKind::Unknown;
            it.unknownText = "state_dict_metadata key is not a string: " + pyRepr(keyValue, 60);
            out.items.push_back(std::move(it));
            continue;
        }
        it.fqn = std::string(keyValue->text);
        const PyValue* p = planner && planner->kind == PyKind::Dict ? planner->get(it.fqn) : nullptr;
        if (p && p->isSequence() && p->size() > 0) {
            // a path repeating one long key string (shared through the memo) could take gigabytes: bound it first
            uint64_t pathBytes = 0;
            for (const auto* el : p->items())
                pathBytes += sizeof(KeyPathElem) + 2 * (2 * el->text.size() + 1024);
            if (pathBytes > kMaxKeyPathBytes)
                throw Error(ErrorKind::Limit, metaPath,
                    "planner_data path of '" + it.fqn.substr(0, 80) + "' would take more than "
                        + std::to_string(kMaxKeyPathBytes >> 20) + " MiB");
            for (const auto* el : p->items()) {
                if (el->kind == PyKind::Int)
                    it.path.push_back(KeyPathElem::fromIndex(el->integer));
                else
                    it.path.push_back(KeyPathElem::fromKey(pyStr(el)));
            }
        }
        if (classEndsWith(smd, "TensorStorageMetadata")) {
            it.kind = DcpMetadata::ItemKind::Tensor;
            it.dtype = dtypeOfProperties(field(smd, "properties"));
            it.shapeOk = intVector(field(smd, "size"), it.shape);
            const PyValue* chunks = field(smd, "chunks");
            it.firstChunk = out.chunks.size();
            for (const auto* ch : chunks ? chunks->items() : std::vector<PyValue*>()) {
                std::vector<int64_t> offsets, sizes;
                DcpMetadata::Chunk c;
                if (!intVector(field(ch, "offsets"), offsets) || !intVector(field(ch, "sizes"), sizes)
                    || offsets.size() != sizes.size()) {
                    c.ok = false;
                    out.chunkErrors.emplace_back(
                        out.chunks.size(), "chunk without readable offsets/sizes: " + pyRepr(ch, 80));
                } else {
                    c.ndim = static_cast<uint32_t>(offsets.size());
                    c.dimsAt = out.dims.size();
                    out.dims.insert(out.dims.end(), offsets.begin(), offsets.end());
                    out.dims.insert(out.dims.end(), sizes.begin(), sizes.end());
                }
                out.chunks.push_back(c);
            }
            it.chunkCount = out.chunks.size() - it.firstChunk;
        } else if (classEndsWith(smd, "BytesStorageMetadata")) {
            it.kind = DcpMetadata::ItemKind::Bytes;
        } else {
            it.kind = DcpMetadata::ItemKind::Unknown;
            it.value = smd;
            it.unknownText = "unknown storage metadata " + pyRepr(smd, 80);
        }
        out.items.push_back(std::move(it));
    }
    return out;
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
    std::error_code ec;
    if (fs::is_directory(path, ec)) return fs::is_regular_file(fs::path(path) / ".metadata", ec);
    return fs::path(path).filename() == ".metadata" && fs::is_regular_file(path, ec);
}


std::shared_ptr<const Checkpoint> DcpReader::open(const std::string& path, const Progress& progress)
{
    progress(0.0, "reading metadata");
    std::error_code ec;
    fs::path dir = path;
    if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
    const std::string metaPath = (dir / ".metadata").string();

    auto cp = std::make_shared<Checkpoint>();
    cp->format = CheckpointFormat::Dcp;
    cp->path = path;
    cp->arena = std::make_shared<PyArena>();
    cp->files = std::make_shared<CheckpointFiles>(dir.string());
    CheckpointBuilder builder(*cp);

    auto meta = MappedFile::open(metaPath);
    std::optional<DcpMetadata> fast = DcpMetadataReader::read(*meta, progress);
    DcpMetadata md;
    if (fast) {
        md = std::move(*fast);
        cp->pickleProtocol = md.protocol;
    } else {
        cp->arena->keepAlive(meta);
        PickleOptions opt;
        opt.sourceName = metaPath;
        PickleResult r = unpickle(meta->data(), meta->size(), *cp->arena, opt);
        cp->pickleProtocol = r.protocol;
        cp->root = r.root;
        builder.addPickleWarnings(r.warnings);
        md = metadataFromGraph(r.root, metaPath, r.protocol);
    }
    cp->formatDetail = "DCP";
    if (!md.version.empty()) cp->formatDetail += " version " + md.version;
    for (const auto& e : md.storageErrors)
        builder.error("bad-storage-info", e);
    if (!md.hasStorageData)
        builder.error("no-storage-data", "Metadata has no storage_data: chunk locations are unknown");

    // storage entries sorted by (fqn, has offsets, offsets), first written first among equals: a chunk finds its
    // entry by binary search, with no per-chunk key string
    const auto& dims = md.dims;
    auto offsetsOf = [&](const DcpMetadata::Storage& s) {
        return std::make_pair(dims.data() + s.offsetsAt, dims.data() + s.offsetsAt + s.ndim);
    };
    auto storageLess = [&](const DcpMetadata::Storage& a, const DcpMetadata::Storage& b) {
        if (a.fqn != b.fqn) return a.fqn < b.fqn;
        if (a.hasOffset != b.hasOffset) return a.hasOffset < b.hasOffset;
        const auto [a0, a1] = offsetsOf(a);
        const auto [b0, b1] = offsetsOf(b);
        return std::lexicographical_compare(a0, a1, b0, b1);
    };
    std::stable_sort(md.storage.begin(), md.storage.end(), storageLess);
    std::unordered_map<std::string_view, uint32_t> fqnIds;
    fqnIds.reserve(md.storageFqns.size());
    for (size_t i = 0; i < md.storageFqns.size(); ++i)
        fqnIds.emplace(md.storageFqns[i], static_cast<uint32_t>(i));
    auto findStorage = [&](const std::string& fqn, const int64_t* offsets, uint32_t ndim) -> const DcpMetadata::Storage* {
        auto id = fqnIds.find(fqn);
        if (id == fqnIds.end()) return nullptr;
        DcpMetadata::Storage probe;
        probe.fqn = id->second;
        probe.hasOffset = offsets != nullptr;
        std::vector<int64_t> tmp;
        if (offsets) {
            // the probe's offsets live at the end of dims for the comparison
            probe.ndim = ndim;
            probe.offsetsAt = dims.size();
            md.dims.insert(md.dims.end(), offsets, offsets + ndim);
        }
        auto it = std::lower_bound(md.storage.begin(), md.storage.end(), probe, storageLess);
        const bool found = it != md.storage.end() && !storageLess(probe, *it);
        if (offsets) md.dims.resize(md.dims.size() - ndim);
        return found ? &*it : nullptr;
    };

    // data files: existence and size, checked once each
    const size_t fileCount = md.files->size();
    std::vector<int64_t> fileSizes(fileCount, -2); // -2 unchecked, -1 missing
    std::vector<int> fileRanks(fileCount);
    for (size_t f = 0; f < fileCount; ++f)
        fileRanks[f] = rankFromFileName(md.files->name(static_cast<uint32_t>(f)));
    auto fileSize = [&](uint32_t file) {
        int64_t& size = fileSizes[file];
        if (size != -2) return size;
        const std::string& rel = md.files->name(file);
        struct stat st
        { };
        const std::string abs = cp->files->absolute(rel);
        size = ::stat(abs.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : -1;
        if (size < 0) builder.error("missing-file", "data file '" + rel + "' is missing from " + dir.string());
        if (size >= 0) cp->files->expectSize(rel, static_cast<uint64_t>(size));
        return size;
    };
    auto checkRange = [&](const DcpMetadata::Storage& s, const std::string& key) {
        const int64_t size = fileSize(s.file);
        if (size < 0) return false;
        if (s.offset > static_cast<uint64_t>(size) || s.length > static_cast<uint64_t>(size) - s.offset) {
            builder.error("chunk-out-of-range",
                "item [" + std::to_string(s.offset) + ", +" + std::to_string(s.length) + ") lies past the end of '"
                    + md.files->name(s.file) + "' (" + std::to_string(size) + " bytes)",
                key);
            return false;
        }
        if (s.hasTransforms) {
            builder.error("unsupported-transform",
                "item is stored through DCP stream transforms (compression/extensions), which are not supported", key);
            return false;
        }
        return true;
    };

    size_t nextChunkError = 0;
    const size_t total = md.items.size();
    for (size_t i = 0; i < total; ++i) {
        if (i % 64 == 0) {
            progress.checkCancelled();
            progress(0.9 + 0.1 * static_cast<double>(i) / static_cast<double>(total), "reading metadata");
        }
        DcpMetadata::Item& item = md.items[i];
        if (item.kind == DcpMetadata::ItemKind::Unknown && item.fqn.empty()) {
            builder.error("bad-metadata", item.unknownText);
            continue;
        }
        const std::string& fqn = item.fqn;
        KeyPath path = item.path.empty() ? KeyPath {KeyPathElem::fromKey(fqn)} : std::move(item.path);

        if (item.kind == DcpMetadata::ItemKind::Tensor) {
            TensorEntry t;
            if (!item.dtype) builder.error("bad-metadata", "tensor has no readable dtype in its properties", fqn);
            t.dtype = item.dtype.value_or(DType::Unknown);
            if (!item.shapeOk) builder.error("bad-metadata", "tensor has no readable size", fqn);
            t.shape = std::move(item.shape);
            t.chunks.useFileTable(md.files);
            t.chunks.reserve(item.chunkCount, 0);
            for (uint64_t k = item.firstChunk; k < item.firstChunk + item.chunkCount; ++k) {
                const DcpMetadata::Chunk& c = md.chunks[k];
                if (!c.ok) {
                    while (nextChunkError < md.chunkErrors.size() && md.chunkErrors[nextChunkError].first < k)
                        ++nextChunkError;
                    if (nextChunkError < md.chunkErrors.size() && md.chunkErrors[nextChunkError].first == k)
                        builder.error("bad-metadata", md.chunkErrors[nextChunkError].second, fqn);
                    continue;
                }
                const int64_t* offsets = md.dims.data() + c.dimsAt;
                const int64_t* sizes = offsets + c.ndim;
                const DcpMetadata::Storage* s = findStorage(fqn, offsets, c.ndim);
                if (!s) {
                    builder.error("missing-storage-info",
                        "no storage_data entry for the chunk at offsets " + shapeText({offsets, offsets + c.ndim}),
                        fqn);
                    t.chunks.appendBox(-1, offsets, sizes, c.ndim);
                    continue;
                }
                checkRange(*s, fqn);
                t.chunks.appendBlob(fileRanks[s->file], s->file, s->offset, s->length, offsets, sizes, c.ndim);
            }
            builder.addTensor(std::move(path), std::move(t));
        } else if (item.kind == DcpMetadata::ItemKind::Bytes) {
            const DcpMetadata::Storage* found = findStorage(fqn, nullptr, 0);
            std::string err;
            if (!found) {
                err = "no storage_data entry for this value";
                builder.error("missing-storage-info", err, fqn);
            } else if (checkRange(*found, fqn)) {
                const DcpMetadata::Storage& s = *found;
                const std::string& rel = md.files->name(s.file);
                const std::string where = cp->files->absolute(rel) + "[" + std::to_string(s.offset) + "+"
                    + std::to_string(s.length) + "]";
                try {
                    auto file = cp->files->open(rel);
                    TorchSaveArchive ar = TorchSaveReader::readArchive(file, s.offset, s.length, *cp->arena, where);
                    builder.addPickleWarnings(ar.warnings);
                    // values of old (<= 2.3) checkpoints may still be nested (param_groups as one list): flatten them
                    auto leaves = flattenStateDict(ar.root);
                    if (leaves.empty()) leaves.push_back({{}, ar.root}); // an empty mapping stays one value
                    for (auto& leaf : leaves) {
                        KeyPath full = path;
                        full.insert(full.end(), leaf.path.begin(), leaf.path.end());
                        builder.addLeaf(std::move(full), leaf.value, ar, rel, where);
                    }
                    continue;
                } catch (const Error& e) {
                    err = e.what();
                    builder.error("unreadable-value", err, fqn);
                }
            } else {
                // say which file and why (checkRange reported it for check; gather and the GUI show this text)
                const DcpMetadata::Storage& s = *found;
                const std::string abs = cp->files->absolute(md.files->name(s.file));
                const int64_t size = fileSize(s.file);
                err = size < 0
                    ? "its data file '" + abs + "' is missing (written by rank " + std::to_string(fileRanks[s.file]) + ")"
                    : s.hasTransforms
                    ? "it is stored in '" + abs + "' through DCP stream transforms, which are not supported"
                    : "its bytes [" + std::to_string(s.offset) + ", +" + std::to_string(s.length)
                        + ") lie past the end of '" + abs + "' (" + std::to_string(size) + " bytes)";
            }
            builder.addValue(std::move(path), cp->arena->makeNone());
            cp->entries.back().error = err;
        } else {
            builder.warn("unknown-metadata", item.unknownText, fqn);
            builder.addValue(std::move(path), item.value ? item.value : cp->arena->makeNone());
        }
    }
    builder.finish();
    progress(1.0, "reading metadata");
    return cp;
}

} // namespace optscope
