// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// One checkpoint model for every format. Entries are keyed as DCP's flatten_state_dict keys them: the path from the
// root (dict keys as strings, list indices as numbers) joined with '.'. A key is only a label; the path is the
// truth (FQNs contain dots, so a key is never split to recover the path).
//
// A tensor entry has its global shape, dtype and chunks: where each slice of the tensor lives on disk (a plain
// torch.save tensor is one chunk covering everything). Any other entry holds a value from the inert pickle graph.
//
// A Checkpoint is immutable once a reader returns it; share it as std::shared_ptr<const Checkpoint>.

#include "optscope/base/compact_string.h"
#include "optscope/base/lazy_box.h"
#include "optscope/base/rare_string.h"
#include "optscope/model/chunk_table.h"
#include "optscope/model/dtype.h"
#include "optscope/model/py_value.h"
#include "optscope/model/reader_code.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace optscope {

class ByteSource;

enum class CheckpointFormat {
    TorchSave,
    Dcp,
    Safetensors, ///< a .safetensors file, or a sharded set with its index
    HfTrainer, ///< a Hugging Face Trainer checkpoint-N/ folder (safetensors model + optimizer.pt + scheduler.pt ...)
    DeepSpeedZero, ///< a DeepSpeed ZeRO 1/2/3 global_stepN/ folder (or its parent with `latest`)
    DeepSpeedUniversal, ///< a DeepSpeed universal checkpoint (zero/<param>/fp32.pt, ...)
    MegatronDist, ///< a Megatron-Core dist_checkpointing folder (torch_dist: DCP + metadata.json + common.pt)
    TorchSaveRanks, ///< per-rank torch.save files of one sharded state dict (rank0.pt, rank1.pt, ...)
};

/// "torch_save", "dcp", "safetensors", "hf_trainer", "deepspeed_zero", "deepspeed_universal" or "megatron_dist", as in
/// `inspect --json`
const char* checkpointFormatName(CheckpointFormat format);

/// One step of a key path: a dict key (string) or a list index.
struct KeyPathElem
{
    /// the largest list index a path can hold: 2^62 - 1 (63 bits, with inTuple beside it: a 100k-entry checkpoint keeps
    /// 400k elements, 32 bytes each rather than 56)
    static constexpr int64_t kMaxIndex = (int64_t(1) << 62) - 1;
    KeyPathElem()
        : index(-1)
        , inTuple(false)
    { }
    CompactString key; ///< dict key, as str(key)
    const PyValue* keyValue = nullptr; ///< the original dict key object (int keys stay ints), if known
    int64_t index : 63; ///< list/tuple index when >= 0 (at most kMaxIndex)
    bool inTuple : 1; ///< the index is into a tuple, not a list (torch.save sources only)
    bool isIndex() const { return index >= 0; }
    static KeyPathElem fromKey(std::string_view k)
    {
        KeyPathElem e;
        e.key = CompactString(k);
        return e;
    }
    /// @p i in [0, kMaxIndex]; readers check indices from a file against it
    static KeyPathElem fromIndex(int64_t i)
    {
        KeyPathElem e;
        e.index = i;
        e.key = std::to_string(i);
        return e;
    }
    bool operator==(const KeyPathElem& o) const { return index == o.index && key == o.key; }
};
using KeyPath = std::vector<KeyPathElem>;

/// '.'-joined path, as DCP forms flat keys
std::string joinKeyPath(const KeyPath& path);

/// a TensorEntry::subclass that is a DTensor ("torch.distributed.tensor.DTensor", the older
/// "torch.distributed._tensor.api.DTensor")
bool isDTensorSubclass(std::string_view subclass);

/// A tensor's lazy bits (torch.save's tensor metadata "conj" and "neg", set by conj() of a complex tensor and by
/// _neg_view): the stored bytes are the unresolved ones, and torch.load gives a tensor that applies the bits wherever
/// its values are used. ChunkReader::resolve applies them too, so every read sees the values torch.load gives.
constexpr uint8_t kLazyConj = 1;
constexpr uint8_t kLazyNeg = 2;
/// "" when a read can apply @p lazyBits to elements of @p dtype, else why not (a conj bit on a real dtype; a neg bit
/// on a type without negation in PyTorch: float8, bool, quantized, packed)
std::string lazyBitsUnreadable(uint8_t lazyBits, DType dtype);
/// what is said of a tensor saved with @p lazyBits (check's lazy-bit finding, the read's error when unreadable)
std::string lazyBitText(uint8_t lazyBits, DType dtype);

