// SPDX-License-Identifier: GPL-3.0-or-later
#include "dcp_reader.h"
#include "checkpoint_builder.h"
#include "mapped_file.h"
#include "optscope/error.h"
#include "pickle_machine.h"
#include "state_flattener.h"
#include "torch_save_reader.h"

#include <filesystem>
#include <map>
#include <sys/stat.h>
#include <unordered_map>

namespace fs = std::filesystem;

namespace optscope {

namespace {

struct StorageInfo
{
    std::string relativePath;
    uint64_t offset = 0;
    uint64_t length = 0;
    bool hasTransforms = false;
};

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

std::string storageKey(std::string_view fqn, const std::vector<int64_t>* offsets)
{
    std::string k(fqn);
    k += '\0';
    if (!offsets) {
        k += '-';
        return k;
    }
    for (auto o : *offsets) {
        k += std::to_string(o);
        k += ',';
    }
    return k;
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
    cp->arena->keepAlive(meta);
    PickleOptions opt;
    opt.sourceName = metaPath;
    PickleResult r = unpickle(meta->data(), meta->size(), *cp->arena, opt);
    cp->pickleProtocol = r.protocol;
    cp->root = r.root;
    builder.addPickleWarnings(r.warnings);

    const PyValue* md = r.root;
    if (!classEndsWith(md, "Metadata"))
        throw Error(ErrorKind::Format, metaPath, "does not hold a DCP Metadata object (found " + pyRepr(md, 80) + ")");
    const PyValue* sdm = field(md, "state_dict_metadata");
    const PyValue* planner = field(md, "planner_data");
    const PyValue* storageData = field(md, "storage_data");
    const PyValue* version = field(md, "version");
    if (!sdm || sdm->kind != PyKind::Dict)
        throw Error(ErrorKind::Format, metaPath, "Metadata has no state_dict_metadata dict");
    cp->formatDetail = "DCP";
    if (version && version->kind == PyKind::Str) cp->formatDetail += " version " + std::string(version->text);

    // (fqn, offsets) -> where the item is
    std::unordered_map<std::string, StorageInfo> storage;
    if (storageData && storageData->kind == PyKind::Dict) {
        storage.reserve(storageData->size());
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
                builder.error("bad-storage-info",
                    "storage_data entry " + std::to_string(i) + " is malformed: " + pyRepr(index, 80) + " -> "
                        + pyRepr(info, 120));
                continue;
            }
            StorageInfo s;
            s.relativePath = std::string(rel->text);
            s.offset = static_cast<uint64_t>(off->integer);
            s.length = static_cast<uint64_t>(len->integer);
            const PyValue* transforms = field(info, "transform_descriptors");
            s.hasTransforms = transforms && transforms->isSequence() && transforms->size() > 0;
            std::vector<int64_t> offs;
            const bool hasOffset = offset && offset->kind != PyKind::None && intVector(offset, offs);
            storage.emplace(storageKey(fqn->text, hasOffset ? &offs : nullptr), std::move(s));
        }
    } else {
        builder.error("no-storage-data", "Metadata has no storage_data: chunk locations are unknown");
    }

