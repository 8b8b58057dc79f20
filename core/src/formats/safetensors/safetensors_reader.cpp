// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/safetensors/safetensors_reader.h"
#include "optscope/base/error.h"
#include "optscope/base/look_ahead.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/weight_index.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_set>

namespace fs = std::filesystem;

namespace optscope {

namespace {

using json = nlohmann::json;

std::optional<DType> dtypeFromSafetensors(const std::string& t)
{
    static const std::map<std::string, DType> k = {{"BOOL", DType::Bool}, {"U8", DType::UInt8}, {"I8", DType::Int8},
        {"U16", DType::UInt16}, {"I16", DType::Int16}, {"U32", DType::UInt32}, {"I32", DType::Int32},
        {"U64", DType::UInt64}, {"I64", DType::Int64}, {"F16", DType::Float16}, {"BF16", DType::BFloat16},
        {"F32", DType::Float32}, {"F64", DType::Float64}, {"F8_E4M3", DType::Float8_e4m3fn},
        {"F8_E5M2", DType::Float8_e5m2}, {"F8_E8M0", DType::Float8_e8m0fnu}, {"C64", DType::Complex64}};
    auto it = k.find(t);
    if (it == k.end()) return std::nullopt;
    return it->second;
}

uint64_t readLe64(const uint8_t* p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = (v << 8) | p[i];
    return v;
}

/// a JSON number that is a non-negative integer
bool asUnsigned(const json& v, uint64_t& out)
{
    if (v.is_number_unsigned()) {
        out = v.get<uint64_t>();
        return true;
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) {
        out = static_cast<uint64_t>(v.get<int64_t>());
        return true;
    }
    return false;
}

std::string quote(const std::string& s)
{
    return "'" + (s.size() > 200 ? s.substr(0, 200) + "..." : s) + "'";
}

std::string describeMetadata(const SafetensorsHeader& h)
{
    std::string t;
    for (const auto& [k, v] : h.metadata)
        t += (t.empty() ? "" : ", ") + k + ": " + (v.size() > 40 ? v.substr(0, 40) + "..." : v);
    return t;
}

struct AddedFile
{
    bool ok = false;
    std::set<std::string> names;
    SafetensorsHeader header;
};

/// The first name that a JSON object's top level holds twice, or "" (the text is valid JSON: parsed before)
std::string firstDuplicateTopLevelKey(const char* text, size_t length)
{
    struct KeyCounter : json::json_sax_t
    {
        int depth = 0;
        std::unordered_set<std::string> seen;
        std::string duplicate;
        bool null() override { return true; }
        bool boolean(bool) override { return true; }
        bool number_integer(json::number_integer_t) override { return true; }
        bool number_unsigned(json::number_unsigned_t) override { return true; }
        bool number_float(json::number_float_t, const std::string&) override { return true; }
        bool string(std::string&) override { return true; }
        bool binary(json::binary_t&) override { return true; }
        bool start_object(std::size_t) override { return ++depth, true; }
        bool end_object() override { return --depth, true; }
        bool start_array(std::size_t) override { return ++depth, true; }
        bool end_array() override { return --depth, true; }
        bool key(std::string& k) override
        {
            if (depth == 1 && !seen.insert(k).second) duplicate = k;
            return duplicate.empty(); // stop at the first
        }
        bool parse_error(std::size_t, const std::string&, const json::exception&) override { return false; }
    } counter;
    json::sax_parse(text, text + length, &counter);
    return counter.duplicate;
}

/// the bytes the header of @p file spans (its length field and the JSON): one ranged read when the file is remote
const uint8_t* headerBytes(const ByteSource& file)
{
    if (file.size() < 8) return file.all();
    const uint8_t* p = file.bytes(0, 8);
    uint64_t n = 0;
    for (int b = 0; b < 8; ++b)
        n |= static_cast<uint64_t>(p[b]) << (8 * b);
    if (n > SafetensorsReader::kMaxHeaderLength) return p; // refused by parseHeader before it reads on
    return file.bytes(0, n > file.size() - 8 ? file.size() : 8 + n);
}

/// Adds the tensors of one safetensors file as entries; @p only (when not null) lists the names the index gives this
/// file: others are reported. A file that is missing or unreadable throws (the caller decides).
AddedFile addFile(
    Checkpoint& cp, CheckpointBuilder& builder, const std::string& rel, const KeyPath& prefix, const Progress& progress)
{
    AddedFile out;
    auto file = cp.files->open(rel);
    const std::string where = cp.files->absolute(rel);
    cp.arena->keepAlive(file);
    out.header = SafetensorsReader::parseHeader(headerBytes(*file), file->size(), where);
    const uint64_t dataBytes = file->size() - out.header.dataStart;
    for (const auto& t : out.header.tensors) {
        progress.checkCancelled();
        KeyPath path = prefix;
        path.push_back(KeyPathElem::fromKey(t.name));
        const std::string key = joinKeyPath(path);
        out.names.insert(t.name);
        if (!t.dtype) {
            // F4, F6_E2M3, F6_E3M2 (newer writers), or a dtype this version does not know: the rest stays readable
            builder.error(ReaderCode::UnsupportedDtype,
                where + ": tensor " + quote(t.name) + " has dtype " + quote(t.dtypeText)
                    + ", which this version cannot represent; its data is not shown",
                key);
            builder.addValue(std::move(path), cp.arena->makeNone());
            cp.entries.back().error = "dtype " + t.dtypeText + " is not supported";
            continue;
        }
        TensorEntry e;
        e.dtype = *t.dtype;
        e.shape = t.shape;
        if (t.end > dataBytes) {
            builder.error(ReaderCode::ChunkOutOfRange,
                where + ": tensor " + quote(t.name) + " needs bytes [" + std::to_string(out.header.dataStart + t.begin)
                    + ", " + std::to_string(out.header.dataStart + t.end) + ") but the file has "
                    + std::to_string(file->size()) + " bytes (cut short?)",
                key);
            builder.addTensor(std::move(path), std::move(e));
            continue;
        }
        TensorChunk c;
        c.offsets.assign(t.shape.size(), 0);
        c.sizes = t.shape;
        c.source.kind = ChunkSource::Kind::StorageRecord;
        c.source.file = rel;
        c.source.offset = out.header.dataStart + t.begin;
        c.source.length = t.end - t.begin;
        c.source.storageOffset = 0;
        c.source.strides.assign(t.shape.size(), 1);
        for (size_t d = t.shape.size(); d-- > 1;)
            c.source.strides[d - 1] = c.source.strides[d] * std::max<int64_t>(t.shape[d], 1);
        e.chunks.push_back(c);
        builder.addTensor(std::move(path), std::move(e));
    }
    out.ok = true;
    return out;
}

} // namespace

SafetensorsHeader SafetensorsReader::parseHeader(const uint8_t* data, uint64_t size, const std::string& where)
{
    if (size < 8)
        throw Error(ErrorKind::Truncated, where,
            "is " + std::to_string(size) + " bytes, shorter than a safetensors header length (8 bytes)");
    SafetensorsHeader h;
    h.headerLength = readLe64(data);
    if (h.headerLength < 2 || h.headerLength > kMaxHeaderLength)
        throw Error(ErrorKind::Format, where,
            "safetensors header length " + std::to_string(h.headerLength) + " is out of bounds (2 to "
                + std::to_string(kMaxHeaderLength) + " bytes)",
            0);
    if (h.headerLength > size - 8)
        throw Error(ErrorKind::Truncated, where,
            "safetensors header of " + std::to_string(h.headerLength) + " bytes runs past the end of the "
                + std::to_string(size) + "-byte file",
            8);
    h.dataStart = 8 + h.headerLength;
    const char* text = reinterpret_cast<const char*>(data + 8);
    if (text[0] != '{') throw Error(ErrorKind::Format, where, "safetensors header does not start with '{'", 8);
    json header;
    try {
        header = json::parse(text, text + h.headerLength);
    } catch (const json::exception& e) {
        const auto* pe = dynamic_cast<const json::parse_error*>(&e);
        throw Error(ErrorKind::Format, where, std::string("safetensors header is not valid JSON: ") + e.what(),
            pe ? 8 + static_cast<uint64_t>(pe->byte) : 8);
    }
    if (!header.is_object()) throw Error(ErrorKind::Format, where, "safetensors header is not a JSON object", 8);
    // a name given twice: a JSON object keeps the last silently, the safetensors library refuses the file (serde:
    // duplicate field); a reader of ours must not pick one of two tensors. nlohmann's parser callback cannot say it
    // in linear time (it rescans the object after each member), so a second, SAX pass counts the top-level names.
    const std::string duplicate = firstDuplicateTopLevelKey(text, h.headerLength);
    if (!duplicate.empty())
        throw Error(ErrorKind::Format, where,
            "safetensors header names " + quote(duplicate)
                + " twice: which record is the tensor is not defined (the safetensors library refuses the file)",
            8);

    for (const auto& [name, info] : header.items()) {
        if (name == "__metadata__") {
            if (info.is_null()) continue;
            if (!info.is_object())
                throw Error(ErrorKind::Format, where, "safetensors __metadata__ is not an object of strings", 8);
            for (const auto& [k, v] : info.items()) {
                if (!v.is_string())
                    throw Error(
                        ErrorKind::Format, where, "safetensors __metadata__ value " + quote(k) + " is not a string", 8);
                h.metadata.emplace_back(k, v.get<std::string>());
            }
            continue;
        }
        const std::string& tensorName = name; // C++17 lambdas cannot capture a structured binding (clang)
        auto bad = [&](const std::string& what) {
            return Error(ErrorKind::Format, where, "safetensors tensor " + quote(tensorName) + ": " + what, 8);
        };
        if (!info.is_object()) throw bad("its record is not an object");
        const auto dt = info.find("dtype");
        const auto shape = info.find("shape");
        const auto offsets = info.find("data_offsets");
        if (dt == info.end() || !dt->is_string()) throw bad("no dtype string");
        if (shape == info.end() || !shape->is_array()) throw bad("no shape list");
        if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2)
            throw bad("data_offsets is not a [begin, end] pair");
        SafetensorsHeader::Tensor t;
        t.name = name;
        t.dtypeText = dt->get<std::string>();
        t.dtype = dtypeFromSafetensors(t.dtypeText);
        if (!asUnsigned((*offsets)[0], t.begin) || !asUnsigned((*offsets)[1], t.end))
            throw bad("data_offsets are not non-negative integers");
        if (t.begin > t.end)
            throw bad("data_offsets begin " + std::to_string(t.begin) + " > end " + std::to_string(t.end));
        // numel x element size in checked arithmetic: a hostile shape must not wrap into a small byte count
        const uint64_t elem = t.dtype ? std::max<size_t>(dtypeSize(*t.dtype), 1) : 1;
        uint64_t bytes = elem;
        bool overflow = false;
        for (const auto& d : *shape) {
            uint64_t v = 0;
            if (!asUnsigned(d, v) || v > static_cast<uint64_t>(INT64_MAX))
                throw bad("shape " + shape->dump() + " is not a list of sizes");
            t.shape.push_back(static_cast<int64_t>(v));
            if (v != 0 && bytes > static_cast<uint64_t>(INT64_MAX) / v)
                overflow = true;
            else
                bytes *= v;
        }
        bool empty = false;
        for (auto d : t.shape)
            empty = empty || d == 0;
        if (empty) bytes = 0;
        if (overflow && !empty) throw bad("shape " + shape->dump() + " holds more than 2^63 bytes");
        if (t.dtype && t.end - t.begin != bytes)
            throw bad("data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") hold "
                + std::to_string(t.end - t.begin) + " bytes but shape " + shape->dump() + " of " + t.dtypeText
                + " needs " + std::to_string(bytes));
        h.tensors.push_back(std::move(t));
    }
    std::stable_sort(h.tensors.begin(), h.tensors.end(),
        [](const auto& a, const auto& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    for (size_t i = 1; i < h.tensors.size(); ++i)
        if (h.tensors[i].begin < h.tensors[i - 1].end)
            throw Error(ErrorKind::Format, where,
                "safetensors tensors " + quote(h.tensors[i - 1].name) + " and " + quote(h.tensors[i].name)
                    + " overlap in the data area",
                8);
    return h;
}

bool SafetensorsReader::looksLikeSafetensors(const uint8_t* data, uint64_t size)
{
    if (size < 9) return false;
    const uint64_t n = readLe64(data);
    return n >= 2 && n <= kMaxHeaderLength && data[8] == '{';
}

std::string SafetensorsReader::modelFileIn(const std::string& folder)
{
    for (const char* name : {kIndexFile, kSingleFile})
        if (isFile(childLocation(folder, name))) return name;
    if (!canListFolder(folder)) return {};
    std::string only;
    int count = 0;
    for (const std::string& n : folderEntries(folder)) {
        if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0 && isFile(childLocation(folder, n))) {
            only = n;
            ++count;
        }
    }
    return count == 1 ? only : std::string();
}