/// "[2, 3]": how messages and reports write a shape
std::string shapeText(const std::vector<int64_t>& shape);

struct TensorEntry
{
    std::vector<int64_t> shape; ///< global shape
    ChunkTable chunks;
    RareString subclass; ///< DTensor / ShardedTensor class path, empty for plain tensors
    RareString placements; ///< DTensor placements, e.g. "Shard(0)"
    DType dtype = DType::Unknown;
    bool requiresGrad = false;
    bool isParameter = false;
    /// a ShardedTensor of which this file holds no local shard while its metadata lists the shards, which cover
    /// it, on other ranks (a rank torch.chunk leaves without rows): its data is in the other ranks' files
    bool shardsElsewhere = false;
    /// its data lies in a file of the checkpoint that is missing (a ZeRO rank's optimizer file, whose partition held
    /// all of it): no chunk, but no meta tensor either; check reports its region as a gap, beside the reader's error
    /// naming the file
    bool inMissingFile = false;
    /// saved from a lazy conj() or _neg_view view (kLazyConj | kLazyNeg): torch.load applies the bits to the stored
    /// bytes, and so does every read (ChunkReader::resolve). DCP items carry the bits in their own pickle: the chunk's
    /// read finds them (ChunkData::lazyBits)
    uint8_t lazyBits = 0;
    int64_t numel() const;
    uint64_t nbytes() const;
    /// no chunk at all although it has elements: a meta-device tensor, or a subclass whose data the file does not
    /// hold (shardsElsewhere says when other ranks' files hold it). Nothing can be read, hashed, compared or
    /// resharded
    bool storesNoData() const { return chunks.empty() && numel() > 0; }
    /// saved without its data and no other file holds it (a meta-device tensor): the tensor-without-data rule, which
    /// a reader warns of and check reports
    bool withoutData() const { return storesNoData() && !shardsElsewhere && !inMissingFile; }
    /// what tensor-without-data says of it, wherever it is reported
    std::string withoutDataText() const;
    /// distinct ranks holding chunks, ascending (-1 if unknown)
    std::vector<int> ranks() const;
};

enum class EntryKind : unsigned char { Tensor, Value };

struct Entry
{
    std::string key; ///< joinKeyPath(path)
    KeyPath path;
    LazyBox<TensorEntry> tensor; ///< kind == Tensor (a value entry leaves it unallocated)
    const PyValue* value = nullptr; ///< kind == Value (never null then)
    RareString error; ///< set when the entry's data cannot be read (value is then None)
    /// a value holding tensors or storages that are not entries of their own (a sparse or quantized tensor, a tensor
    /// inside an object): the checkpoint's file their bytes are in (PyStorageInfo::recordOffset), for diff to compare
    RareString valueFile;
    EntryKind kind = EntryKind::Value;
    /// valueFile's storages hold their elements big-endian (a torch.save written on such a machine)
    bool valueBigEndian = false;
    bool isTensor() const { return kind == EntryKind::Tensor; }
};

struct CheckpointWarning
{
    ReaderCode code = ReaderCode::BadMetadata; ///< readerCodeName gives its stable text
    std::string message;
    std::string key; ///< entry key, empty if the warning is not about one entry
    /// severity "error": part of the checkpoint cannot be read (missing file, range past the end, bad value);
    /// severity "warning": readable, but worth knowing (unsafe globals, odd layouts)
    bool isError = false;
    std::string loadError; ///< what the library that loads it raises because of it (its own text), if known
    std::string fix; ///< what to do about it, if known
    std::string classPath; ///< unsafe-global: the class or function path ("deepspeed.runtime....LossScaler")
    std::string file; ///< the file it is about, relative to the checkpoint's root (missing-file, ...), if any
};

/// Where one parameter lies in a format's flat per-rank partitions (DeepSpeed ZeRO), for the FQN mapping; the
/// parameter's chunks say the same per element range.
struct FlatPartitionSlot
{
    std::string fqn;
    int buffer = -1; ///< the flat buffer holding it (ZeRO-1/2: param group; ZeRO-3: sub-group)
    std::string bufferName; ///< "group 0", "sub-group 1"
    int64_t offset = 0; ///< first element in the buffer (ZeRO-1/2: the padded flat group; ZeRO-3: each rank's part)
    std::string note; ///< which ranks hold which range, padding
};

