// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/dcp/dcp_writer.h"
#include "optscope/base/error.h"
#include "optscope/base/look_ahead.h"
#include "optscope/formats/dcp/dcp_reader.h"
#include "optscope/io/job.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/output_file.h"
#include "optscope/io/output_journal.h"
#include "optscope/io/remote_object.h"
#include "optscope/io/storage.h"
#include "optscope/pickle/pickle_emitter.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <unordered_set>

namespace fs = std::filesystem;

namespace optscope {

namespace {

/// the plan's items in .metadata order: DcpPlan::order, or its tensors, then its values
std::vector<std::pair<bool, size_t>> itemOrder(const DcpPlan& plan)
{
    if (!plan.order.empty()) return plan.order;
    std::vector<std::pair<bool, size_t>> o;
    for (size_t i = 0; i < plan.tensors.size(); ++i)
        o.push_back({true, i});
    for (size_t i = 0; i < plan.values.size(); ++i)
        o.push_back({false, i});
    return o;
}

/// why an existing empty output folder cannot be replaced by the finished temporary folder (the output is renamed
/// into place; before, these were found at that rename, after all the work), or "": the current folder, and a
/// mount point (the temporary is made next to it, on the parent's file system, and a mount point is busy)
std::string whyEmptyFolderCannotBeReplaced(const std::string& folder)
{
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) return {};
    const fs::path here = fs::canonical(folder, ec);
    if (ec) return {};
    if (here == fs::canonical(fs::current_path(ec), ec) && !ec)
        return "is the current folder, which the output cannot replace; name a new folder (e.g. -o out)";
    struct stat self
    {
    }, parent {};
    if (::stat(here.c_str(), &self) == 0 && ::stat(here.parent_path().c_str(), &parent) == 0
        && (self.st_dev != parent.st_dev || here == here.parent_path()))
        return "is a mount point, which the output cannot replace (it is written next to it, then renamed into "
               "place); name a new folder inside it";
    return {};
}

/// why an object-storage output prefix that holds objects is refused; data objects without a .metadata are what a
/// DCP output whose run was stopped before it completed leaves (objects are written where they stay, not renamed)
std::string whyPrefixIsTaken(const std::vector<std::string>& names)
{
    const auto isDataObject = [](const std::string& n) {
        return n.size() > 9 && n.rfind("__", 0) == 0 && n.compare(n.size() - 7, 7, ".distcp") == 0;
    };
    if (names.empty() || std::find(names.begin(), names.end(), ".metadata") != names.end()
        || !std::all_of(names.begin(), names.end(), isDataObject))
        return "already holds objects; choose a new output prefix (nothing there is overwritten)";
    return "already holds " + std::to_string(names.size()) + " DCP data object(s) (" + names.front()
        + (names.size() > 1 ? ", ..." : "")
        + ") and no .metadata: an unfinished output, left by a run stopped before it completed. If no run writes "
          "there now, remove them (aws s3 rm --recursive on the prefix), or choose a new output prefix (nothing "
          "there is overwritten)";
}

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
        const auto order = itemOrder(plan);
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
        const auto order = itemOrder(plan);
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
            // the job's other processes may still remove or create files in it as they stop (remove_all then fails
            // part-way, or the folder is not empty at its end): tried again for up to a second until it is gone
            std::error_code ec;
            for (int i = 0; i < 50; ++i) {
                fs::remove_all(path, ec);
                if (!fs::exists(path, ec)) break;
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        }
    }
    fs::path path;
    bool committed = false;
    TemporaryLock lock;
};

} // namespace

