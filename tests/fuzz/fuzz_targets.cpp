// SPDX-License-Identifier: GPL-3.0-or-later
#include "fuzz_targets.h"

#include "optscope/analysis/inspect_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/state_flattener.h"
#include "optscope/io/block_map.h"
#include "optscope/io/remote_object.h"
#include "optscope/io/zip_archive.h"
#include "optscope/model/dtype.h"
#include "optscope/pickle/pickle_machine.h"
#include "optscope/pickle/value_json.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_stats.h"
#include "optscope/tensor/tensor_values.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unistd.h>

namespace fs = std::filesystem;

namespace optscope::fuzz {

namespace {

/// A broken invariant of a successful read: abort, so that libFuzzer (or the regression test) reports it.
void require(bool ok, const char* what)
{
    if (!ok) {
        std::fprintf(stderr, "fuzz harness: invariant violated: %s\n", what);
        std::abort();
    }
}

/// One private folder per process for the files a harness writes, removed at exit. tmpfs (/dev/shm) when there is
/// one: the harnesses write every input, and a disk-backed folder would make that the bottleneck.
class Scratch
{
public:
    static const fs::path& dir()
    {
        static Scratch s;
        return s.m_dir;
    }
    /// removes every file the previous input left
    static void clear()
    {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir(), ec))
            fs::remove_all(e.path(), ec);
    }

private:
    Scratch()
    {
        std::error_code ec;
        fs::path base = fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm")
                                                                                            : fs::temp_directory_path();
        std::string templ = (base / "optscope-fuzz-XXXXXX").string();
        if (!::mkdtemp(templ.data())) {
            std::perror("fuzz harness: mkdtemp");
            std::abort();
        }
        m_dir = templ;
    }
    ~Scratch()
    {
        std::error_code ec;
        fs::remove_all(m_dir, ec);
    }
    fs::path m_dir;
};

void writeFile(const fs::path& p, std::string_view bytes)
{
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    require(out.good(), "cannot write a scratch file");
}

std::string dumpJson(const nlohmann::ordered_json& j)
{
    // as the CLI prints it: strings from pickles need not be valid UTF-8
    return j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

/// What the CLI's `inspect --json --hash` and the GUI's tensor views do with a checkpoint that opened. The tensor
/// statistics (ATen, the slowest part) only for torch.save inputs: DCP chunks reach them through the same
/// ChunkReader and TensorAssembler code that hashing exercises, and the DCP harness needs its executions per second.
void exerciseCheckpoint(const Checkpoint& cp, bool statistics)
{
    InspectOptions options;
    options.hash = false; // hashed below, only the tensors up to kMaxHashBytes
    const InspectReport report = inspectCheckpoint(cp, options);
    require(report.json.contains("entries") && report.json["entries"].size() == cp.entries.size(),
        "inspect lists every entry");
    require(!dumpJson(report.json).empty(), "inspect JSON dumps");
    for (const Entry& e : cp.entries) {
        require(cp.find(e.key) != nullptr, "every entry can be found by its key");
        if (!e.isTensor()) {
            require(e.value != nullptr, "a value entry has a value");
            continue;
        }
        if (e.tensor->nbytes() > kMaxHashBytes) continue;
        try {
            const std::string h = hashTensor(cp, e);
            require(h.size() == 64, "a SHA-256 has 64 hex digits");
        } catch (const Error&) { }
        if (!statistics) continue;
        try {
            const auto values = readTensorValues(cp, e, 16);
            require(values.size() <= 16, "readTensorValues respects maxElements");
        } catch (const Error&) { }
        try {
            const TensorStats s = computeTensorStats(cp, e, 8);
            require(s.numel == e.tensor->numel(), "statistics count every element");
            require(s.finite + s.nanCount + s.infCount == s.numel, "finite + NaN + inf == numel");
        } catch (const Error&) { }
    }
}

/// torch.save's ('storage', StorageClass, key, location, numel), as the torch.save reader resolves it (without
/// locating the bytes): anything else is unresolvable (null), which unpickle reports as an Error.
PyValue* loadStorage(PyArena& arena, PyValue* pid, uint64_t)
{
    if (!pid->isSequence() || pid->size() < 5 || pid->item(0)->kind != PyKind::Str || pid->item(0)->text != "storage")
        return nullptr;
    const PyValue* cls = pid->item(1);
    const PyValue* key = pid->item(2);
    const PyValue* numel = pid->item(4);
    if (cls->kind != PyKind::Global || key->kind != PyKind::Str || numel->kind != PyKind::Int || numel->integer < 0)
        return nullptr;
    const auto dtype = dtypeFromStorageClass(cls->global->name);
    if (!dtype) return nullptr;
    PyValue* v = arena.make(PyKind::Storage);
    v->storage = arena.makeStorageInfo();
    v->storage->key = key->text;
    v->storage->dtype = *dtype;
    v->storage->numel = numel->integer;
    v->storage->untyped = cls->global->name == "UntypedStorage";
    return v;
}

bool validFileName(std::string_view name)
{
    if (name.empty() || name.size() > 64 || name.front() == '.') return false;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_'
                || c == '-'))
            return false;
    return true;
}