bool SafetensorsReader::looksLikeSafetensorsPath(const std::string& path)
{
    if (isFolder(path)) return !modelFileIn(path).empty();
    const std::string n = locationName(path);
    const std::string suffix = ".safetensors.index.json";
    return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0 && isFile(path);
}

std::string SafetensorsReader::addModel(Checkpoint& cp, CheckpointBuilder& builder, const std::string& modelFile,
    const KeyPath& prefix, const Progress& progress)
{
    const std::string suffix = ".index.json";
    const bool isIndex = modelFile.size() > suffix.size()
        && modelFile.compare(modelFile.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (!isIndex) {
        AddedFile f = addFile(cp, builder, modelFile, prefix, progress);
        const std::string meta = describeMetadata(f.header);
        return "1 file" + (meta.empty() ? std::string() : ", metadata {" + meta + "}");
    }

    // the index: weight_map names every tensor and the shard holding it
    const std::vector<WeightIndexShard> shards = readWeightIndex(cp, modelFile);
    // remote shards: their sizes asked for together (HEADs over plain HTTP), and while one shard's header is read
    // the next ones' first blocks (the header's length and most headers) are fetched
    std::vector<std::string> shardNames;
    for (const auto& s : shards)
        shardNames.push_back(s.file);
    const bool remote = isUrl(cp.files->rootDir());
    if (remote) statInsideAhead(cp.files->rootDir(), shardNames);
    LookAhead ahead(
        shardNames.size(), [](size_t) { return uint64_t(64) << 10; },
        [&](size_t i) {
            if (!statInside(cp.files->rootDir(), shardNames[i]).ok()) return; // reported when its turn comes
            try {
                cp.files->open(shardNames[i])->prefetch(0, uint64_t(64) << 10);
            } catch (const Error&) {
                // met again when the shard is read, and said there
            }
        },
        uint64_t(4) << 20, 16);
    return addIndexedShards(
        cp, builder, modelFile, shards,
        [&](const std::string& rel) { return addFile(cp, builder, rel, prefix, progress).names; },
        [&](size_t i) {
            if (remote) ahead.before(i);
        },
        progress, "reading safetensors shards");
}

std::shared_ptr<const Checkpoint> SafetensorsReader::open(const std::string& path, const Progress& progress)
{
    progress(0.0, "reading safetensors");
    std::string root;
    std::string modelFile;
    if (isFolder(path)) {
        root = path;
        modelFile = modelFileIn(path);
        if (modelFile.empty())
            throw Error(ErrorKind::Format, path, "is a folder without model.safetensors or a safetensors index");
    } else {
        // a URL's query tag stays with the folder (its shards are asked for with it); the file goes by its name
        root = parentLocation(path);
        modelFile = locationName(path);
    }
    auto cp = std::make_shared<Checkpoint>();
    cp->format = CheckpointFormat::Safetensors;
    cp->path = displayLocation(path);
    cp->arena = std::make_shared<PyArena>();
    cp->files = std::make_shared<CheckpointFiles>(root);
    if (!isFolder(path) && isUrl(path)) cp->files->add(modelFile, openByteSource(path)); // the URL as given
    CheckpointBuilder builder(*cp);
    cp->formatDetail = "safetensors, " + addModel(*cp, builder, modelFile, {}, progress);
    builder.finish();
    progress(1.0, "reading safetensors");
    return cp;
}

} // namespace optscope
