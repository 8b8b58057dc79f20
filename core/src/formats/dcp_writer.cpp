// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/dcp_writer.h"
#include "optscope/base/error.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/output_file.h"
#include "optscope/io/remote_object.h"
#include "optscope/io/storage.h"
#include "optscope/pickle/pickle_emitter.h"

#include <filesystem>
#include <map>
#include <random>
#include <unistd.h>

namespace fs = std::filesystem;

namespace optscope {

namespace {

/// Where one written item lies: a value, or chunk `chunk` of a tensor of the plan (its key and offsets are read from
/// the plan when .metadata is pickled: a reshard to 2,048 ranks writes millions of chunks, none of them copied here)
struct ItemLocation
{
    const DcpPlan::Value* value = nullptr;
    const DcpPlan::Tensor* tensor = nullptr;
    uint32_t chunk = 0; ///< also MetadataIndex.index, the chunk's position in its TensorStorageMetadata
    uint32_t file = 0; ///< into the file names
    uint64_t offset = 0;
    uint64_t length = 0;
};

const char* kMetadataModule = "torch.distributed.checkpoint.metadata";

class MetadataPickler
{
public:
    std::string run(const DcpPlan& plan, const std::vector<ItemLocation>& items, const std::vector<std::string>& files)
    {
        e.global(kMetadataModule, "Metadata");
        e.tuple(0);
        e.op(0x81); // NEWOBJ
        e.op('}');
        e.mark();
        e.str("state_dict_metadata");
        stateDictMetadata(plan);
        e.str("planner_data");
        plannerData(plan);
        e.str("storage_data");
        storageData(items, files);
        e.str("storage_meta");
        e.op('N');
        e.op('u'); // SETITEMS
        e.op('b'); // BUILD
        e.op('.');
        return std::move(e.out);
    }

private:
    template<typename Ints> void size(const Ints& v)
    {
        e.global("torch", "Size");
        if (v.size() > 3) e.mark();
        for (auto x : v)
            e.integer(x);
        e.tuple(v.size());
        e.tuple(1);
        e.op('R');
    }
    void dataclass(const char* module, const char* name)
    {
        e.global(module, name);
        e.tuple(0);
        e.op(0x81);
    }
    static std::vector<std::pair<bool, size_t>> orderOf(const DcpPlan& plan)
    {
        if (!plan.order.empty()) return plan.order;
        std::vector<std::pair<bool, size_t>> o;
        for (size_t i = 0; i < plan.tensors.size(); ++i)
            o.push_back({true, i});
        for (size_t i = 0; i < plan.values.size(); ++i)
            o.push_back({false, i});
        return o;
    }
    void tensorMetadata(const DcpPlan::Tensor& t)
    {
        dataclass(kMetadataModule, "TensorStorageMetadata");
        e.op('}');
        e.mark();
        e.str("properties");
        dataclass(kMetadataModule, "TensorProperties");
        // __setstate__((dtype, layout, requires_grad, memory_format encoding, pin_memory))
        e.mark();
        e.global("torch", std::string(dtypeName(t.dtype)));
        e.global("torch.serialization", "_get_layout");
        e.str("torch.strided");
        e.tuple(1);
        e.op('R');
        e.op(t.requiresGrad ? 0x88 : 0x89);
        e.global(kMetadataModule, "_MEM_FORMAT_ENCODING");
        e.integer(0); // TORCH_CONTIGUOUS_FORMAT
        e.tuple(1);
        e.op('R');
        e.op(0x89);
        e.op('t');
        e.op('b');
        e.str("size");
        size(t.shape);
        e.str("chunks");
        e.op(']');
        if (!t.chunks.empty()) {
            e.mark();
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                dataclass(kMetadataModule, "ChunkStorageMetadata");
                e.op('}');
                e.mark();
                e.str("offsets");
                size(t.chunks.offsetsOf(c));
                e.str("sizes");
                size(t.chunks.sizesOf(c));
                e.op('u');
                e.op('b');
            }
            e.op('e');
        }
        e.op('u');
        e.op('b');
    }
    void stateDictMetadata(const DcpPlan& plan)
    {
        e.op('}');
        const auto order = orderOf(plan);
        if (order.empty()) return;
        e.mark();
        for (const auto& [isTensor, i] : order) {
            if (isTensor) {
                e.str(joinKeyPath(plan.tensors[i].path));
                tensorMetadata(plan.tensors[i]);
            } else {
                e.str(joinKeyPath(plan.values[i].path));
                dataclass(kMetadataModule, "BytesStorageMetadata");
            }
        }
        e.op('u');
    }
    void plannerData(const DcpPlan& plan)
    {
        e.op('}');
        const auto order = orderOf(plan);
        if (order.empty()) return;
        e.mark();
        for (const auto& [isTensor, i] : order) {
            const KeyPath& path = isTensor ? plan.tensors[i].path : plan.values[i].path;
            e.str(joinKeyPath(path));
            if (path.size() > 3) e.mark();
            for (const auto& p : path) {
                if (p.isIndex())
                    e.integer(p.index);
                else
                    e.str(p.key);
            }
            e.tuple(path.size());
        }
        e.op('u');
    }
    void storageData(const std::vector<ItemLocation>& items, const std::vector<std::string>& files)
    {
        e.op('}');
        if (items.empty()) return;
        e.mark();
        for (const auto& it : items) {
            dataclass(kMetadataModule, "MetadataIndex");
            e.op('}');
            e.mark();
            e.str("fqn");
            e.str(joinKeyPath(it.tensor ? it.tensor->path : it.value->path));
            if (it.tensor) {
                e.str("offset");
                size(it.tensor->chunks.offsetsOf(it.chunk));
            }
            e.str("index");
            e.integer(it.tensor ? static_cast<int64_t>(it.chunk) : 0);
            e.op('u');
            e.op('b');
            dataclass("torch.distributed.checkpoint.filesystem", "_StorageInfo");
            e.op('}');
            e.mark();
            e.str("relative_path");
            e.str(files[it.file]);
            e.str("offset");
            e.integer(static_cast<int64_t>(it.offset));
            e.str("length");
            e.integer(static_cast<int64_t>(it.length));
            e.op('u');
            e.op('b');
        }
        e.op('u');
    }