template<typename F> Outcome guarded(F&& body)
{
    try {
        body();
        return Outcome::Accepted;
    } catch (const Error& e) {
        require(e.what() != nullptr && *e.what() != '\0', "an Error has a message");
        return Outcome::Rejected;
    }
    // anything else (std::bad_alloc, std::out_of_range, json errors) escapes: a finding
}

} // namespace

std::vector<DcpFile> splitDcpInput(std::string_view input)
{
    std::vector<DcpFile> files;
    size_t pos = input.find(kDcpFileMarker);
    files.push_back({".metadata", input.substr(0, pos)});
    while (pos != std::string_view::npos && files.size() < 17) {
        const size_t nameStart = pos + kDcpFileMarker.size();
        const size_t nameEnd = input.find('\n', nameStart);
        if (nameEnd == std::string_view::npos) break;
        const size_t next = input.find(kDcpFileMarker, nameEnd + 1);
        const std::string_view name = input.substr(nameStart, nameEnd - nameStart);
        const std::string_view bytes
            = input.substr(nameEnd + 1, next == std::string_view::npos ? std::string_view::npos : next - nameEnd - 1);
        bool duplicate = false;
        for (const auto& f : files)
            duplicate = duplicate || f.name == name;
        if (validFileName(name) && !duplicate) files.push_back({std::string(name), bytes});
        pos = next;
    }
    return files;
}

std::string joinDcpInput(const std::vector<DcpFile>& files)
{
    std::string out;
    for (size_t i = 0; i < files.size(); ++i) {
        if (i > 0) out.append(kDcpFileMarker).append(files[i].name).append("\n");
        out.append(files[i].bytes);
    }
    return out;
}

Outcome fuzzPickle(const uint8_t* data, size_t size)
{
    return guarded([&] {
        PyArena arena;
        PickleOptions options;
        options.sourceName = "fuzz.pkl";
        options.persistentLoad = loadStorage;
        const PickleResult r = unpickle(data, size, arena, options);
        require(r.root != nullptr, "unpickle returns a root");
        require(r.bytesConsumed >= 1 && r.bytesConsumed <= size, "STOP lies inside the input");
        require(r.protocol >= 0 && r.protocol <= 5, "protocol 0-5");
        for (const auto& leaf : flattenStateDict(r.root)) {
            require(leaf.value != nullptr, "a flattened leaf has a value");
            joinKeyPath(leaf.path);
        }
        require(!dumpJson(valueToJson(r.root)).empty(), "value JSON dumps");
        require(pyRepr(r.root, 200).size() <= 203, "pyRepr respects maxLength");
    });
}

Outcome fuzzZip(const uint8_t* data, size_t size)
{
    return guarded([&] {
        // deflated records listed as the inflater (zip_inflate.h) reads them
        const ZipArchive zip = ZipArchive::parse(data, size, "fuzz.zip", {}, true);
        require(!zip.entries().empty(), "an archive has entries");
        for (const ZipEntry& e : zip.entries()) {
            require(e.dataOffset <= size && e.storedSize <= size - e.dataOffset, "record data inside the archive");
            require(e.method == 0 ? e.storedSize == e.size : e.method == 8, "stored or deflated");
            require(zip.find(e.name) == &e, "find() returns the entry");
            if (e.method == 0 && e.name.compare(0, zip.prefix().size() + 1, zip.prefix() + "/") == 0) {
                const std::string_view bytes = zip.recordBytes(e.name.substr(zip.prefix().size() + 1));
                require(bytes.size() == e.size, "recordBytes has the entry's size");
            }
        }
    });
}