namespace {

/// For each of @p n leaves (pathOf(i); marksList(i): a tensor or a mapping, which makes a list holding it descended),
/// how many elements of its path name the item dcp.save keeps it in (keepDcpItemsWhole's rule)
template<typename PathOf, typename MarksList>
std::vector<uint32_t> dcpItemDepths(size_t n, const PathOf& pathOf, const MarksList& marksList)
{
    std::vector<uint32_t> depths(n);
    const auto hasIndex = [](const KeyPath& path) {
        return std::any_of(path.begin(), path.end(), [](const KeyPathElem& e) { return e.isIndex(); });
    };
    // prefixes[k] names the container path[0..k) (length-prefixed keys cannot run into each other)
    const auto prefixes = [](const KeyPath& path) {
        std::vector<std::string> out(path.size() + 1);
        for (size_t k = 0; k < path.size(); ++k)
            out[k + 1] = out[k] + std::to_string(path[k].key.size()) + (path[k].isIndex() ? '#' : ':')
                + std::string(path[k].key.view());
        return out;
    };
    // Only paths through a list or tuple can differ from the leaves. A list is descended when an element is a
    // tensor, a mapping or a descended list: walking each path up from its leaf, `marks` says whether what lies at
    // prefix k + 1 makes the list at prefix k descended (other elements' paths mark it on their own walk).
    std::unordered_set<std::string> descendedLists;
    for (size_t i = 0; i < n; ++i) {
        const KeyPath& path = pathOf(i);
        depths[i] = static_cast<uint32_t>(path.size());
        if (!hasIndex(path)) continue;
        const auto pre = prefixes(path);
        bool marks = marksList(i);
        for (size_t k = path.size(); k-- > 0;) {
            const KeyPathElem& elem = path[k]; // the container at prefix k: a dict (key), list or tuple (index)
            if (!elem.isIndex())
                marks = true;
            else if (elem.inTuple)
                marks = false;
            else if (marks)
                descendedLists.insert(pre[k]);
        }
    }
    for (size_t i = 0; i < n; ++i) {
        const KeyPath& path = pathOf(i);
        if (!hasIndex(path)) continue;
        const auto pre = prefixes(path);
        for (size_t k = 0; k < path.size(); ++k)
            if (path[k].isIndex() && (path[k].inTuple || !descendedLists.count(pre[k]))) {
                depths[i] = static_cast<uint32_t>(k);
                break;
            }
    }
    return depths;
}

} // namespace

namespace {

const KeyPath& itemPath(const DcpPlan& plan, std::pair<bool, size_t> item)
{
    return item.first ? plan.tensors[item.second].path : plan.values[item.second].path;
}

/// dcpItemDepths of the plan's items, in itemOrder; empty when every item is one that dcp.save makes
std::vector<uint32_t> splitItemDepths(const DcpPlan& plan, const std::vector<std::pair<bool, size_t>>& order)
{
    const auto pathOf = [&](size_t n) -> const KeyPath& { return itemPath(plan, order[n]); };
    const auto marksList = [&](size_t n) {
        const auto& [isTensor, i] = order[n];
        const PyValue* v = isTensor ? nullptr : plan.values[i].value; // (a Value of parts is a tuple: it marks none)
        return isTensor || (v && (v->kind == PyKind::Dict || v->kind == PyKind::Tensor));
    };
    std::vector<uint32_t> depths = dcpItemDepths(order.size(), pathOf, marksList);
    for (size_t n = 0; n < order.size(); ++n)
        if (depths[n] != pathOf(n).size()) return depths;
    return {};
}

} // namespace

void keepDcpItemsWhole(DcpPlan& plan)
{
    const auto order = itemOrder(plan);
    const std::vector<uint32_t> depths = splitItemDepths(plan, order);
    if (depths.empty()) return;
    const auto pathOf = [&](size_t n) -> const KeyPath& { return itemPath(plan, order[n]); };

    DcpPlan out;
    out.copies = std::move(plan.copies);
    out.leftOut = std::move(plan.leftOut);
    std::map<std::string, size_t> itemOf; // a kept-whole item's key -> its index in out.values
    for (size_t n = 0; n < order.size(); ++n) {
        const auto& [isTensor, i] = order[n];
        const KeyPath& path = pathOf(n);
        if (depths[n] == path.size()) {
            out.order.push_back({isTensor, isTensor ? out.tensors.size() : out.values.size()});
            if (isTensor)
                out.tensors.push_back(std::move(plan.tensors[i]));
            else
                out.values.push_back(std::move(plan.values[i]));
            continue;
        }
        const KeyPath itemPath(path.begin(), path.begin() + depths[n]);
        auto [at, added] = itemOf.emplace(joinKeyPath(itemPath), out.values.size());
        if (added) {
            out.order.push_back({false, out.values.size()});
            out.values.push_back({itemPath, nullptr, 0, {}, {}});
        }
        DcpPlan::Value::Part part;
        part.path.assign(path.begin() + depths[n], path.end());
        if (isTensor) {
            DcpPlan::Tensor& t = plan.tensors[i];
            part.tensor.dtype = t.dtype;
            part.tensor.shape = t.shape;
            part.tensor.requiresGrad = t.requiresGrad;
            part.tensor.produce = [box = std::move(t.produce), shape = t.shape](const ByteSink& sink) {
                box(std::vector<int64_t>(shape.size(), 0), shape, sink);
            };
        } else {
            part.value = plan.values[i].value;
            for (auto& storage : plan.values[i].storages)
                out.values[at->second].storages.push_back(std::move(storage));
        }
        out.values[at->second].parts.push_back(std::move(part));
    }
    plan = std::move(out);
}

