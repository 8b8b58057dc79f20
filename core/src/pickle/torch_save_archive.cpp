// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/pickle/torch_save_archive.h"
#include "optscope/base/error.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/zip_archive.h"

#include <cstring>
#include <filesystem>

namespace optscope {

namespace {

constexpr uint8_t kLegacyMagicLe[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

bool isLegacyMagic(const PyValue* v)
{
    if (!v || v->kind != PyKind::BigInt) return false;
    // 0x1950a86a20f9469cfc6c as little-endian two's complement (10 bytes, positive)
    std::string_view t = v->text;
    while (t.size() > sizeof kLegacyMagicLe && t.back() == 0)
        t.remove_suffix(1);
    return t.size() == sizeof kLegacyMagicLe && std::memcmp(t.data(), kLegacyMagicLe, sizeof kLegacyMagicLe) == 0;
}

/// ('storage', storage_type, key, location, numel[, view_metadata]) -> Storage value
PyValue* makeStorageFromPid(PyArena& arena, PyValue* pid, uint64_t offset, const std::string& where,
    std::unordered_map<std::string, PyValue*>& seen)
{
    if (!pid->isSequence() || pid->size() < 5 || pid->item(0)->kind != PyKind::Str || pid->item(0)->text != "storage")
        throw Error(ErrorKind::Format, where, "persistent id is not a storage tuple: " + pyRepr(pid, 80), offset);
    const PyValue* cls = pid->item(1);
    const PyValue* key = pid->item(2);
    const PyValue* location = pid->item(3);
    const PyValue* numel = pid->item(4);
    if (key->kind != PyKind::Str || numel->kind != PyKind::Int || numel->integer < 0)
        throw Error(ErrorKind::Format, where, "malformed storage persistent id " + pyRepr(pid, 80), offset);
    std::optional<DType> dtype;
    bool untyped = false;
    if (cls->kind == PyKind::Global) {
        dtype = dtypeFromStorageClass(cls->global->name);
        untyped = cls->global->name == "UntypedStorage";
    } else if (cls->kind == PyKind::Dtype) {
        dtype = cls->dtype; // some writers pass the dtype itself
    }
    if (!dtype) throw Error(ErrorKind::Format, where, "unknown storage class in " + pyRepr(pid, 80), offset);
    if (pid->size() >= 6 && pid->item(5)->kind != PyKind::None)
        throw Error(ErrorKind::Unsupported, where, "legacy storage views (view_metadata) are not supported", offset);
    const std::string k(key->text);
    if (auto it = seen.find(k); it != seen.end()) {
        // the same storage referenced again (views, shared tensors): one Storage value
        if (it->second->storage->dtype != *dtype && !untyped && !it->second->storage->untyped)
            throw Error(ErrorKind::Format, where, "storage '" + k + "' referenced with two element types", offset);
        return it->second;
    }
    PyValue* v = arena.make(PyKind::Storage);
    v->storage = arena.makeStorageInfo();
    v->storage->key = key->text;
    v->storage->dtype = *dtype;
    v->storage->numel = numel->integer;
    v->storage->location = location->kind == PyKind::Str ? location->text : std::string_view("cpu");
    v->storage->untyped = untyped;
    seen.emplace(k, v);
    return v;
}

/// checked multiplication for byte counts from length fields
uint64_t mulChecked(uint64_t a, uint64_t b, const std::string& where)
{
    if (a != 0 && b > UINT64_MAX / a) throw Error(ErrorKind::Format, where, "size overflow in a length field");
    return a * b;
}

TorchSaveArchive readZip(const std::shared_ptr<const ByteSource>& file, uint64_t offset, uint64_t length,
    PyArena& arena, const std::string& where, const PickleLimits& limits, bool storagesLater)
{
    TorchSaveArchive ar;
    // a large remote archive (or one whose storages the caller leaves): its end records, central directory and local
    // headers are fetched, then its records other than tensor storages (the pickle, byteorder, version); a storage's
    // bytes when a reader asks for them
    constexpr uint64_t kSkipStorages = 256u << 10; // below: fetched whole even for its headers (a round trip less)
    const bool targeted
        = file->isRemote() && (length > kZipFetchWholeBytes || (storagesLater && length > kSkipStorages));
    ZipArchive zip = targeted ? ZipArchive::parseInPlace(*file, offset, length, where)
                              : ZipArchive::parse(file->bytes(offset, length), length, where);
    const uint8_t* base = zip.base();
    if (targeted) {
        const std::string storages = zip.prefix() + "/data/";
        for (const ZipEntry& e : zip.entries())
            if (std::string_view(e.name).rfind(storages, 0) != 0) file->bytes(offset + e.dataOffset, e.size);
    }
    // parsing touched every local header, i.e. nearly every page of a file of many small storages: let them go (they
    // stay in the page cache; the pickle and the storages read later fault their own pages back in)
    file->release(offset, length);
    ar.prefix = zip.prefix();
    if (zip.findRecord("constants.pkl") && !zip.findRecord("data.pkl"))
        throw Error(ErrorKind::Unsupported, where, "a TorchScript archive (torch.jit.save), not a torch.save file");
    const ZipEntry* pkl = zip.findRecord("data.pkl");
    if (!pkl) throw Error(ErrorKind::Format, where, "zip archive has no '" + ar.prefix + "/data.pkl' record");
    if (const ZipEntry* bo = zip.findRecord("byteorder")) {
        const std::string_view order(reinterpret_cast<const char*>(base + bo->dataOffset), bo->size);
        if (order == "big")
            ar.bigEndian = true;
        else if (order != "little")
            throw Error(ErrorKind::Format, where, "byteorder record says '" + std::string(order.substr(0, 16)) + "'",
                offset + bo->dataOffset);
    }

    std::unordered_map<std::string, PyValue*> seen;
    PickleOptions opt;
    opt.sourceName = where + " (" + ar.prefix + "/data.pkl)";
    opt.baseOffset = offset + pkl->dataOffset;
    opt.limits = limits;
    opt.persistentLoad = [&](PyArena& a, PyValue* pid, uint64_t off) -> PyValue* {
        PyValue* s = makeStorageFromPid(a, pid, off, where, seen);
        if (s->storage->located) return s;
        const std::string key(s->storage->key);
        const ZipEntry* rec = zip.findRecord("data/" + key);
        if (!rec)
            throw Error(ErrorKind::Format, where, "missing storage record '" + ar.prefix + "/data/" + key + "'", off);
        const uint64_t need = mulChecked(
            static_cast<uint64_t>(s->storage->numel), s->storage->untyped ? 1 : dtypeSize(s->storage->dtype), where);
        if (rec->size < need)
            throw Error(ErrorKind::Format, where,
                "storage record '" + ar.prefix + "/data/" + key + "' holds " + std::to_string(rec->size)
                    + " bytes, but the pickle declares " + std::to_string(need),
                offset + rec->dataOffset);
        s->storage->recordOffset = offset + rec->dataOffset;
        s->storage->recordLength = rec->size;
        s->storage->located = true;
        return s;
    };
    PickleResult r = unpickle(base + pkl->dataOffset, pkl->size, arena, opt);
    // the pickle and the central directory (every storage was looked up in it) were read again: the graph's strings
    // point into the pickle, but an optimizer's state is keyed by integers and a few memoised names, so the pages
    // need not stay resident (a string read later faults its page back in from the page cache)
    if (length >= (1u << 20)) file->release(offset, length);
    ar.root = r.root;
    ar.pickleProtocol = r.protocol;
    ar.warnings = std::move(r.warnings);
    return ar;
}

TorchSaveArchive readLegacy(const std::shared_ptr<const ByteSource>& file, uint64_t offset, uint64_t length,
    PyArena& arena, const std::string& where, const PickleLimits& limits)
{
    TorchSaveArchive ar;
    ar.legacy = true;
    const uint8_t* base = file->bytes(offset, length); // remote: the whole region (the zip is parsed whole)
    uint64_t pos = 0;
    auto next = [&](const PersistentLoader& loader) {
        PickleOptions opt;
        opt.sourceName = where;
        opt.baseOffset = offset + pos;
        opt.limits = limits;
        opt.persistentLoad = loader;
        PickleResult r = unpickle(base + pos, length - pos, arena, opt);
        pos += r.bytesConsumed;
        for (auto& w : r.warnings)
            ar.warnings.push_back(std::move(w));
        ar.pickleProtocol = std::max(ar.pickleProtocol, r.protocol);
        return r.root;
    };
    if (!isLegacyMagic(next({})))
        throw Error(
            ErrorKind::Format, where, "not a torch.save file (no zip header and no legacy magic number)", offset);
    const PyValue* version = next({});
    if (!version || version->kind != PyKind::Int || version->integer != 1001)
        throw Error(ErrorKind::Unsupported, where,
            "legacy torch.save protocol version " + pyRepr(version, 40) + " (only 1001 is known)", offset);
    const PyValue* sysInfo = next({});
    if (const PyValue* le = sysInfo ? sysInfo->get("little_endian") : nullptr; le && le->kind == PyKind::Bool)
        ar.bigEndian = !le->boolean;

    std::unordered_map<std::string, PyValue*> seen;
    ar.root = next([&](PyArena& a, PyValue* pid, uint64_t off) -> PyValue* {
        if (pid->isSequence() && pid->size() >= 1 && pid->item(0)->kind == PyKind::Str
            && pid->item(0)->text == "module")
            return a.makeStr("<module source>", false); // ('module', cls, source_file, source): pickled nn.Module class
        return makeStorageFromPid(a, pid, off, where, seen);
    });
    const PyValue* keys = next({});
    if (!keys || !keys->isSequence())
        throw Error(ErrorKind::Format, where, "legacy storage key list missing", offset + pos);
    for (const auto* k : keys->items()) {
        if (k->kind != PyKind::Str)
            throw Error(ErrorKind::Format, where, "legacy storage key is not a string", offset + pos);
        const std::string key(k->text);
        auto it = seen.find(key);
        if (length - pos < 8)
            throw Error(ErrorKind::Truncated, where, "legacy storage '" + key + "' header past the end", offset + pos);
        uint64_t numel = 0;
        std::memcpy(&numel, base + pos, 8); // written little-endian by the hosts that matter
        pos += 8;
        const size_t elem = it != seen.end() ? dtypeSize(it->second->storage->dtype) : 1;
        const uint64_t nbytes = mulChecked(numel, elem, where);
        if (nbytes > length - pos)
            throw Error(ErrorKind::Truncated, where,
                "legacy storage '" + key + "' of " + std::to_string(nbytes) + " bytes runs past the end", offset + pos);
        if (it != seen.end() && !it->second->storage->located) {
            it->second->storage->recordOffset = offset + pos;
            it->second->storage->recordLength = nbytes;
            it->second->storage->located = true;
        }
        pos += nbytes;
    }
    for (const auto& [key, v] : seen)
        if (!v->storage->located)
            throw Error(ErrorKind::Format, where, "legacy storage '" + key + "' is referenced but not stored");
    return ar;
}

bool isTar(const uint8_t* data, uint64_t size)
{
    return size >= 262 && std::memcmp(data + 257, "ustar", 5) == 0;
}

} // namespace

bool looksLikeTorchSave(const uint8_t* data, uint64_t size)
{
    if (looksLikeZip(data, size)) return true;
    // legacy: PROTO 2-5 (torch.save's pickle_protocol), from 4 on a FRAME (0x95 and its 8-byte length), LONG1 10
    // <magic>
    if (size < 13 || data[0] != 0x80 || data[1] < 2 || data[1] > 5) return false;
    const uint64_t at = data[1] >= 4 && data[2] == 0x95 ? 11 : 2;
    return size >= at + 11 && data[at] == 0x8a && data[at + 1] == 10
        && std::memcmp(data + at + 2, kLegacyMagicLe, 9) == 0;
}

TorchSaveArchive readTorchSaveArchive(const std::shared_ptr<const ByteSource>& file, uint64_t offset, uint64_t length,
    PyArena& arena, const std::string& displayName, const PickleLimits& limits, bool storagesLater)
{
    if (offset > file->size() || length > file->size() - offset)
        throw Error(ErrorKind::Truncated, displayName,
            "range [" + std::to_string(offset) + ", +" + std::to_string(length) + ") lies past the end of the "
                + std::to_string(file->size()) + "-byte file");
    arena.keepAlive(file);
    const uint8_t* base = file->bytes(offset, std::min<uint64_t>(length, 4)); // the magic
    if (looksLikeZip(base, length)) return readZip(file, offset, length, arena, displayName, limits, storagesLater);
    base = file->bytes(offset, length); // remote: a legacy file is read whole
    if (length >= 2 && base[0] == 0x80) return readLegacy(file, offset, length, arena, displayName, limits);
    if (isTar(base, length))
        throw Error(
            ErrorKind::Unsupported, displayName, "the tar-based torch.save format of PyTorch <= 0.3 is not supported");
    throw Error(
        ErrorKind::Format, displayName, "not a torch.save file (neither a zip archive nor a legacy pickle)", offset);
}

void prefetchTorchSaveArchive(const ByteSource& file, uint64_t offset, uint64_t length)
{
    if (!file.isRemote() || offset > file.size() || length > file.size() - offset) return;
    for (const auto& [at, n] : zipFirstReads(length))
        file.prefetch(offset + at, n);
}

const PyStorageInfo& torchSaveStorageOf(const PyTensorInfo& t, const std::string& where)
{
    if (!t.storage || t.storage->kind != PyKind::Storage)
        throw Error(ErrorKind::Format, where, "tensor has no storage");
    const PyStorageInfo& s = *t.storage->storage;
    if (!s.located)
        throw Error(ErrorKind::Format, where,
            "tensor refers to storage '" + std::string(s.key) + "' that is not in the archive");
    return s;
}

void checkTorchSaveTensorExtent(const PyTensorInfo& t, uint64_t storageBytes, const std::string& where)
{
    const uint64_t elem = dtypeSize(t.dtype);
    bool valid = t.storageOffset >= 0 && t.strides.size() == t.sizes.size();
    bool empty = false;
    for (size_t d = 0; valid && d < t.sizes.size(); ++d) {
        valid = t.sizes[d] >= 0 && t.strides[d] >= 0;
        empty = empty || t.sizes[d] == 0;
    }
    if (valid && empty) return;
    // the last element the view reaches, offset + sum((size - 1) * stride), in checked arithmetic: a hostile size or
    // stride must not wrap around 2^64 into a small extent that looks as if it fits
    uint64_t last = valid ? static_cast<uint64_t>(t.storageOffset) : 0;
    for (size_t d = 0; valid && d < t.sizes.size(); ++d) {
        const auto span = static_cast<uint64_t>(t.sizes[d] - 1);
        const auto stride = static_cast<uint64_t>(t.strides[d]);
        if (stride != 0 && span > (UINT64_MAX - last) / stride)
            valid = false;
        else
            last += span * stride;
    }
    if (!valid || last >= UINT64_MAX / elem || (last + 1) * elem > storageBytes)
        throw Error(ErrorKind::Format, where,
            "tensor view (offset " + std::to_string(t.storageOffset) + ", " + std::to_string(t.sizes.size())
                + " dims) reaches " + (valid ? "element " + std::to_string(last) : std::string("beyond 2^64 elements"))
                + " of a storage of " + std::to_string(storageBytes / elem) + " elements");
}

} // namespace optscope
