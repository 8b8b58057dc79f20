// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <cstdint>
#include <functional>
#include <optional>

namespace optscope {

class ByteSource;

/// Streams the full tensor of an entry, assembled from its chunks, as consecutive blocks of its row-major,
/// little-endian bytes. Zero-copy where a chunk already is the block's byte range (the usual dim-0 sharding);
/// otherwise a block of at most maxBlockBytes is assembled with ATen copies (a row larger than that is cut into boxes
/// of at most one block). Only the chunks of the current block are touched, so memory stays bounded by one block
/// whatever the tensor size, even for a tiny stride-0 file that declares a huge tensor.
///
/// Throws Error when the chunks do not tile the tensor exactly (gap, overlap, out of bounds), when a chunk cannot
/// be read, or when the progress callback asks to cancel.
class TensorAssembler
{
public:
    using Sink = std::function<void(const uint8_t* data, size_t size)>;
    /// optional: receives a contiguous region of a mapped chunk file instead of its bytes (zero-copy direct path)
    using RegionSink = std::function<void(const ByteSource& file, uint64_t offset, uint64_t length)>;

    TensorAssembler(const Checkpoint& checkpoint, const Entry& entry, size_t maxBlockBytes = 64u << 20);
    /// how far ahead of what it streams a remote tensor's chunks are asked for (256 MiB, at most half the remote
    /// cache, unless told): a caller that
    /// stops early (the first values of a tensor) says how much it will read, so that no more is fetched
    TensorAssembler& readAheadAtMost(uint64_t bytes)
    {
        m_readAhead = bytes;
        return *this;
    }
    /// @p onBytes is called with the number of bytes produced so far (for progress across many tensors)
    void stream(const Sink& sink, const Progress& progress = {}, const std::function<void(uint64_t)>& onBytes = {},
        const RegionSink& region = {});
    /// Only the box [offsets, offsets + sizes) of the full tensor, as the dense row-major bytes of that box. A box of
    /// whole rows (a dim-0 slice) streams like stream(); any other box is assembled in one buffer of its size.
    void streamBox(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes, const Sink& sink,
        const Progress& progress = {}, const RegionSink& region = {});
    /// Only the elements [first, first + count) in row-major order (a page of a tensor's values, whatever its shape),
    /// as the dense bytes of those elements: the range is read as the few boxes elementRangeBoxes() cuts it into.
    void streamElements(int64_t first, int64_t count, const Sink& sink, const Progress& progress = {});
    /// throws Error(Limit) naming the entry when reading it whole would expand a broadcast view (a dimension of
    /// stride 0, as torch.expand makes) to far more bytes than it stores; every read above checks it too
    static void checkExpansion(const Checkpoint& checkpoint, const Entry& entry);
    /// checkExpansion for comparing @p a and @p b element by element: a view that checkExpansion refuses is read
    /// expanded when the other side stores about as many bytes as the comparison reads (a dense tensor, say), since
    /// the reading is then bounded by that input; when both sides are such views (broadcast along other dimensions:
    /// an outer difference of N * M elements) it throws as checkExpansion does. Returns whether one side is such a
    /// view, read expanded (its rows then need cutting into blocks: a row of a [4, 2^28] view is 1 GiB)
    static bool checkComparison(const Checkpoint& ca, const Entry& a, const Checkpoint& cb, const Entry& b);
    /// Asks ahead for the remote chunks of @p entry (ChunkReader::prefetch), in the order stream() reads them, at
    /// most @p maxBytes in all: a caller that streams tensor after tensor asks for the next one before it streams
    /// this one, so that a remote object's requests never wait for a tensor boundary. Nothing for a local checkpoint.
    static void prefetch(const Checkpoint& checkpoint, const Entry& entry, uint64_t maxBytes = uint64_t(256) << 20);
    /// The same for the box streamBox() will read: the chunks inside it whole, and of a larger chunk (a reshard's
    /// target box of a source chunk) the rows it takes, located first (its archive's index is parsed here).
    static void prefetchBox(const Checkpoint& checkpoint, const Entry& entry, const std::vector<int64_t>& offsets,
        const std::vector<int64_t>& sizes, uint64_t maxBytes = uint64_t(256) << 20);

private:
    void streamRows(int64_t rowBegin, int64_t rowEnd, const Sink& sink, const Progress& progress,
        const std::function<void(uint64_t)>& onBytes, const RegionSink& region);
    /// the chunks of a tensor of one or more dims, checked to lie inside it once, and found by rows: a caller that
    /// reads a tensor of N chunks box by box (diff, verify, reshard) keeps one assembler, and each box costs the
    /// chunks it meets (log N to find them), not a pass over all N
    struct RowIndex
    {
        std::vector<uint32_t> byStart; ///< the non-empty chunks by first row (ties in table order)
        size_t leaves = 1; ///< a power of two >= byStart.size()
        /// a max tree over byStart's end rows: leaf p at leaves + p, node n the larger of 2n and 2n + 1
        std::vector<int64_t> maxEnd;
    };
    /// the non-empty chunks that rows [rowBegin, rowEnd) meet, in table order (all of them for a 0-dim tensor);
    /// throws as streamRows does for a chunk of the wrong rank or outside the tensor
    void chunksMeeting(int64_t rowBegin, int64_t rowEnd, const std::string& where, std::vector<size_t>& out);
    const Checkpoint& m_checkpoint;
    const Entry& m_entry;
    size_t m_maxBlock;
    uint64_t m_readAhead; ///< 256 MiB, at most half of remoteCacheBytes()
    bool m_chunksChecked = false; ///< every chunk found inside the tensor (the first chunksMeeting)
    std::optional<RowIndex> m_rows; ///< built by the second chunksMeeting
};

/// The boxes that, read one after the other, give the elements [first, first + count) of a tensor of @p shape in
/// row-major order: a partial run at the head, whole blocks of the outermost dimension, a partial run at the tail,
/// each split again one dimension down (at most 2 x dims - 1 boxes). @p onBox gets each box's offsets and sizes.
void elementRangeBoxes(const std::vector<int64_t>& shape, int64_t first, int64_t count,
    const std::function<void(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes)>& onBox);

/// A broadcast view too large to expand (what TensorAssembler::checkExpansion refuses), seen through its storage: the
/// same entry with each broadcast dimension (stride 0, size > 1) cut to size 1, whose elements, each repeated
/// `repeats` times, are the view's. Statistics and hashes of such a view are those of `stored`, so that they cost what
/// the file holds, not the 4 EiB that torch.zeros(1).expand(2**30, 2**30) declares.
struct BroadcastStorage
{
    Entry stored;
    int64_t repeats = 1;
};
/// @p entry through its storage when reading it whole would be refused as an expansion, else nothing. Only a view
/// saved as one chunk (torch.save) qualifies: DCP and safetensors store dense chunks.
std::optional<BroadcastStorage> broadcastStorageOf(const Entry& entry);

/// SHA-256 (hex) of the entry's full tensor bytes in row-major C order, little-endian; of a broadcast view too large to
/// expand, of its stored elements (broadcastStorageOf), which inspect says.
std::string hashTensor(const Checkpoint& checkpoint, const Entry& entry, const Progress& progress = {},
    const std::function<void(uint64_t)>& onBytes = {});

} // namespace optscope