uint64_t valueTensorBytes(const DcpPlan::Value& value)
{
    uint64_t bytes = 0;
    for (const auto& part : value.parts)
        if (!part.value) bytes += static_cast<uint64_t>(part.tensor.numel()) * dtypeSize(part.tensor.dtype);
    for (const auto& storage : value.storages)
        bytes += static_cast<uint64_t>(storage.bytes.numel()) * dtypeSize(storage.bytes.dtype);
    return bytes;
}

static DcpWriteStats writeDcpUnnamed(
    const DcpPlan& plan, const std::string& outDir, const Progress& progress, WriteOptions options);

DcpWriteStats writeDcp(const DcpPlan& plan, const std::string& outDir, const Progress& progress, WriteOptions options)
{
    try {
        return writeDcpUnnamed(plan, outDir, progress, std::move(options));
    } catch (const Error& e) {
        Job::current().reportFailure(e.what()); // the other processes of a job stop now, not at the next gather
        throw;
    }
}

/// a write inside the temporary folder failed (disk full, quota): the error names the output the user asked for
static Error namingTheOutput(const Error& e, const std::string& outDir)
{
    const std::string tmpMark = "/." + fs::path(outDir).filename().string() + ".tmp-";
    if (e.kind() == ErrorKind::Io && e.file().find(tmpMark) != std::string::npos)
        return Error(ErrorKind::Io, outDir,
            "writing " + fs::path(e.file()).filename().string() + ": " + e.detail()
                + " (nothing was written: the temporary folder is removed)");
    return e;
}

namespace {

/// The items of one rank's file, in FileSystemWriter's order: values first, then tensor chunks.
using FileItem = std::pair<const DcpPlan::Value*, std::pair<const DcpPlan::Tensor*, size_t>>;

/// removes every object under @p prefix (the job's output prefix, empty when the job began): what a process that
/// died after uploading left there
void removeObjectsUnder(const std::string& prefix, const std::string& writerTag)
{
    try {
        forgetRemoteListings();
        for (const auto& name : folderEntries(prefix))
            removeObject(childLocation(prefix, name), writerTag); // this run's: another writer's objects are kept
    } catch (const Error&) {
        // best effort: the failure being reported matters more
    }
    abortUploadsUnder(childLocation(prefix, "")); // a killed process's upload, open under the prefix
}

} // namespace

namespace {

/// One write of a DCP folder. Run as several processes (Job), every process builds the same plan; each writes the
/// rank files it owns (split by bytes) into one temporary folder (local output: rank 0 makes it, on storage all
/// processes share) or uploads them (object storage), and rank 0, once every process has said what it wrote where,
/// writes .metadata and publishes the folder. The files are byte-identical to those one process writes.
class DcpFolderWriting
{
public:
    DcpFolderWriting(const DcpPlan& plan, const std::string& outDir, const Progress& progress, WriteOptions options)
        : m_plan(plan)
        , m_outDir(folderLocation(outDir)) // "out/": the folder "out", not a name inside it
        , m_progress(progress)
        , m_options(std::move(options))
        , m_job(Job::current())
        , m_split(m_job.distributed())
        , m_remote(isUrl(outDir))
        , m_inner(innerOptions())
        , m_cancelScope(m_inner.cancelled) // a read stalled on a server ends too
    {
        planFiles();
        m_stats.leftOut = plan.leftOut;
    }

