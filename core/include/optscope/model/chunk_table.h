// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The chunks of one tensor entry, stored as flat arrays: one fixed-size record per chunk (rank, file id, byte range,
// storage view), the offsets/sizes (and strides, where a chunk has them) of all chunks in one int64 array, and the
// file names in a table shared by every entry of a checkpoint. A 1,024-rank checkpoint has millions of chunks, so
// there is no heap object per chunk: about 40 bytes plus 16 per dimension.
//
// TensorChunk is the value form of one chunk: readers fill one and push_back it, and operator[] / iteration hand one
// back (built on the fly, so never keep a reference into the table). Loops over millions of chunks use the accessors
// (rank(i), offsetsOf(i), sizesOf(i), fileIdOf(i), ...), which allocate nothing.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace optscope {

/// Where the bytes of one chunk are.
struct ChunkSource
{
    enum class Kind : unsigned char {
        StorageRecord, ///< raw storage bytes (torch.save record data/<key>, or a legacy-format storage)
        TorchSaveBlob, ///< a complete torch.save archive holding the chunk as its only tensor (DCP .distcp items)
    };
    Kind kind = Kind::StorageRecord;
    std::string file; ///< path relative to Checkpoint::rootDir
    uint64_t offset = 0; ///< first byte in the file
    uint64_t length = 0; ///< bytes (the whole storage record / the whole embedded archive)
    // StorageRecord only: how the chunk views its storage
    int64_t storageOffset = 0; ///< in elements
    std::vector<int64_t> strides; ///< in elements
    bool bigEndian = false;
};

struct TensorChunk
{
    int rank = -1; ///< the rank that wrote it (DCP: from __<rank>_<n>.distcp), -1 if unknown
    std::vector<int64_t> offsets; ///< global offsets per dimension
    std::vector<int64_t> sizes;
    ChunkSource source;
    int64_t numel() const;
};

/// Relative file names of a checkpoint, each stored once; chunks refer to them by id.
class FileNameTable
{
public:
    /// id of @p name, added if new
    uint32_t intern(const std::string& name);
    /// id of @p name or -1
    int64_t find(const std::string& name) const;
    const std::string& name(uint32_t id) const { return m_names[id]; }
    size_t size() const { return m_names.size(); }

private:
    std::vector<std::string> m_names;
    std::unordered_map<std::string, uint32_t> m_ids;
};

/// A read-only view of a few int64s inside a ChunkTable (offsets, sizes or strides of one chunk).
class IntSpan
{
public:
    IntSpan() = default;
    IntSpan(const int64_t* data, size_t size)
        : m_data(data)
        , m_size(size)
    { }
    size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    int64_t operator[](size_t i) const { return m_data[i]; }
    const int64_t* begin() const { return m_data; }
    const int64_t* end() const { return m_data + m_size; }
    std::vector<int64_t> vec() const { return {begin(), end()}; }
    bool operator==(const std::vector<int64_t>& o) const;
    bool operator!=(const std::vector<int64_t>& o) const { return !(*this == o); }

private:
    const int64_t* m_data = nullptr;
    size_t m_size = 0;
};

class ChunkTable
{
public:
    ChunkTable() = default;
    ChunkTable(std::initializer_list<TensorChunk> chunks);

    /// share @p files with other tables of the same checkpoint (must be called while the table is empty)
    void useFileTable(std::shared_ptr<FileNameTable> files);
    const std::shared_ptr<FileNameTable>& fileTable() const { return m_files; }

    size_t size() const { return m_recs.size(); }
    bool empty() const { return m_recs.empty(); }
    void clear();
    void reserve(size_t chunks, size_t dims);