/// Opens and caches the memory maps of a checkpoint's data files. Thread-safe. At most openFileBudget() local files
/// stay open in the process, all checkpoints together (a 4,096-rank DCP ran out of descriptors): past it the least
/// recently opened one is closed, once its readers let go of it, and checked unchanged when it is opened again and
/// by checkUnchanged(). hold() keeps every file open when they fit in the budget.
class CheckpointFiles
{
public:
    /// @p maxOpen: the budget of local files open in the process (0: openFileBudget())
    explicit CheckpointFiles(std::string rootDir, size_t maxOpen = 0);
    ~CheckpointFiles();
    CheckpointFiles(const CheckpointFiles&) = delete;
    CheckpointFiles& operator=(const CheckpointFiles&) = delete;
    /// @p relative to the root; throws Error(Io) naming the file if it cannot be mapped
    std::shared_ptr<const ByteSource> open(const std::string& relative) const;
    /// open() of a file read as one whole torch.save archive: a remote one whose records another tool deflated is
    /// inflated as a local one is when opened (zip_inflate.h), and read from that copy from now on
    std::shared_ptr<const ByteSource> openArchive(const std::string& relative) const;
    /// seed the cache with a file already mapped (the reader's own)
    void add(const std::string& relative, std::shared_ptr<const ByteSource> file) const;
    const std::string& rootDir() const { return m_root; }
    std::string absolute(const std::string& relative) const;
    /// the size the reader saw when it indexed the checkpoint: a later open() of another size throws "changed"
    void expectSize(const std::string& relative, uint64_t size) const;

    /// throws Error(Io) naming the file when any file mapped so far changed, vanished or was replaced since it was
    /// read (ByteSource::checkUnchanged): called after long reads and before an output is committed. Once held, only
    /// a change of the bytes themselves counts (ByteSource::checkContentUnchanged)
    void checkUnchanged() const;
    /// maps every file the reader named (and sized) that is not mapped yet, and from now on reads them from those
    /// maps whatever their paths come to name: a watched run's step stays readable, as it was, after the run removes
    /// or replaces it (a Trainer's save_total_limit). Files that cannot be mapped are left to their first read; remote
    /// objects are pinned to their ETags already. A checkpoint of more files than the budget leaves (openFileBudget)
    /// is not mapped whole: its closed files are checked by path, and one the run removed is "removed while being read"
    void hold() const;
    /// the same, but only when a mapped read faulted somewhere in the process since the last call (one atomic load
    /// otherwise): cheap enough to call after every block
    void checkFaults() const;
    /// every file mapped or sized so far, as absolute() paths: what an output must not overwrite
    std::vector<std::string> knownFiles() const;
    /// readScalar's window over a remote checkpoint's one-element tensors: the entries before this index were asked
    /// for ahead
    size_t scalarsAskedBefore() const { return m_scalarsAsked.load(); }
    /// moves that index from @p seen to @p upTo; false when another thread moved it meanwhile (it asks instead)
    bool askScalarsBefore(size_t seen, size_t upTo) const { return m_scalarsAsked.compare_exchange_strong(seen, upTo); }

private:
    std::string m_root;
    mutable std::mutex m_mutex;
    struct OpenFile
    {
        std::shared_ptr<const ByteSource> source;
        std::list<const std::string*>::iterator lru; ///< its place in m_lru; a remote file's is m_lru.end()
    };
    /// the files open now; at most m_maxOpen local ones unless held
    mutable std::unordered_map<std::string, OpenFile> m_files;
    /// the local ones among them (their keys in m_files), least recently opened first: what the budget closes.
    /// All checkpoints' together are counted against m_maxOpen (g_localFilesOpen)
    mutable std::list<const std::string*> m_lru;
    /// local files closed to stay within m_maxOpen: how to check each is still the file that was read
    mutable std::unordered_map<std::string, std::function<void()>> m_closed;
    size_t m_maxOpen = 0;
    mutable std::atomic<bool> m_keepOpen {false};
    mutable std::unordered_map<std::string, uint64_t> m_expectedSizes;
    mutable std::atomic<uint64_t> m_faultsSeen {0};
    mutable std::atomic<size_t> m_scalarsAsked {0};
    mutable std::atomic<bool> m_held {false};
};