    // data files: existence and size, checked once each
    std::map<std::string, int64_t> fileSizes; // -1 missing
    auto fileSize = [&](const std::string& rel) {
        auto it = fileSizes.find(rel);
        if (it != fileSizes.end()) return it->second;
        struct stat st
        { };
        const std::string abs = cp->files->absolute(rel);
        int64_t size = ::stat(abs.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : -1;
        if (size < 0) builder.error("missing-file", "data file '" + rel + "' is missing from " + dir.string());
        if (size >= 0) cp->files->expectSize(rel, static_cast<uint64_t>(size));
        fileSizes.emplace(rel, size);
        return size;
    };
    auto checkRange = [&](const StorageInfo& s, const std::string& key) {
        const int64_t size = fileSize(s.relativePath);
        if (size < 0) return false;
        if (s.offset > static_cast<uint64_t>(size) || s.length > static_cast<uint64_t>(size) - s.offset) {
            builder.error("chunk-out-of-range",
                "item [" + std::to_string(s.offset) + ", +" + std::to_string(s.length) + ") lies past the end of '"
                    + s.relativePath + "' (" + std::to_string(size) + " bytes)",
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

    const size_t total = sdm->size();
    for (size_t i = 0; i < total; ++i) {
        if (i % 256 == 0) {
            progress.checkCancelled();
            progress(static_cast<double>(i) / static_cast<double>(total), "reading metadata");
        }
        const PyValue* keyValue = sdm->dictKey(i);
        const PyValue* smd = sdm->dictValue(i);
        if (keyValue->kind != PyKind::Str) {
            builder.error("bad-metadata", "state_dict_metadata key is not a string: " + pyRepr(keyValue, 60));
            continue;
        }
        const std::string fqn(keyValue->text);
        KeyPath path;
        const PyValue* p = planner && planner->kind == PyKind::Dict ? planner->get(fqn) : nullptr;
        if (p && p->isSequence() && p->size() > 0) {
            // a path repeating one long key string (shared through the memo) could take gigabytes: bound it first
            uint64_t pathBytes = 0;
            for (const auto* el : p->items())
                pathBytes += sizeof(KeyPathElem) + 2 * (2 * el->text.size() + 1024);
            if (pathBytes > kMaxKeyPathBytes)
                throw Error(ErrorKind::Limit, metaPath,
                    "planner_data path of '" + fqn.substr(0, 80) + "' would take more than "
                        + std::to_string(kMaxKeyPathBytes >> 20) + " MiB");
            for (const auto* el : p->items()) {
                if (el->kind == PyKind::Int)
                    path.push_back(KeyPathElem::fromIndex(el->integer));
                else
                    path.push_back(KeyPathElem::fromKey(pyStr(el)));
            }
        } else {
            path.push_back(KeyPathElem::fromKey(fqn));
        }

        if (classEndsWith(smd, "TensorStorageMetadata")) {
            TensorEntry t;
            const auto dtype = dtypeOfProperties(field(smd, "properties"));
            if (!dtype) builder.error("bad-metadata", "tensor has no readable dtype in its properties", fqn);
            t.dtype = dtype.value_or(DType::Unknown);
            if (!intVector(field(smd, "size"), t.shape))
                builder.error("bad-metadata", "tensor has no readable size", fqn);
            const PyValue* chunks = field(smd, "chunks");
            for (const auto* ch : chunks ? chunks->items() : std::vector<PyValue*>()) {
                TensorChunk c;
                if (!intVector(field(ch, "offsets"), c.offsets) || !intVector(field(ch, "sizes"), c.sizes)
                    || c.offsets.size() != c.sizes.size()) {
                    builder.error("bad-metadata", "chunk without readable offsets/sizes: " + pyRepr(ch, 80), fqn);
                    continue;
                }
                auto it = storage.find(storageKey(fqn, &c.offsets));
                if (it == storage.end()) {
                    builder.error("missing-storage-info",
                        "no storage_data entry for the chunk at offsets " + pyRepr(field(ch, "offsets"), 60), fqn);
                } else {
                    c.source.kind = ChunkSource::Kind::TorchSaveBlob;
                    c.source.file = it->second.relativePath;
                    c.source.offset = it->second.offset;
                    c.source.length = it->second.length;
                    c.rank = rankFromFileName(it->second.relativePath);
                    checkRange(it->second, fqn);
                }
                t.chunks.push_back(std::move(c));
            }
            builder.addTensor(std::move(path), std::move(t));
        } else if (classEndsWith(smd, "BytesStorageMetadata")) {
            auto it = storage.find(storageKey(fqn, nullptr));
            std::string err;
            if (it == storage.end()) {
                err = "no storage_data entry for this value";
                builder.error("missing-storage-info", err, fqn);
            } else if (checkRange(it->second, fqn)) {
                const StorageInfo& s = it->second;
                const std::string where = cp->files->absolute(s.relativePath) + "[" + std::to_string(s.offset) + "+"
                    + std::to_string(s.length) + "]";
                try {
                    auto file = cp->files->open(s.relativePath);
                    TorchSaveArchive ar = TorchSaveReader::readArchive(file, s.offset, s.length, *cp->arena, where);
                    builder.addPickleWarnings(ar.warnings);
                    // values of old (<= 2.3) checkpoints may still be nested (param_groups as one list): flatten them
                    auto leaves = flattenStateDict(ar.root);
                    if (leaves.empty()) leaves.push_back({{}, ar.root}); // an empty mapping stays one value
                    for (auto& leaf : leaves) {
                        KeyPath full = path;
                        full.insert(full.end(), leaf.path.begin(), leaf.path.end());
                        builder.addLeaf(std::move(full), leaf.value, ar, s.relativePath, where);
                    }
                    continue;
                } catch (const Error& e) {
                    err = e.what();
                    builder.error("unreadable-value", err, fqn);
                }
            } else {
                // say which file and why (checkRange reported it for check; gather and the GUI show this text)
                const StorageInfo& s = it->second;
                const int64_t size = fileSize(s.relativePath);
                err = size < 0 ? "its data file '" + cp->files->absolute(s.relativePath)
                        + "' is missing (written by rank " + std::to_string(rankFromFileName(s.relativePath)) + ")"
                    : s.hasTransforms ? "it is stored in '" + cp->files->absolute(s.relativePath)
                        + "' through DCP stream transforms, which are not supported"
                                      : "its bytes [" + std::to_string(s.offset) + ", +" + std::to_string(s.length)
                        + ") lie past the end of '" + cp->files->absolute(s.relativePath) + "' (" + std::to_string(size)
                        + " bytes)";
            }
            builder.addValue(std::move(path), cp->arena->makeNone());
            cp->entries.back().error = err;
        } else {
            builder.warn("unknown-metadata", "unknown storage metadata " + pyRepr(smd, 80), fqn);
            builder.addValue(std::move(path), smd);
        }
    }
    builder.finish();
    progress(1.0, "reading metadata");
    return cp;
}

} // namespace optscope