    DcpWriteStats run()
    {
        try {
            start();
            writeOwnedFiles();
            // every process checks what it read before it reports its part done
            if (m_split && m_options.beforeCommit) m_options.beforeCommit();
            if (m_split && !gatherLocations()) {
                m_job.broadcast("dcp-commit", {}); // throws unless rank 0 published the folder
                m_uploaded.clear();
                return m_stats;
            }
            copyCompanions();
            writeMetadataAndPublish();
            if (m_split) m_job.broadcast("dcp-commit", {});
            m_progress(1.0, "writing shards");
            return m_stats;
        } catch (const Error& caught) {
            const Error e = namingTheOutput(caught, m_outDir);
            // reported before the clean-up: removing the temporary folder makes the processes still writing into it
            // fail too, and the first report is the cause every process names
            if (e.kind() != ErrorKind::Cancelled) m_job.reportFailure(e.what());
            cleanUpAfter(e);
            throw e;
        }
    }

private:
    WriteOptions innerOptions() const
    {
        WriteOptions inner = m_options;
        inner.beforeCommit = nullptr;
        inner.cancelled = [this] { return m_progress.isCancelled() || m_job.failed(); };
        // the rank files go into the temporary folder start() makes, or under a prefix start() found empty
        inner.inFreshFolder = true;
        return inner;
    }

    /// one file per rank of the plan, its items in FileSystemWriter's order, and the process that writes it
    void planFiles()
    {
        for (const auto& v : m_plan.values)
            m_byRank[v.rank].push_back({&v, {nullptr, 0}});
        for (const auto& t : m_plan.tensors)
            for (size_t c = 0; c < t.chunks.size(); ++c)
                m_byRank[t.chunks.rank(c)].push_back({nullptr, {&t, c}});
        std::vector<uint64_t> fileBytes;
        for (const auto& [rank, list] : m_byRank) {
            m_files.push_back("__" + std::to_string(rank) + "_0.distcp");
            m_fileItems.push_back(&list);
            uint64_t b = 0;
            for (const auto& item : list) {
                if (const auto* t = item.second.first)
                    b += static_cast<uint64_t>(t->chunks.numelOf(item.second.second)) * dtypeSize(t->dtype);
                if (item.first) b += valueTensorBytes(*item.first);
            }
            fileBytes.push_back(b);
            m_totalBytes += b;
        }
        m_owner = m_split ? splitByWeight(fileBytes, m_job.size()) : std::vector<int>(m_files.size(), 0);
        m_locations.resize(m_files.size());
    }