    PickleEmitter e;
};

/// removes a half-written temporary folder unless committed
class TempDir
{
public:
    explicit TempDir(const std::string& dest)
    {
        std::random_device rd;
        // an object-store output is written in a local scratch folder first, then uploaded (.metadata last)
        const bool remote = isUrl(dest);
        const std::string scratch = fs::temp_directory_path().string();
        if (remote)
            removeDeadEntries(scratch, "optscope-out-");
        else
            removeStaleTemporaries(dest); // a run killed mid-write left one
        for (;;) {
            path = remote ? scratch + "/optscope-out-" + std::to_string(::getpid()) + "-" + std::to_string(rd())
                          : temporaryPrefix(dest) + std::to_string(rd());
            std::error_code ec;
            fs::create_directory(path, ec); // not the parents: a missing parent folder is the user's mistake to hear of
            if (ec) throw Error(ErrorKind::Io, dest, "cannot create a temporary folder next to it: " + ec.message());
            // held while it is written: another process's cleanup sees that it is alive (removeStaleTemporaries);
            // a cleanup that took it before the lock removed it, so it must still be there once locked
            if (lock.lock(path.string()) && fs::exists(path, ec)) break;
        }
    }
    ~TempDir()
    {
        if (!committed) {
            std::error_code ec;
            fs::remove_all(path, ec);
        }
    }
    fs::path path;
    bool committed = false;
    TemporaryLock lock;
};

} // namespace

static DcpWriteStats writeDcpUnnamed(
    const DcpPlan& plan, const std::string& outDir, const Progress& progress, WriteOptions options);

DcpWriteStats writeDcp(const DcpPlan& plan, const std::string& outDir, const Progress& progress, WriteOptions options)
{
    try {
        return writeDcpUnnamed(plan, outDir, progress, std::move(options));
    } catch (const Error& e) {
        // a write inside the temporary folder failed (disk full, quota): name the output the user asked for
        const std::string tmpMark = "/." + fs::path(outDir).filename().string() + ".tmp-";
        if (e.kind() == ErrorKind::Io && e.file().find(tmpMark) != std::string::npos)
            throw Error(ErrorKind::Io, outDir,
                "writing " + fs::path(e.file()).filename().string() + ": " + e.detail()
                    + " (nothing was written: the temporary folder is removed)");
        throw;
    }
}

