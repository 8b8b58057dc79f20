// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: turns unpickled leaves into Checkpoint entries and attributes warnings to keys. Shared by the readers.

#include "optscope/base/progress.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/io/mapped_file.h"
#include "optscope/model/checkpoint.h"
#include "optscope/pickle/pickle_machine.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

namespace optscope {

class CheckpointBuilder
{
public:
    explicit CheckpointBuilder(Checkpoint& cp)
        : m_cp(cp)
    { }

    /// A leaf from an unpickled archive: a tensor becomes a tensor entry whose chunks point into @p fileRel
    /// (relative to the checkpoint root), anything else a value entry.
    /// @p shared: the value may be reached again (FlattenedLeaf::shared), so consumeGraphTensors() leaves it alone
    void addLeaf(KeyPath path, const PyValue* value, const TorchSaveArchive& archive, const std::string& fileRel,
        const std::string& where, bool shared = true);
    /// @p storageFile: the file (relative to the root) whose bytes the value's storages point into, kept when it holds
    /// one (Entry::valueFile)
    void addValue(KeyPath path, const PyValue* value, const std::string& storageFile = {});
    void addTensor(KeyPath path, TensorEntry tensor);
    void addPickleWarnings(const std::vector<PickleWarning>& warnings);
    void warn(ReaderCode code, std::string message, std::string key = {}, bool isError = false);
    void error(ReaderCode code, std::string message, std::string key = {})
    {
        warn(code, std::move(message), std::move(key), true);
    }
    /// A torch.save file of the checkpoint's folder (@p fileRel, relative to its root) as entries: unpickled inertly,
    /// flattened as DCP's flatten_state_dict would, each leaf under @p prefix (empty: at the top level), its tensors'
    /// chunks pointing into the file. The one way a reader folds a separate torch.save file into its checkpoint
    /// (a Trainer's optimizer.pt and scheduler.pt, Fabric's meta.pt). Leaves for which @p skip holds are not added.
    /// Returns the unpickled root; throws Error naming the file when it is empty or malformed.
    const PyValue* addTorchSaveFile(const std::string& fileRel, const KeyPath& prefix, const Progress& progress,
        const std::function<bool(const KeyPath&)>& skip = {});
    /// a data file the checkpoint names that cannot be read as one of its files (statInside): missing-file,
    /// path-outside-checkpoint or special-file, an error naming @p fileRel (the warning's file) and @p namedBy
    void memberProblem(
        const MemberStat& m, const std::string& fileRel, const std::string& namedBy, const std::string& detail = {});
    /// The caller reads the graph's tensor leaves only through the entries (TorchSaveReader::open): addLeaf then moves
    /// the sizes of a tensor reached only once into its entry and frees its strides, two allocations per tensor fewer.
    void consumeGraphTensors() { m_consumeGraphTensors = true; }
    /// attributes unsafe globals to the entries that hold them, builds the key index
    void finish();

    /// chunk of a plain tensor stored in @p archive
    static TensorChunk chunkFromTensor(
        const PyTensorInfo& t, const TorchSaveArchive& archive, const std::string& fileRel, const std::string& where);

private:
    /// counts the entry's key path against kMaxKeyPathBytes; throws Error(Limit) past it
    void chargeKeyPath(const KeyPath& path);
    Checkpoint& m_cp;
    std::shared_ptr<FileNameTable> m_fileNames = std::make_shared<FileNameTable>();
    std::map<std::string, std::string> m_unsafeGlobals; ///< class path -> message
    LocatedStorageReach m_locatedStorage; ///< which values hold bytes of their archive (Entry::valueFile)
    uint64_t m_keyPathBytes = 0;
    bool m_consumeGraphTensors = false;
};

/// dimensions >= 0 and numel * element size <= INT64_MAX, as PyTorch requires of a tensor: every size computation
/// downstream (numel, bytes, chunk bounds) relies on it
bool shapeIsRepresentable(const std::vector<int64_t>& shape, size_t elementSize);

/// A ShardedTensor of which the file holds no local shard, while its metadata lists shards (of other ranks) that lie
/// in @p shape and add up to it: what a rank without rows saves (FSDP1's SHARDED_STATE_DICT, 4 rows on 3 ranks)
bool metadataShardsCover(const PyTensorWrapperInfo& wrapper, const std::vector<int64_t>& shape);

/// unknown (unsafe) global class paths reachable from @p v
void collectUnsafeGlobals(const PyValue* v, std::set<std::string>& out);
/// the same, skipping values in @p seen (and adding those it visits): one walk over values shared by many entries
void collectUnsafeGlobals(const PyValue* v, std::set<std::string>& out, std::unordered_set<const PyValue*>& seen);

} // namespace optscope