    /// 1. the output is checked, and the temporary folder made, by one process; the others check they planned the
    /// same and see the folder. In a job, rank 0 writes nothing until every process has heard that the output is
    /// new (dcp-started): what may be removed after a failure is known to all of them first, and a process that
    /// never heard it removes nothing (it may be a user's checkpoint that rank 0 refused to write over)
    void start()
    {
        const std::string fingerprint = std::to_string(m_files.size()) + " files, " + std::to_string(m_totalBytes)
            + " tensor bytes, " + std::to_string(m_plan.tensors.size()) + " tensors, "
            + std::to_string(m_plan.values.size()) + " values";
        if (m_job.isRoot()) {
            refuseOutputOverInputs(m_outDir, m_options.inputs); // before the temporary folder is made next to it
            std::error_code ec;
            if (m_remote) {
                checkWritableUrl(m_outDir);
                const LocationKind k = locationKind(m_outDir);
                const std::vector<std::string> there
                    = k == LocationKind::Folder ? folderEntries(m_outDir) : std::vector<std::string>();
                if (k == LocationKind::File || !there.empty())
                    throw Error(ErrorKind::Io, displayLocation(m_outDir), whyPrefixIsTaken(there));
            } else {
                // the finished folder is renamed onto the name: a link there would become a folder (one to an empty
                // folder), or the rename would fail after all the work (a dangling one)
                refuseOutputOverSpecialFile(m_outDir, OutputShape::Folder);
                if (fs::exists(m_outDir, ec) && !(fs::is_directory(m_outDir, ec) && fs::is_empty(m_outDir, ec)))
                    throw Error(ErrorKind::Io, m_outDir,
                        "already exists and is not an empty folder; choose a new output folder");
                if (const std::string why = whyEmptyFolderCannotBeReplaced(m_outDir); !why.empty())
                    throw Error(ErrorKind::Io, m_outDir, why); // before the work: the rename at its end would fail
            }
            if (!m_remote) {
                m_tmp = std::make_unique<TempDir>(m_outDir);
                m_tmpPath = m_tmp->path.string();
            } else {
                std::random_device rd;
                m_inner.newObjectsTag = std::to_string(::getpid()) + "-" + std::to_string(rd()) + std::to_string(rd());
            }
            // a run killed from here on leaves objects only a later run can remove (output_journal.h)
            if (m_remote)
                journalOutput(JournalledOutput::Folder, m_outDir, m_inner.newObjectsTag, DcpReader::kMetadataFile);
            if (m_split) {
                m_job.broadcast("dcp-start", m_tmpPath + "\n" + m_inner.newObjectsTag + "\n" + fingerprint);
                m_job.gather("dcp-started", {});
            }
            m_outputIsOurs = true;
            return;
        }
        // the temporary folder (local), the run's tag for its objects (object storage), rank 0's plan
        const std::string started = m_job.broadcast("dcp-start", {});
        const size_t nl = started.find('\n'), nl2 = nl == std::string::npos ? nl : started.find('\n', nl + 1);
        m_tmpPath = started.substr(0, nl);
        if (nl2 == std::string::npos || started.substr(nl2 + 1) != fingerprint)
            throw Error(ErrorKind::Usage, m_outDir,
                "this process planned " + fingerprint + ", rank 0 "
                    + (nl2 == std::string::npos ? std::string("nothing") : started.substr(nl2 + 1))
                    + ": every process of the job must read the same checkpoint with the same options");
        m_inner.newObjectsTag = started.substr(nl + 1, nl2 - nl - 1);
        std::error_code ec;
        if (!m_remote && !fs::is_directory(m_tmpPath, ec))
            throw Error(ErrorKind::Io, m_outDir,
                "rank 0's temporary folder " + m_tmpPath
                    + " is not visible to this process: the output must be on a file system every process of the "
                      "job shares");
        m_outputIsOurs = true;
        m_job.gather("dcp-started", {});
    }

    /// where a file of the output is written: into the temporary folder, or straight to its object (streamed, it
    /// appears when its OutputFile commits; .metadata last makes the checkpoint whole)
    std::string outputOf(const std::string& name) const
    {
        const fs::path dir = m_tmp ? m_tmp->path : fs::path(m_tmpPath);
        return m_remote ? childLocation(m_outDir, name) : (dir / name).string();
    }

    /// 2. each process writes the rank files it owns
    void writeOwnedFiles()
    {
        m_written = std::make_unique<JobProgress>(m_job, "dcp-bytes", m_totalBytes, m_progress, "writing shards");
        for (size_t f = 0; f < m_files.size(); ++f)
            if (m_owner[f] == m_job.rank()) writeFile(f);
        m_written->flush();
    }

    void writeFile(size_t f)
    {
        OutputFile out(outputOf(m_files[f]), m_inner);
        const std::vector<FileItem>& itemsOfFile = *m_fileItems[f];
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
        // a value object that several keys share (through the pickle memo) is written once, every key's item
        // pointing at its bytes: written at each key, a subtree the reader kept shared would multiply
        std::unordered_map<const PyValue*, std::pair<uint64_t, uint64_t>> writtenValues;
        for (size_t k = 0; k < itemsOfFile.size(); ++k) {
            const auto& [value, tensorChunk] = itemsOfFile[k];
            m_progress.checkCancelled();
            ahead.before(k);
            ItemLocation loc;
            loc.file = static_cast<uint32_t>(f);
            loc.offset = out.position();
            StateTree tree;
            // (one object with nothing beside it in its item: a value of parts or storages is one key's own)
            const PyValue* shareable
                = value && value->value && value->value->pinned && value->parts.empty() && value->storages.empty()
                ? value->value
                : nullptr;
            if (shareable) {
                const auto written = writtenValues.find(shareable);
                if (written != writtenValues.end()) {
                    loc.value = value;
                    std::tie(loc.offset, loc.length) = written->second;
                    m_locations[f].push_back(loc);
                    ++m_stats.valueItems;
                    continue;
                }
            }
            if (value) {
                loc.value = value;
                if (value->value) tree.setValue({}, value->value);
                for (const auto& part : value->parts) {
                    if (part.value)
                        tree.setValue(part.path, part.value);
                    else
                        tree.setTensor(part.path, part.tensor);
                }
                for (const auto& storage : value->storages)
                    tree.addStorage(storage.storage, storage.bytes);
                ++m_stats.valueItems;
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
                ++m_stats.tensorItems;
            }
            Progress itemProgress;
            itemProgress.cancelled = m_inner.cancelled;
            // a value item is unpickled by DCP's loader with weights_only=False (torch 2.6 load_bytes): objects
            // (a torchtitan BytesIO, Megatron-LM's args Namespace) are written back as they were pickled
            const WriteStats ws = TorchSaveWriter::writeArchive(tree, out, "archive", itemProgress, true);
            m_written->add(ws.tensorBytes);
            loc.length = out.position() - loc.offset;
            if (shareable) writtenValues.emplace(shareable, std::make_pair(loc.offset, loc.length));
            m_locations[f].push_back(loc);
        }
        m_stats.bytes += out.position();
        out.commit();
        if (m_remote) m_uploaded.push_back(outputOf(m_files[f]));
        ++m_stats.files;
    }