/// How a reader named a parameter that its files key otherwise (an optimizer's integer id): the reader re-keys the
/// entries by FQN and records the rule here, so that the FQN mapping (ParamTable) can show the original id and how
/// sure the name is.
struct ParamOrigin
{
    std::string optimizer; ///< the optimizer state dict's root key ("optim")
    std::string fqn; ///< the name the entries now carry
    std::string id; ///< the key in the file ("3")
    std::string how; ///< the rule (ParamTable's nameSourceText)
    std::string confidence; ///< ParamTable's confidenceText
};

/// A file of the checkpoint beside its format's own index that a reader folds into the entries, and that a writer of
/// the same layout copies byte for byte rather than re-encoding (Lightning Fabric's meta.pt beside a DCP folder: the
/// user's state that is not a module or optimizer, which Fabric's loader reads from that file on its own).
struct CompanionFile
{
    std::string file; ///< relative to the checkpoint's root
    std::vector<std::string> keys; ///< the top-level keys of the entries read from it
};

/// What a DeepSpeed ZeRO run saved with that its loader needs again: facts of that format alone (Checkpoint::zero)
struct ZeroRunFacts
{
    int stage = 0; ///< 1-3
    int dataParallelSize = 0; ///< the data-parallel world size the run saved with
};

class Checkpoint
{
public:
    CheckpointFormat format = CheckpointFormat::TorchSave;
    std::string path; ///< as opened (file or directory)
    std::vector<Entry> entries; ///< in file order
    std::vector<CheckpointWarning> warnings;
    int pickleProtocol = 0; ///< torch.save: data.pkl protocol; DCP: .metadata protocol
    std::string formatDetail; ///< "zip, prefix 'optim/'", "legacy (pre-1.6)", "DCP version 1.0.0", ...
    /// torch.save: the whole unpickled object (its tensor leaves emptied of sizes and strides, which the entries
    /// hold); DCP: the Metadata object
    const PyValue* root = nullptr;
    std::vector<ParamOrigin> paramOrigins; ///< parameters a reader named (Hugging Face Trainer folders)
    std::vector<CompanionFile> companionFiles; ///< files copied as they are by a writer of the same layout
    std::vector<FlatPartitionSlot> flatSlots; ///< parameters in flat partitions (DeepSpeed ZeRO); empty otherwise
    /// DeepSpeed ZeRO's (DeepSpeedZeroReader); empty for every other format
    std::optional<ZeroRunFacts> zero;

    std::shared_ptr<PyArena> arena; ///< owns every PyValue above
    std::shared_ptr<CheckpointFiles> files;

    /// entry by key, or null
    const Entry* find(std::string_view key) const;
    /// the companion file @p e was read from (its top-level key is one of the file's), or null
    const CompanionFile* companionOf(const Entry& e) const;
    /// must be called once entries are complete (readers do it); returns the positions of the entries whose key an
    /// earlier entry has (find() gives the first of them)
    std::vector<size_t> buildIndex();
    /// sum of tensor bytes
    uint64_t tensorBytes() const;
    size_t tensorCount() const;
    /// distinct ranks holding chunks, ascending (-1 first where a chunk's rank is unknown): one pass over the chunk
    /// tables that makes nothing per chunk (2.2 million chunks at 1,024 ranks)
    std::vector<int> ranks() const;
    /// any warning of severity error
    bool hasErrors() const;
    /// why some data the checkpoint's own metadata or index names was not read (a file missing, not a plain file, or
    /// outside the folder; a shard that does not hold the tensor its index places there): the first such error
    /// warning's message, "" when none. What is written, verified or called equal from it would be part of it.
    std::string missingDataReason() const;

private:
    /// open-addressing table of entry positions + 1 (0: free) in the low 32 bits, keyed by the entry's key, with the
    /// key hash's high 32 bits above them: indices rather than copies of the keys (100k keys would be stored twice),
    /// valid in a copy of the checkpoint; a probe compares keys only where the hash bits agree (each compare of 1.5M
    /// keys reached into an entry and its key: a third of reading a long trainer_state log)
    std::vector<uint64_t> m_index;
};

using CheckpointPtr = std::shared_ptr<const Checkpoint>;

} // namespace optscope