    void push_back(const TensorChunk& c);
    template<class... A> void emplace_back(A&&... a) { push_back(TensorChunk {std::forward<A>(a)...}); }
    /// a TorchSaveBlob chunk whose file is already in fileTable() (readers of millions of chunks)
    void appendBlob(int rank, uint32_t fileId, uint64_t offset, uint64_t length, const int64_t* offsets,
        const int64_t* sizes, size_t ndim);
    /// a chunk without storage (no file): a layout, as plans and checks build them
    void appendBox(int rank, const int64_t* offsets, const int64_t* sizes, size_t ndim);

    /// the chunk as a value (allocates: use the accessors below in loops over many chunks)
    TensorChunk operator[](size_t i) const;
    TensorChunk at(size_t i) const;
    TensorChunk front() const { return (*this)[0]; }
    TensorChunk back() const { return (*this)[size() - 1]; }

    int rank(size_t i) const { return m_recs[i].rank; }
    size_t ndim(size_t i) const { return m_recs[i].ndim; }
    IntSpan offsetsOf(size_t i) const { return {m_dims.data() + m_recs[i].dimsAt, m_recs[i].ndim}; }
    IntSpan sizesOf(size_t i) const { return {m_dims.data() + m_recs[i].dimsAt + m_recs[i].ndim, m_recs[i].ndim}; }
    int64_t numelOf(size_t i) const;
    /// the chunk's strides in elements as its file stores them (torch.save views), empty when it is dense
    IntSpan stridesOf(size_t i) const
    {
        return m_recs[i].hasStrides ? IntSpan {m_dims.data() + m_recs[i].dimsAt + 2 * m_recs[i].ndim, m_recs[i].ndim}
                                    : IntSpan {};
    }
    bool hasFile(size_t i) const { return m_recs[i].fileId != kNoFile; }
    uint32_t fileIdOf(size_t i) const { return m_recs[i].fileId; }
    /// the chunk's file, "" if none
    const std::string& fileOf(size_t i) const;
    uint64_t byteOffsetOf(size_t i) const { return m_recs[i].offset; }
    uint64_t byteLengthOf(size_t i) const { return m_recs[i].length; }

    class const_iterator
    {
    public:
        using iterator_category = std::input_iterator_tag;
        using value_type = TensorChunk;
        using difference_type = std::ptrdiff_t;
        using pointer = void;
        using reference = TensorChunk;
        const_iterator(const ChunkTable* t, size_t i)
            : m_t(t)
            , m_i(i)
        { }
        TensorChunk operator*() const { return (*m_t)[m_i]; }
        const_iterator& operator++()
        {
            ++m_i;
            return *this;
        }
        bool operator==(const const_iterator& o) const { return m_i == o.m_i; }
        bool operator!=(const const_iterator& o) const { return m_i != o.m_i; }

    private:
        const ChunkTable* m_t;
        size_t m_i;
    };
    const_iterator begin() const { return {this, 0}; }
    const_iterator end() const { return {this, size()}; }

    /// bytes held by the table (the file table not counted: it is shared)
    size_t memoryBytes() const;

    /// the most dimensions a chunk may have (a record keeps the count in 8 bits); more throw Error(Limit)
    static constexpr size_t kMaxChunkDims = 255;

private:
    static constexpr uint32_t kNoFile = 0xffffffffu;
    /// throws Error(Limit) when a chunk of @p ndim dimensions does not fit the table
    void checkRoom(size_t ndim, size_t numbersPerDim) const;
    struct Rec
    {
        int32_t rank = -1;
        uint32_t fileId = kNoFile;
        uint64_t offset = 0;
        uint64_t length = 0;
        int64_t storageOffset = 0;
        uint32_t dimsAt = 0; ///< offsets, sizes and (hasStrides) strides of the chunk in m_dims
        uint8_t ndim = 0;
        ChunkSource::Kind kind = ChunkSource::Kind::StorageRecord;
        bool bigEndian = false;
        bool hasStrides = false;
    };
    uint32_t internFile(const std::string& name);
    std::vector<Rec> m_recs;
    std::vector<int64_t> m_dims;
    std::shared_ptr<FileNameTable> m_files;
};

} // namespace optscope