    /// 3. rank 0 learns where every item went: each process sends, per file it owns, each item's offset and length
    /// (the items themselves are known to every process from the plan), and its totals. Returns whether this
    /// process goes on to publish (rank 0)
    bool gatherLocations()
    {
        std::vector<uint64_t> part {m_stats.bytes, m_stats.files, m_stats.tensorItems, m_stats.valueItems};
        for (size_t f = 0; f < m_files.size(); ++f) {
            if (m_owner[f] != m_job.rank()) continue;
            part.push_back(f);
            for (const auto& loc : m_locations[f]) {
                part.push_back(loc.offset);
                part.push_back(loc.length);
            }
        }
        const std::vector<std::string> parts
            = m_job.gather("dcp-files", wordsToPayload(part), [&] { m_written->showTotal(); });
        if (!m_job.isRoot()) return false;
        for (size_t p = 1; p < parts.size(); ++p) {
            const std::vector<uint64_t> w = wordsFromPayload(parts[p]);
            if (w.size() < 4) throw Error(ErrorKind::Format, m_outDir, "rank " + std::to_string(p) + " sent no part");
            m_stats.bytes += w[0];
            m_stats.files += w[1];
            m_stats.tensorItems += w[2];
            m_stats.valueItems += w[3];
            size_t at = 4;
            while (at < w.size()) {
                const size_t f = w[at++];
                if (f >= m_files.size() || m_owner[f] != static_cast<int>(p)
                    || at + 2 * m_fileItems[f]->size() > w.size())
                    throw Error(ErrorKind::Format, m_outDir,
                        "rank " + std::to_string(p) + " reported items of a file it does not own");
                for (const auto& [value, tensorChunk] : *m_fileItems[f]) {
                    ItemLocation loc;
                    loc.file = static_cast<uint32_t>(f);
                    loc.value = value;
                    loc.tensor = tensorChunk.first;
                    loc.chunk = static_cast<uint32_t>(tensorChunk.second);
                    loc.offset = w[at++];
                    loc.length = w[at++];
                    m_locations[f].push_back(loc);
                }
            }
        }
        return true;
    }

    /// 4a. rank 0: the companion files (Fabric's meta.pt), copied as they are
    void copyCompanions()
    {
        for (const auto& c : m_plan.copies) {
            m_progress.checkCancelled();
            OutputFile out(outputOf(c.name), m_inner);
            if (c.source->fd() >= 0)
                out.copyFrom(c.source->fd(), 0, c.source->size());
            else
                out.write(c.source->all(), c.source->size()); // a remote input's companion
            m_stats.bytes += out.position();
            out.commit();
            if (m_remote) m_uploaded.push_back(outputOf(c.name));
            m_stats.copied.push_back(c.name);
        }
    }

