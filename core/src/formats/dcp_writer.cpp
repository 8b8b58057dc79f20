// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/dcp_writer.h"
#include "optscope/base/error.h"
#include "optscope/base/look_ahead.h"
#include "optscope/formats/dcp_reader.h"
#include "optscope/io/job.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/output_file.h"
#include "optscope/io/remote_object.h"
#include "optscope/io/storage.h"
#include "optscope/pickle/pickle_emitter.h"

#include <cstring>
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
        e.op(pickle_op::NEWOBJ); // NEWOBJ
        e.op(pickle_op::EMPTY_DICT);
        e.mark();
        e.str("state_dict_metadata");
        stateDictMetadata(plan);
        e.str("planner_data");
        plannerData(plan);
        e.str("storage_data");
        storageData(items, files);
        e.str("storage_meta");
        e.op(pickle_op::NONE);
        e.op(pickle_op::SETITEMS); // SETITEMS
        e.op(pickle_op::BUILD); // BUILD
        e.op(pickle_op::STOP);
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
        e.op(pickle_op::REDUCE);
    }
    void dataclass(const char* module, const char* name)
    {
        e.global(module, name);
        e.tuple(0);
        e.op(pickle_op::NEWOBJ);
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
        e.op(pickle_op::EMPTY_DICT);
        e.mark();
        e.str("properties");
        dataclass(kMetadataModule, "TensorProperties");
        // __setstate__((dtype, layout, requires_grad, memory_format encoding, pin_memory))
        e.mark();
        e.global("torch", std::string(dtypeName(t.dtype)));
        e.global("torch.serialization", "_get_layout");
        e.str("torch.strided");
        e.tuple(1);
        e.op(pickle_op::REDUCE);
        e.op(t.requiresGrad ? pickle_op::NEWTRUE : pickle_op::NEWFALSE);
        e.global(kMetadataModule, "_MEM_FORMAT_ENCODING");
        e.integer(0); // TORCH_CONTIGUOUS_FORMAT
        e.tuple(1);
        e.op(pickle_op::REDUCE);
        e.op(pickle_op::NEWFALSE);
        e.op(pickle_op::TUPLE);
        e.op(pickle_op::BUILD);
        e.str("size");
        size(t.shape);
        e.str("chunks");
        e.op(pickle_op::EMPTY_LIST);
        if (!t.chunks.empty()) {
            e.mark();
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                dataclass(kMetadataModule, "ChunkStorageMetadata");
                e.op(pickle_op::EMPTY_DICT);
                e.mark();
                e.str("offsets");
                size(t.chunks.offsetsOf(c));
                e.str("sizes");
                size(t.chunks.sizesOf(c));
                e.op(pickle_op::SETITEMS);
                e.op(pickle_op::BUILD);
            }
            e.op(pickle_op::APPENDS);
        }
        e.op(pickle_op::SETITEMS);
        e.op(pickle_op::BUILD);
    }
    void stateDictMetadata(const DcpPlan& plan)
    {
        e.op(pickle_op::EMPTY_DICT);
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
        e.op(pickle_op::SETITEMS);
    }
    void plannerData(const DcpPlan& plan)
    {
        e.op(pickle_op::EMPTY_DICT);
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
        e.op(pickle_op::SETITEMS);
    }
    void storageData(const std::vector<ItemLocation>& items, const std::vector<std::string>& files)
    {
        e.op(pickle_op::EMPTY_DICT);
        if (items.empty()) return;
        e.mark();
        for (const auto& it : items) {
            dataclass(kMetadataModule, "MetadataIndex");
            e.op(pickle_op::EMPTY_DICT);
            e.mark();
            e.str("fqn");
            e.str(joinKeyPath(it.tensor ? it.tensor->path : it.value->path));
            if (it.tensor) {
                e.str("offset");
                size(it.tensor->chunks.offsetsOf(it.chunk));
            }
            e.str("index");
            e.integer(it.tensor ? static_cast<int64_t>(it.chunk) : 0);
            e.op(pickle_op::SETITEMS);
            e.op(pickle_op::BUILD);
            dataclass("torch.distributed.checkpoint.filesystem", "_StorageInfo");
            e.op(pickle_op::EMPTY_DICT);
            e.mark();
            e.str("relative_path");
            e.str(files[it.file]);
            e.str("offset");
            e.integer(static_cast<int64_t>(it.offset));
            e.str("length");
            e.integer(static_cast<int64_t>(it.length));
            e.op(pickle_op::SETITEMS);
            e.op(pickle_op::BUILD);
        }
        e.op(pickle_op::SETITEMS);
    }

    PickleEmitter e;
};

