// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: the index of a DCP `.metadata` file (see dcp_reader.h for the format) as flat arrays, built in one
// streaming pass over the pickle.
//
// A 1,024-rank FSDP checkpoint of a 70B model lists about 2.2 million chunks in a 300 MB pickle of some 30 million
// memo entries. Unpickled into a generic object graph that is ~25 objects and ~4.7 KB per chunk. This reader instead
// runs a small pickle machine that knows the DCP classes (Metadata, TensorStorageMetadata, ChunkStorageMetadata,
// TensorProperties, BytesStorageMetadata, MetadataIndex, _StorageInfo, torch.Size): each chunk becomes a record and
// its offsets/sizes a few int64s as soon as its BUILD is seen, and the temporary dicts and tuples it was made of are
// reused. A first pass over the opcodes finds which memo entries are ever read back (a handful: class names, the
// keys 'offsets'/'sizes'), so only those are kept.
//
// It reads only what DCP writes. On anything else (another class, an opcode DCP never emits, a field of an unexpected
// type) it gives up and returns nothing, and the caller unpickles the file with the general pickle machine, which
// reports every oddity precisely: this reader is a fast path, never the only judge of a file.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"
#include "optscope/model/chunk_table.h"
#include "optscope/model/dtype.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace optscope {

class ByteSource;

struct DcpMetadata
{
    enum class ItemKind : unsigned char { Tensor, Bytes, Unknown };
    /// one state_dict_metadata entry
    struct Item
    {
        std::string fqn;
        KeyPath path; ///< from planner_data; empty when there is none
        ItemKind kind = ItemKind::Unknown;
        std::optional<DType> dtype;
        bool shapeOk = false;
        std::vector<int64_t> shape;
        uint64_t firstChunk = 0; ///< into chunks
        uint64_t chunkCount = 0;
        const PyValue* value = nullptr; ///< Unknown: the metadata object (general reader only)
        std::string unknownText; ///< Unknown: how to name it
    };
    /// one ChunkStorageMetadata; offsets then sizes at dims[dimsAt]
    struct Chunk
    {
        uint64_t dimsAt = 0;
        uint32_t ndim = 0;
        bool ok = true; ///< false: offsets/sizes unreadable (general reader only; text in chunkErrors)
    };
    /// one storage_data entry: MetadataIndex(fqn, offset) -> _StorageInfo(relative_path, offset, length)
    struct Storage
    {
        uint32_t fqn = 0; ///< into storageFqns
        uint32_t file = 0; ///< into files
        bool hasOffset = false; ///< a tensor chunk (BYTE_IO items have no offset)
        bool hasTransforms = false;
        uint32_t ndim = 0;
        uint64_t offsetsAt = 0; ///< into dims
        uint64_t offset = 0;
        uint64_t length = 0;
    };

    int protocol = 0;
    std::string version;
    std::vector<Item> items;
    std::vector<Chunk> chunks;
    std::vector<std::pair<uint64_t, std::string>> chunkErrors; ///< chunk index, message
    std::vector<int64_t> dims;
    bool hasStorageData = false;
    std::vector<Storage> storage;
    std::vector<std::string> storageFqns;
    std::shared_ptr<FileNameTable> files = std::make_shared<FileNameTable>();
    std::vector<std::string> storageErrors; ///< malformed storage_data entries
};

class DcpMetadataReader
{
public:
    /// the index of @p data (a whole .metadata file), or nothing when the pickle holds anything this reader does not
    /// know (then unpickle it generally); throws Error(Cancelled) from @p progress, Error(Limit) past the caps
    static std::optional<DcpMetadata> read(const ByteSource& file, const Progress& progress = {});
    /// the general path: the index from the unpickled object graph (any pickle read() gave up on); malformed parts
    /// become errors in the index, so that the rest can still be browsed; throws Error(Format) without a Metadata
    static DcpMetadata fromGraph(const PyValue* metadata, const std::string& metaPath, int protocol);
};

} // namespace optscope
