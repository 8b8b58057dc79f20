// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"

#include <memory>
#include <vector>

namespace optscope {

class ByteSource;

/// The bytes of one chunk, located in its file (zero-copy from a memory map; a remote object fetches them first).
struct ChunkData
{
    std::shared_ptr<const ByteSource> file; ///< keeps the bytes alive
    /// a remote chunk's own copy of its bytes (storage points into it); null when storage points into the file
    std::shared_ptr<const uint8_t[]> owned;
    const uint8_t* storage = nullptr; ///< first byte of the storage (element 0)
    /// a remote chunk located only (ChunkReader::resolve with deferRemoteBytes): storage is where its bytes lie in
    /// the object's map, not fetched; read ranges with file->copyOut(file->offsetOf(p), n, buffer)
    bool deferred = false;
    uint64_t storageAt = 0; ///< where the storage's bytes begin in file (what an owned copy was copied from)
    uint64_t storageBytes = 0;
    /// nothing of it points into the file: an owned copy, or no bytes at all (an empty shard)
    bool pointsIntoNoFile() const { return !deferred && (owned || storageBytes == 0); }
    DType dtype = DType::Unknown;
    std::vector<int64_t> sizes; ///< == the chunk's sizes
    std::vector<int64_t> strides; ///< elements
    int64_t storageOffset = 0; ///< elements
    bool bigEndian = false;
    /// the stored tensor's lazy conj or neg bits (kLazyConj | kLazyNeg: a DCP item saved from a conj() or _neg_view
    /// view), as stored: resolve() applies them to a copy and clears them, resolveAsStored() leaves them
    uint8_t lazyBits = 0;

    size_t elementSize() const { return dtypeSize(dtype); }
    int64_t numel() const;
    /// row-major dense with no gaps: the chunk is the byte range [data(), data() + nbytes())
    bool isContiguous() const;
    const uint8_t* data() const { return storage + static_cast<uint64_t>(storageOffset) * elementSize(); }
    uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * elementSize(); }
};

class ChunkReader
{
public:
    /// Locates @p chunk of @p entry. For DCP chunks this parses the embedded torch.save archive and checks that
    /// the stored tensor matches the metadata (dtype, sizes). Throws Error naming the file on any problem
    /// (missing file, range past the end, damaged archive, mismatch). A tensor saved with lazy conj/neg bits
    /// (TensorEntry::lazyBits, or the DCP item's own) comes back in a copy of its storage with the bits applied, the
    /// values torch.load gives; bits that cannot be applied (lazyBitsUnreadable) throw.
    /// @p deferRemoteBytes: a remote chunk's storage is located but not fetched (ChunkData::deferred), for a caller
    /// that reads only some of its rows (a reshard's box of a larger source chunk)
    static ChunkData resolve(
        const Checkpoint& checkpoint, const Entry& entry, const TensorChunk& chunk, bool deferRemoteBytes = false);
    /// Like resolve(), but returns the tensor as stored (its own dtype and sizes) without comparing them with the
    /// metadata: for checks that report mismatches instead of failing on them. A DCP item read whole from a remote
    /// object is finished() there once its tensor is copied out (a read of every item keeps none of them), unless
    /// @p keepItem: the caller reads the item again (check's CRCs) and finishes it itself.
    static ChunkData resolveAsStored(const Checkpoint& checkpoint, const Entry& entry, const TensorChunk& chunk,
        bool deferRemoteBytes = false, bool keepItem = false);
    /// @p chunk's DCP item, read whole into @p d's own copy, is done: a remote object may give its blocks back
    /// (ByteSource::finished); nothing for a torch.save record, a local file or bytes d still points at
    static void finishItem(const ChunkData& d, const TensorChunk& chunk);
    /// @p chunk's DCP item was read and the caller holds no ChunkData of it any more: a remote object may give its
    /// blocks back. Never throws (a file that cannot be opened has nothing to give back).
    static void itemRead(const Checkpoint& checkpoint, const TensorChunk& chunk) noexcept;
    /// Asks a remote chunk's bytes ahead of its read (ByteSource::prefetch): its stored range (for a DCP item the
    /// whole embedded archive, whose end records and headers resolve() parses) from the start, at most @p maxBytes
    /// of it, plus an item's last 64 KiB (where its zip index is). Returns the bytes asked; 0 for a local file,
    /// whose page cache reads ahead on its own. Never throws: a chunk that cannot be opened is reported by its read.
    static uint64_t prefetch(const Checkpoint& checkpoint, const TensorChunk& chunk, uint64_t maxBytes);
};

} // namespace optscope