    /// 4b. rank 0: .metadata, and the folder published (renamed into place; on object storage, .metadata last is
    /// what DCP readers take as a complete checkpoint)
    void writeMetadataAndPublish()
    {
        std::vector<ItemLocation> items;
        for (auto& l : m_locations)
            items.insert(items.end(), l.begin(), l.end());
        MetadataPickler pickler;
        const std::string meta = pickler.run(m_plan, items, m_files);
        if (m_remote) {
            m_progress.checkCancelled();
            if (m_options.beforeCommit && !m_split) m_options.beforeCommit();
        }
        OutputFile metaFile(outputOf(DcpReader::kMetadataFile), m_inner);
        metaFile.write(meta.data(), meta.size());
        metaFile.commit();
        m_stats.bytes += meta.size();
        if (m_remote) {
            m_uploaded.clear();
            if (m_job.isRoot()) journalSettled(m_outDir, m_inner.newObjectsTag); // whole
            return;
        }
        m_progress.checkCancelled(); // the last moment to stop with nothing published
        std::error_code ec;
        if (fs::exists(m_outDir, ec)) fs::remove(m_outDir, ec); // the empty destination folder
        if (m_options.beforeCommit && !m_split) m_options.beforeCommit(); // a job's processes each checked above
        fs::rename(m_tmp->path, m_outDir, ec);
        if (ec)
            throw Error(
                ErrorKind::Io, m_outDir, "cannot rename the finished temporary folder into place: " + ec.message());
        m_tmp->committed = true;
    }

    /// what this process wrote goes (the temporary folder goes with m_tmp); in a job, what a lost rank 0 left too
    void cleanUpAfter(const Error& e)
    {
        for (const auto& u : m_uploaded)
            removeObject(u, m_inner.newObjectsTag);
        // rank 0 (or, rank 0 lost, every other process) removes what any process wrote: never before the output
        // was found new (an existing prefix holds a user's checkpoint, which rank 0 refused to write over)
        if (m_split && m_remote && m_outputIsOurs && (m_job.isRoot() || m_job.rootLost()))
            removeObjectsUnder(m_outDir, m_inner.newObjectsTag);
        if (m_remote && m_outputIsOurs && m_job.isRoot()) journalSettled(m_outDir, m_inner.newObjectsTag); // undone
        if (!m_split) return;
        // (only a temporary of this output's: "DIR/.NAME.tmp-...")
        if (!m_remote && m_job.rootLost() && m_tmpPath.rfind(temporaryNamePrefix(m_outDir), 0) == 0) {
            // rank 0 gone (killed): the temporary folder it made beside the output is left to us
            std::error_code ec;
            fs::remove_all(m_tmpPath, ec);
        }
        // a process stopped because another failed says so, naming that process
        if (m_job.failed() && e.kind() == ErrorKind::Cancelled && !m_progress.isCancelled())
            throw Error(ErrorKind::Io, m_outDir, "stopped: " + m_job.failure());
    }

    const DcpPlan& m_plan;
    const std::string m_outDir;
    const Progress& m_progress;
    const WriteOptions m_options;
    Job& m_job;
    const bool m_split; ///< a process of a job
    const bool m_remote; ///< to object storage
    WriteOptions m_inner; ///< for each file written: cancelled also when another process failed; this run's tag
    const CancelScope m_cancelScope;
    std::map<int, std::vector<FileItem>> m_byRank;
    std::vector<std::string> m_files; ///< the rank files' names
    std::vector<const std::vector<FileItem>*> m_fileItems; ///< per file
    std::vector<int> m_owner; ///< per file: the process that writes it
    uint64_t m_totalBytes = 0;
    std::unique_ptr<TempDir> m_tmp; ///< rank 0's temporary folder (local output)
    std::string m_tmpPath; ///< the temporary folder (a process of a job: rank 0's)
    std::vector<std::vector<ItemLocation>> m_locations; ///< per file: where its items went
    std::unique_ptr<JobProgress> m_written;
    std::vector<std::string> m_uploaded; ///< by this process, removed again unless the folder is published
    bool m_outputIsOurs = false; ///< the output was found new, and (a job) every process knows it
    DcpWriteStats m_stats;
};

} // namespace

static DcpWriteStats writeDcpUnnamed(
    const DcpPlan& plan, const std::string& outDir, const Progress& progress, WriteOptions options)
{
    if (!splitItemDepths(plan, itemOrder(plan)).empty()) {
        DcpPlan whole = plan;
        keepDcpItemsWhole(whole);
        return DcpFolderWriting(whole, outDir, progress, std::move(options)).run();
    }
    return DcpFolderWriting(plan, outDir, progress, std::move(options)).run();
}

} // namespace optscope