Outcome fuzzS3Listing(const uint8_t* data, size_t size)
{
    const std::string body(reinterpret_cast<const char*>(data), size);
    (void)s3ErrorCode(body);
    return guarded([&] {
        const std::string prefix(kListingPrefix);
        const ListingPage page = parseListingPage(body, prefix, "s3://bucket/ckpt/step_1");
        for (const auto& item : page.items) {
            require(item.listedAs.compare(0, item.name.size(), item.name) == 0, "a name is what was listed");
            require(item.folder || item.name == item.listedAs, "an object's name is its key below the prefix");
            require(item.folder || item.etag.size() >= 2, "an object's ETag is quoted");
        }
        const UploadsPage uploads = parseUploadsPage(body, prefix, "s3://bucket/ckpt/step_1");
        for (const auto& upload : uploads.uploads) {
            require(upload.key.compare(0, prefix.size(), prefix) == 0, "an upload's key lies below the prefix");
            require(!upload.id.empty(), "an upload has its id");
        }
    });
}

Outcome fuzzBlockMap(const uint8_t* data, size_t size)
{
    size_t at = 0;
    auto next = [&](int bytes) {
        uint64_t v = 0;
        for (int i = 0; i < bytes; ++i)
            v = v << 8 | (at < size ? data[at++] : 0);
        return v;
    };
    static constexpr uint64_t kBlocks[] = {1, 3, 16, 4096, 65536};
    const uint64_t sizeBits = next(3);
    const uint64_t block = kBlocks[next(1) % 5];
    // at most 4,096 blocks and 8 parts per block: every operation is checked block by block against the model
    const uint64_t objectSize = sizeBits % (block * 4096 + 1);
    const uint64_t maxPart = std::max<uint64_t>(1, block / 8) + next(2) % (block * 8); // below, at, above a block
    BlockMap map(objectSize, block, maxPart);
    require(map.blocks() == (objectSize + block - 1) / block, "one state per block");
    std::vector<uint8_t> model(map.blocks(), BlockMap::Absent);
    std::vector<std::vector<BlockMap::Run>> pending; // claims not settled yet
    std::vector<BlockMap::Run> fetchedRuns; // what settled as fetched: the skip lists
    // per block: the byte ranges given back since it was last claimed (a claimed block's bytes are no longer done)
    std::vector<std::vector<BlockMap::Part>> doneSinceClaim(map.blocks());
    auto covered = [&](uint64_t b) { // every byte of block b done
        const uint64_t first = b * block, last = std::min(objectSize, first + block);
        std::vector<BlockMap::Part> d = doneSinceClaim[b];
        std::sort(d.begin(), d.end(), [](const auto& x, const auto& y) { return x.offset < y.offset; });
        uint64_t reached = first;
        for (const auto& p : d)
            if (p.offset <= reached) reached = std::max(reached, p.offset + p.length);
        return reached >= last;
    };
    // the byte ranges readers point into (reading) and have not given back: they pin their blocks
    std::vector<std::vector<BlockMap::Part>> pins(3); // per reader (threads): each gives back its own
    std::vector<bool> unread(map.blocks(), false); // fetched and not read since: a read-ahead's
    auto subtract = [](std::vector<BlockMap::Part>& ranges, uint64_t from, uint64_t to) {
        std::vector<BlockMap::Part> left;
        for (const auto& p : ranges) {
            const uint64_t end = p.offset + p.length;
            if (end <= from || p.offset >= to) {
                left.push_back(p);
                continue;
            }
            if (p.offset < from) left.push_back({p.offset, from - p.offset});
            if (end > to) left.push_back({to, end - to});
        }
        ranges = left;
    };
    auto pinned = [&](uint64_t b) {
        for (const auto& readerPins : pins)
            for (const auto& p : readerPins)
                if (p.offset < (b + 1) * block && p.offset + p.length > b * block) return true;
        return false;
    };
    while (at < size) {
        const uint64_t op = next(1) % 6;
        const uint64_t offset = objectSize ? next(3) % objectSize : 0;
        const uint64_t length = next(3) % (objectSize - offset + 1);
        if (op == 0 && length) {
            const BlockMap::Run range = map.blocksOf(offset, length);
            require(range.begin * block <= offset && range.end * block >= offset + length && range.end <= map.blocks()
                    && range.begin < range.end,
                "blocksOf holds the range");
            std::vector<BlockMap::Run> skip;
            const uint64_t flags = next(1);
            if (flags % 2) skip = fetchedRuns;
            const bool prefetch = flags & 2; // a prefetch leaves consumed blocks alone
            auto skipped = [&](uint64_t b) {
                for (const auto& r : skip)
                    if (r.contains(b)) return true;
                return false;
            };
            std::vector<bool> take;
            bool inFlight = false;
            for (uint64_t b = range.begin; b < range.end; ++b) {
                take.push_back(
                    model[b] == BlockMap::Absent || (model[b] == BlockMap::Consumed && !prefetch && !skipped(b)));
                inFlight = inFlight || model[b] == BlockMap::InFlight;
            }
            const BlockMap::Claim c = map.claim(range, skip, prefetch);
            require(c.waiting == inFlight, "waiting exactly when a block of the range is in flight");
            // the runs are the maximal stretches of blocks to take, in order
            std::vector<BlockMap::Run> expected;
            for (uint64_t i = 0; i < take.size(); ++i) {
                if (!take[i]) continue;
                uint64_t j = i;
                while (j < take.size() && take[j])
                    ++j;
                expected.push_back({range.begin + i, range.begin + j});
                i = j;
            }
            require(c.runs.size() == expected.size(), "one run per stretch of absent blocks");
            size_t part = 0;
            for (size_t r = 0; r < c.runs.size(); ++r) {
                require(c.runs[r].begin == expected[r].begin && c.runs[r].end == expected[r].end, "runs are maximal");
                // its parts: exactly its bytes (the last block clipped to the object), in order, none too large
                uint64_t nextByte = c.runs[r].begin * block;
                const uint64_t runEnd = std::min(objectSize, c.runs[r].end * block);
                while (nextByte < runEnd) {
                    require(part < c.parts.size(), "parts cover every run");
                    const BlockMap::Part& p = c.parts[part++];
                    require(
                        p.offset == nextByte && p.length > 0 && p.length <= maxPart && p.offset + p.length <= runEnd,
                        "parts are in order, inside their run, at most the part size");
                    nextByte += p.length;
                }
                for (uint64_t k = c.runs[r].begin; k < c.runs[r].end; ++k) {
                    model[k] = BlockMap::InFlight;
                    doneSinceClaim[k].clear();
                }
            }
            require(part == c.parts.size(), "no part outside the runs");
            if (!c.runs.empty()) pending.push_back(c.runs);
        } else if (op == 1 && !pending.empty()) {
            const bool fetched = next(1) % 2;
            const size_t k = next(1) % pending.size();
            map.settle(pending[k], fetched);
            for (const auto& r : pending[k]) {
                for (uint64_t b = r.begin; b < r.end; ++b) {
                    model[b] = fetched ? BlockMap::Present : BlockMap::Absent;
                    unread[b] = fetched;
                }
                if (fetched) fetchedRuns.push_back(r);
            }
            pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
        } else if (op == 2) {
            const BlockMap::Reader reader = next(1) % 3;
            const std::vector<BlockMap::Run> given = map.giveBack(offset, length, reader);
            if (length && offset < objectSize) subtract(pins[reader], offset, offset + length);
            // the range's present blocks whose every byte is now done (given back since the block was last claimed)
            std::vector<BlockMap::Run> expected;
            if (length && offset < objectSize) {
                const BlockMap::Run touched = map.blocksOf(offset, length);
                for (uint64_t k = touched.begin; k < touched.end; ++k) {
                    doneSinceClaim[k].push_back({offset, length});
                    // another reader's pins keep it
                    if (!covered(k) || model[k] != BlockMap::Present || pinned(k)) continue;
                    model[k] = BlockMap::Consumed;
                    if (!expected.empty() && expected.back().end == k)
                        expected.back().end = k + 1;
                    else
                        expected.push_back({k, k + 1});
                }
            }
            require(given.size() == expected.size(), "the range's present blocks all done are given back");
            for (size_t k = 0; k < given.size(); ++k)
                require(given[k].begin == expected[k].begin && given[k].end == expected[k].end,
                    "given back in maximal stretches, in order");
        } else if (op == 3 && length) {
            const BlockMap::Run range = map.blocksOf(offset, length);
            map.renew(range);
            for (uint64_t k = range.begin; k < range.end; ++k)
                if (model[k] == BlockMap::Consumed) model[k] = BlockMap::Absent;
        } else if (op == 4 && length) {
            // a reader points into the range: its bytes are no longer done, its blocks are pinned
            const bool pointing = next(1) % 2;
            const BlockMap::Run range = map.blocksOf(offset, length);
            if (pointing) {
                const BlockMap::Reader reader = next(1) % 3;
                map.reading(offset, length, reader);
                pins[reader].push_back({offset, length});
                for (uint64_t k = range.begin; k < range.end; ++k)
                    subtract(doneSinceClaim[k], offset, offset + length);
            } else {
                map.used(range); // a copy out: read, not pointed into
            }
            for (uint64_t k = range.begin; k < range.end; ++k)
                if (model[k] == BlockMap::Present) unread[k] = false;
        } else if (op == 5) {
            // the cache's clock: only present blocks no reader points into, at most as many as asked
            const uint64_t want = next(1) % 8, visits = next(2) % (2 * map.blocks() + 2);
            const bool evictUnread = next(1) % 2;
            uint64_t cleared = 0;
            uint64_t evicted = 0;
            for (const BlockMap::Run& r : map.evict(want, visits, cleared, evictUnread))
                for (uint64_t k = r.begin; k < r.end; ++k) {
                    require(k < map.blocks() && model[k] == BlockMap::Present && !pinned(k),
                        "only a present block no reader points into is evicted");
                    require(evictUnread || !unread[k], "a block not read yet only when asked");
                    model[k] = BlockMap::Absent;
                    ++evicted;
                }
            require(evicted <= want && evicted + cleared <= visits, "at most as many as asked, one per visit");
            // two rounds of the clock take every mark: a present block not pinned is then evicted
            if (visits >= 2 * map.blocks() && evicted < want)
                for (uint64_t k = 0; k < map.blocks(); ++k)
                    require(model[k] != BlockMap::Present || pinned(k) || (unread[k] && !evictUnread),
                        "two rounds evict what they may");
        }
        for (uint64_t k = 0; k < map.blocks(); ++k) {
            require(map.state(k) == model[k], "the map agrees with the model");
            require(map.pinned(k) == pinned(k), "a block is pinned while a reader points into it");
        }
    }
    return Outcome::Accepted;
}