static DcpWriteStats writeDcpUnnamed(
    const DcpPlan& plan, const std::string& outDir, const Progress& progress, WriteOptions options)
{
    refuseOutputOverInputs(outDir, options.inputs); // before the temporary folder is made next to it
    std::error_code ec;
    const bool remote = isUrl(outDir);
    if (remote) {
        checkWritableUrl(outDir);
        const LocationKind k = locationKind(outDir);
        if (k == LocationKind::File || (k == LocationKind::Folder && !folderEntries(outDir).empty()))
            throw Error(ErrorKind::Io, displayLocation(outDir),
                "already holds objects; choose a new output prefix (nothing there is overwritten)");
    } else if (fs::exists(outDir, ec) && !(fs::is_directory(outDir, ec) && fs::is_empty(outDir, ec))) {
        throw Error(ErrorKind::Io, outDir, "already exists and is not an empty folder; choose a new output folder");
    }
    TempDir tmp(outDir);
    // the files inside the temporary folder are committed there; the inputs are checked once, before the folder is
    WriteOptions inner = options;
    inner.beforeCommit = nullptr;
    if (!inner.cancelled) inner.cancelled = progress.cancelled;

    // which items go to which rank's file, in FileSystemWriter's order: values first, then tensor chunks
    std::map<int, std::vector<std::pair<const DcpPlan::Value*, std::pair<const DcpPlan::Tensor*, size_t>>>> byRank;
    for (const auto& v : plan.values)
        byRank[v.rank].push_back({&v, {nullptr, 0}});
    for (const auto& t : plan.tensors)
        for (size_t c = 0; c < t.chunks.size(); ++c)
            byRank[t.chunks.rank(c)].push_back({nullptr, {&t, c}});

    uint64_t totalBytes = 0, doneBytes = 0;
    for (const auto& t : plan.tensors)
        for (size_t c = 0; c < t.chunks.size(); ++c)
            totalBytes += static_cast<uint64_t>(t.chunks.numelOf(c)) * dtypeSize(t.dtype);

    std::vector<ItemLocation> items;
    std::vector<std::string> files;
    DcpWriteStats stats;
    stats.leftOut = plan.leftOut;
    for (const auto& [rank, list] : byRank) {
        const std::string name = "__" + std::to_string(rank) + "_0.distcp";
        files.push_back(name);
        OutputFile out((tmp.path / name).string(), inner);
        for (const auto& [value, tensorChunk] : list) {
            progress.checkCancelled();
            ItemLocation loc;
            loc.file = static_cast<uint32_t>(files.size() - 1);
            loc.offset = out.position();
            StateTree tree;
            if (value) {
                loc.value = value;
                tree.setValue({}, value->value);
                ++stats.valueItems;
            } else {
                const auto& [t, c] = tensorChunk;
                loc.tensor = t;
                loc.chunk = static_cast<uint32_t>(c);
                TensorToWrite w;
                w.dtype = t->dtype;
                w.shape = t->chunks.sizesOf(c).vec();
                // (a structured binding cannot be captured in C++17: name the tensor)
                w.produce = [tensor = t, offsets = t->chunks.offsetsOf(c).vec(), sizes = w.shape](
                                const ByteSink& sink) { tensor->produce(offsets, sizes, sink); };
                tree.setTensor({}, std::move(w));
                ++stats.tensorItems;
            }
            Progress inner;
            inner.cancelled = progress.cancelled;
            // a value item is unpickled by DCP's loader with weights_only=False (torch 2.6 load_bytes): objects (a
            // torchtitan BytesIO, Megatron-LM's args Namespace) are written back as they were pickled
            const WriteStats ws = TorchSaveWriter::writeArchive(tree, out, "archive", inner, true);
            doneBytes += ws.tensorBytes;
            progress(totalBytes ? double(doneBytes) / double(totalBytes) : 1.0, "writing shards");
            loc.length = out.position() - loc.offset;
            items.push_back(std::move(loc));
        }
        stats.bytes += out.position();
        out.commit();
        ++stats.files;
    }

    for (const auto& c : plan.copies) {
        progress.checkCancelled();
        OutputFile out((tmp.path / c.name).string(), inner);
        if (c.source->fd() >= 0)
            out.copyFrom(c.source->fd(), 0, c.source->size());
        else
            out.write(c.source->all(), c.source->size()); // a remote input's companion
        stats.bytes += out.position();
        out.commit();
        stats.copied.push_back(c.name);
    }

    MetadataPickler pickler;
    const std::string meta = pickler.run(plan, items, files);
    OutputFile metaFile((tmp.path / ".metadata").string(), inner);
    metaFile.write(meta.data(), meta.size());
    metaFile.commit();
    stats.bytes += meta.size();

    progress.checkCancelled(); // the last moment to stop with nothing published
    if (remote) {
        // data objects first, .metadata last: what DCP readers take as a complete checkpoint; on any failure the
        // objects already written are removed
        if (options.beforeCommit) options.beforeCommit();
        std::vector<std::string> uploaded;
        try {
            std::vector<std::string> names = files;
            names.insert(names.end(), stats.copied.begin(), stats.copied.end());
            for (const auto& name : names) {
                progress.checkCancelled();
                uploadObject((tmp.path / name).string(), childLocation(outDir, name));
                uploaded.push_back(childLocation(outDir, name));
            }
            progress.checkCancelled();
            uploadObject((tmp.path / ".metadata").string(), childLocation(outDir, ".metadata"));
        } catch (...) {
            for (const auto& u : uploaded)
                removeObject(u);
            throw;
        }
        progress(1.0, "writing shards");
        return stats;
    }
    if (fs::exists(outDir, ec)) fs::remove(outDir, ec); // the empty destination folder
    if (options.beforeCommit) options.beforeCommit();
    fs::rename(tmp.path, outDir, ec);
    if (ec)
        throw Error(ErrorKind::Io, outDir, "cannot rename the finished temporary folder into place: " + ec.message());
    tmp.committed = true;
    progress(1.0, "writing shards");
    return stats;
}

} // namespace optscope