/// a local output's temporary folder next to it, removed unless committed (an object store's output is streamed to
/// its objects instead)
class TempDir
{
public:
    explicit TempDir(const std::string& dest)
    {
        std::random_device rd;
        removeStaleTemporaries(dest); // a run killed mid-write left one
        for (;;) {
            path = temporaryPrefix(dest) + std::to_string(rd());
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
    } catch (const Error& e) {
        Job::current().reportFailure(e.what()); // the other processes of a job stop now, not at the next gather
        throw;
    }
}

namespace {

/// The items of one rank's file, in FileSystemWriter's order: values first, then tensor chunks.
using FileItem = std::pair<const DcpPlan::Value*, std::pair<const DcpPlan::Tensor*, size_t>>;

/// removes every object under @p prefix (the job's output prefix, empty when the job began): what a process that
/// died after uploading left there
void removeObjectsUnder(const std::string& prefix)
{
    try {
        forgetRemoteListings();
        for (const auto& name : folderEntries(prefix))
            removeObject(childLocation(prefix, name));
    } catch (const Error&) {
        // best effort: the failure being reported matters more
    }
}

} // namespace

static DcpWriteStats writeDcpUnnamed(
    const DcpPlan& plan, const std::string& outDir, const Progress& progress, WriteOptions options)
{
    // Run as several processes (Job), every process builds the same plan; each writes the rank files it owns (split
    // by bytes) into one temporary folder (local output: rank 0 makes it, on storage all processes share) or
    // uploads them (object storage), and rank 0, once every process has said what it wrote where, writes .metadata
    // and publishes the folder. The files are byte-identical to those one process writes.
    Job& job = Job::current();
    const bool split = job.distributed();
    const bool remote = isUrl(outDir);
    WriteOptions inner = options;
    inner.beforeCommit = nullptr;
    inner.cancelled = [&] { return progress.isCancelled() || job.failed(); };
    inner.inFreshFolder = !remote; // the rank files go into the temporary folder made below
    const CancelScope cancelScope(inner.cancelled); // a read stalled on a server ends too

    std::map<int, std::vector<FileItem>> byRank;
    for (const auto& v : plan.values)
        byRank[v.rank].push_back({&v, {nullptr, 0}});
    for (const auto& t : plan.tensors)
        for (size_t c = 0; c < t.chunks.size(); ++c)
            byRank[t.chunks.rank(c)].push_back({nullptr, {&t, c}});
    std::vector<const std::vector<FileItem>*> fileItems;
    std::vector<std::string> files;
    std::vector<uint64_t> fileBytes;
    uint64_t totalBytes = 0;
    for (const auto& [rank, list] : byRank) {
        files.push_back("__" + std::to_string(rank) + "_0.distcp");
        fileItems.push_back(&list);
        uint64_t b = 0;
        for (const auto& item : list)
            if (const auto* t = item.second.first)
                b += static_cast<uint64_t>(t->chunks.numelOf(item.second.second)) * dtypeSize(t->dtype);
        fileBytes.push_back(b);
        totalBytes += b;
    }
    const std::vector<int> owner = split ? splitByWeight(fileBytes, job.size()) : std::vector<int>(files.size(), 0);

    std::unique_ptr<TempDir> tmp;
    std::vector<std::string> uploaded; // by this process, removed again unless the folder is published
    DcpWriteStats stats;
    stats.leftOut = plan.leftOut;
    std::string tmpPath; // the temporary folder (a process of a job: rank 0's)
    try {
        // 1. the output is checked, and the temporary folder made, by one process
        const std::string fingerprint = std::to_string(files.size()) + " files, " + std::to_string(totalBytes)
            + " tensor bytes, " + std::to_string(plan.tensors.size()) + " tensors, "
            + std::to_string(plan.values.size()) + " values";
        if (job.isRoot()) {
            refuseOutputOverInputs(outDir, options.inputs); // before the temporary folder is made next to it
            std::error_code ec;
            if (remote) {
                checkWritableUrl(outDir);
                const LocationKind k = locationKind(outDir);
                if (k == LocationKind::File || (k == LocationKind::Folder && !folderEntries(outDir).empty()))
                    throw Error(ErrorKind::Io, displayLocation(outDir),
                        "already holds objects; choose a new output prefix (nothing there is overwritten)");
            } else if (fs::exists(outDir, ec) && !(fs::is_directory(outDir, ec) && fs::is_empty(outDir, ec))) {
                throw Error(
                    ErrorKind::Io, outDir, "already exists and is not an empty folder; choose a new output folder");
            }
            if (!remote) {
                tmp = std::make_unique<TempDir>(outDir);
                tmpPath = tmp->path.string();
            }
            if (split) job.broadcast("dcp-start", tmpPath + "\n" + fingerprint);
        } else {
            const std::string start = job.broadcast("dcp-start", {});
            const size_t nl = start.find('\n');
            tmpPath = start.substr(0, nl);
            if (nl == std::string::npos || start.substr(nl + 1) != fingerprint)
                throw Error(ErrorKind::Usage, outDir,
                    "this process planned " + fingerprint + ", rank 0 "
                        + (nl == std::string::npos ? std::string("nothing") : start.substr(nl + 1))
                        + ": every process of the job must read the same checkpoint with the same options");
            std::error_code ec;
            if (!remote && !fs::is_directory(tmpPath, ec))
                throw Error(ErrorKind::Io, outDir,
                    "rank 0's temporary folder " + tmpPath
                        + " is not visible to this process: the output must be on a file system every process of "
                          "the job shares");
        }
        // where a file of the output is written: into the temporary folder, or straight to its object (streamed, it
        // appears when its OutputFile commits; .metadata last makes the checkpoint whole)
        const fs::path dir = tmp ? tmp->path : fs::path(tmpPath);
        const auto outputOf
            = [&](const std::string& name) { return remote ? childLocation(outDir, name) : (dir / name).string(); };

        // 2. each process writes the rank files it owns
        std::vector<std::vector<ItemLocation>> locations(files.size());
        JobProgress written(job, "dcp-bytes", totalBytes, progress, "writing shards");
        for (size_t f = 0; f < files.size(); ++f) {
            if (owner[f] != job.rank()) continue;
            OutputFile out(outputOf(files[f]), inner);
            const std::vector<FileItem>& itemsOfFile = *fileItems[f];
            // the tensor boxes after the one being written ask for their source bytes (DcpPlan::Tensor::prefetch)
            LookAhead ahead(
                itemsOfFile.size(),
                [&](size_t n) -> uint64_t {
                    const auto& [nt, nc] = itemsOfFile[n].second;
                    if (itemsOfFile[n].first || !nt->prefetch) return 0;
                    return static_cast<uint64_t>(nt->chunks.numelOf(nc)) * dtypeSize(nt->dtype);
                },
                [&](size_t n) {
                    const auto& [nt, nc] = itemsOfFile[n].second;
                    nt->prefetch(nt->chunks.offsetsOf(nc).vec(), nt->chunks.sizesOf(nc).vec());
                });
            for (size_t k = 0; k < itemsOfFile.size(); ++k) {
                const auto& [value, tensorChunk] = itemsOfFile[k];
                progress.checkCancelled();
                ahead.before(k);
                ItemLocation loc;
                loc.file = static_cast<uint32_t>(f);
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
                Progress itemProgress;
                itemProgress.cancelled = inner.cancelled;
                // a value item is unpickled by DCP's loader with weights_only=False (torch 2.6 load_bytes): objects
                // (a torchtitan BytesIO, Megatron-LM's args Namespace) are written back as they were pickled
                const WriteStats ws = TorchSaveWriter::writeArchive(tree, out, "archive", itemProgress, true);
                written.add(ws.tensorBytes);
                loc.length = out.position() - loc.offset;
                locations[f].push_back(loc);
            }
            stats.bytes += out.position();
            out.commit();
            if (remote) uploaded.push_back(outputOf(files[f]));
            ++stats.files;
        }
        written.flush();
        // every process checks what it read before it reports its part done
        if (split && options.beforeCommit) options.beforeCommit();

        // 3. rank 0 learns where every item went
        if (split) {
            // what this process wrote, for rank 0's .metadata: per file it owns, each item's offset and length (the
            // items themselves are known to every process from the plan), and its totals
            std::vector<uint64_t> part {stats.bytes, stats.files, stats.tensorItems, stats.valueItems};
            for (size_t f = 0; f < files.size(); ++f) {
                if (owner[f] != job.rank()) continue;
                part.push_back(f);
                for (const auto& loc : locations[f]) {
                    part.push_back(loc.offset);
                    part.push_back(loc.length);
                }
            }
            const std::vector<std::string> parts
                = job.gather("dcp-files", wordsToPayload(part), [&] { written.showTotal(); });
            if (!job.isRoot()) {
                job.broadcast("dcp-commit", {}); // throws unless rank 0 published the folder
                uploaded.clear();
                return stats;
            }
            for (size_t p = 1; p < parts.size(); ++p) {
                const std::vector<uint64_t> w = wordsFromPayload(parts[p]);
                if (w.size() < 4) throw Error(ErrorKind::Format, outDir, "rank " + std::to_string(p) + " sent no part");
                stats.bytes += w[0];
                stats.files += w[1];
                stats.tensorItems += w[2];
                stats.valueItems += w[3];
                size_t at = 4;
                while (at < w.size()) {
                    const size_t f = w[at++];
                    if (f >= files.size() || owner[f] != static_cast<int>(p)
                        || at + 2 * fileItems[f]->size() > w.size())
                        throw Error(ErrorKind::Format, outDir,
                            "rank " + std::to_string(p) + " reported items of a file it does not own");
                    for (const auto& [value, tensorChunk] : *fileItems[f]) {
                        ItemLocation loc;
                        loc.file = static_cast<uint32_t>(f);
                        loc.value = value;
                        loc.tensor = tensorChunk.first;
                        loc.chunk = static_cast<uint32_t>(tensorChunk.second);
                        loc.offset = w[at++];
                        loc.length = w[at++];
                        locations[f].push_back(loc);
                    }
                }
            }
        }
        std::vector<ItemLocation> items;
        for (auto& l : locations)
            items.insert(items.end(), l.begin(), l.end());

        // 4. rank 0: the companion files, .metadata, and the folder published
        for (const auto& c : plan.copies) {
            progress.checkCancelled();
            OutputFile out(outputOf(c.name), inner);
            if (c.source->fd() >= 0)
                out.copyFrom(c.source->fd(), 0, c.source->size());
            else
                out.write(c.source->all(), c.source->size()); // a remote input's companion
            stats.bytes += out.position();
            out.commit();
            if (remote) uploaded.push_back(outputOf(c.name));
            stats.copied.push_back(c.name);
        }
        MetadataPickler pickler;
        const std::string meta = pickler.run(plan, items, files);
        if (remote) {
            // the data objects are there: .metadata, last, is what DCP readers take as a complete checkpoint
            progress.checkCancelled();
            if (options.beforeCommit && !split) options.beforeCommit();
        }
        OutputFile metaFile(outputOf(DcpReader::kMetadataFile), inner);
        metaFile.write(meta.data(), meta.size());
        metaFile.commit();
        stats.bytes += meta.size();
        if (remote) {
            uploaded.clear();
        } else {
            progress.checkCancelled(); // the last moment to stop with nothing published
            std::error_code ec;
            if (fs::exists(outDir, ec)) fs::remove(outDir, ec); // the empty destination folder
            if (options.beforeCommit && !split) options.beforeCommit(); // a job's processes each checked above
            fs::rename(tmp->path, outDir, ec);
            if (ec)
                throw Error(
                    ErrorKind::Io, outDir, "cannot rename the finished temporary folder into place: " + ec.message());
            tmp->committed = true;
        }
        if (split) job.broadcast("dcp-commit", {});
        progress(1.0, "writing shards");
        return stats;
    } catch (const Error& e) {
        for (const auto& u : uploaded)
            removeObject(u);
        if (!split) throw;
        if (remote && job.isRoot()) removeObjectsUnder(outDir);
        // (only a temporary of this output's: "DIR/.NAME.tmp-...")
        if (!remote && job.rootLost() && tmpPath.rfind(temporaryNamePrefix(outDir), 0) == 0) {
            // rank 0 gone (killed): the temporary folder it made beside the output is left to us
            std::error_code ec;
            fs::remove_all(tmpPath, ec);
        }
        // a process stopped because another failed says so, naming that process
        if (job.failed() && e.kind() == ErrorKind::Cancelled && !progress.isCancelled())
            throw Error(ErrorKind::Io, outDir, "stopped: " + job.failure());
        throw;
    }
}

} // namespace optscope