Outcome fuzzTorchSave(const uint8_t* data, size_t size)
{
    Scratch::clear();
    const fs::path file = Scratch::dir() / "checkpoint.pt";
    writeFile(file, std::string_view(reinterpret_cast<const char*>(data), size));
    return guarded([&] {
        const CheckpointPtr cp = openCheckpoint(file.string());
        require(cp->format == CheckpointFormat::TorchSave, "a file opens as torch.save");
        exerciseCheckpoint(*cp, true);
    });
}

Outcome fuzzDcp(const uint8_t* data, size_t size)
{
    Scratch::clear();
    const fs::path dir = Scratch::dir() / "dcp";
    fs::create_directory(dir);
    for (const DcpFile& f : splitDcpInput(std::string_view(reinterpret_cast<const char*>(data), size)))
        writeFile(dir / f.name, f.bytes);
    return guarded([&] {
        // the entries a load hands over early (the GUI's tree while the file is read) are well formed
        Progress progress;
        progress.entriesFound = [](std::vector<Entry>&& batch) {
            for (const Entry& e : batch) {
                require(e.isTensor() && e.path.size() == 1 && e.path[0].key == e.key, "a preview entry is a flat key");
                require(e.tensor->chunks.size() == 0, "a preview entry has no chunks");
                (void)e.tensor->numel();
            }
        };
        const CheckpointPtr cp = openCheckpoint(dir.string(), progress);
        require(cp->format == CheckpointFormat::Dcp, "a folder with .metadata opens as DCP");
        exerciseCheckpoint(*cp, false);
    });
}

Outcome fuzzSafetensors(const uint8_t* data, size_t size)
{
    Scratch::clear();
    const fs::path file = Scratch::dir() / "model.safetensors";
    writeFile(file, std::string_view(reinterpret_cast<const char*>(data), size));
    return guarded([&] {
        const CheckpointPtr cp = openCheckpoint(file.string());
        require(cp->format == CheckpointFormat::Safetensors, "a .safetensors file opens as safetensors");
        for (const auto& e : cp->entries)
            if (e.isTensor() && !e.tensor->chunks.empty())
                require(e.tensor->chunks[0].source.offset + e.tensor->chunks[0].source.length <= size,
                    "a tensor's bytes lie inside the file");
        exerciseCheckpoint(*cp, true);
    });
}

} // namespace optscope::fuzz
