// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/chunk_table.h"
#include "optscope/base/error.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace optscope {

int64_t TensorChunk::numel() const
{
    int64_t n = 1;
    for (auto s : sizes)
        n *= s;
    return n;
}

uint32_t FileNameTable::intern(const std::string& name)
{
    auto it = m_ids.find(name);
    if (it != m_ids.end()) return it->second;
    const auto id = static_cast<uint32_t>(m_names.size());
    m_names.push_back(name);
    m_ids.emplace(name, id);
    return id;
}

int64_t FileNameTable::find(const std::string& name) const
{
    auto it = m_ids.find(name);
    return it == m_ids.end() ? -1 : static_cast<int64_t>(it->second);
}

bool IntSpan::operator==(const std::vector<int64_t>& o) const
{
    return o.size() == m_size && std::equal(begin(), end(), o.begin());
}

ChunkTable::ChunkTable(std::initializer_list<TensorChunk> chunks)
{
    for (const auto& c : chunks)
        push_back(c);
}

void ChunkTable::useFileTable(std::shared_ptr<FileNameTable> files)
{
    m_files = std::move(files);
}

void ChunkTable::clear()
{
    m_recs.clear();
    m_dims.clear();
}

void ChunkTable::reserve(size_t chunks, size_t dims)
{
    m_recs.reserve(chunks);
    m_dims.reserve(dims);
}

uint32_t ChunkTable::internFile(const std::string& name)
{
    if (!m_files) m_files = std::make_shared<FileNameTable>();
    const int64_t id = m_files->find(name);
    if (id >= 0) return static_cast<uint32_t>(id);
    // a table shared with other entries (or copies of this one) is never changed under them: copy on write
    if (m_files.use_count() > 1) m_files = std::make_shared<FileNameTable>(*m_files);
    return m_files->intern(name);
}

void ChunkTable::checkRoom(size_t ndim, size_t numbersPerDim) const
{
    // a record keeps its dimension count in 8 bits and the table its numbers behind 32-bit positions
    if (ndim > kMaxChunkDims)
        throw Error(ErrorKind::Limit, "",
            "a chunk of " + std::to_string(ndim) + " dimensions (at most " + std::to_string(kMaxChunkDims)
                + " are indexed; PyTorch's tensors have at most 64)");
    if (m_dims.size() + ndim * numbersPerDim > std::numeric_limits<uint32_t>::max())
        throw Error(ErrorKind::Limit, "", "too many chunk dimensions in one tensor (more than 2^32 numbers)");
}

void ChunkTable::push_back(const TensorChunk& c)
{
    const size_t ndim = std::max(c.offsets.size(), c.sizes.size());
    const bool hasStrides = !c.source.strides.empty();
    checkRoom(ndim, 3);
    Rec r;
    r.rank = c.rank;
    r.fileId = c.source.file.empty() ? kNoFile : internFile(c.source.file);
    r.offset = c.source.offset;
    r.length = c.source.length;
    r.storageOffset = c.source.storageOffset;
    r.dimsAt = static_cast<uint32_t>(m_dims.size());
    r.ndim = static_cast<uint8_t>(ndim);
    r.kind = c.source.kind;
    r.bigEndian = c.source.bigEndian;
    // offsets and sizes always have ndim values (a malformed chunk missing some reads as zeros, never past its end)
    for (size_t d = 0; d < ndim; ++d)
        m_dims.push_back(d < c.offsets.size() ? c.offsets[d] : 0);
    for (size_t d = 0; d < ndim; ++d)
        m_dims.push_back(d < c.sizes.size() ? c.sizes[d] : 0);
    if (hasStrides && c.source.strides.size() == ndim) {
        r.hasStrides = true;
        m_dims.insert(m_dims.end(), c.source.strides.begin(), c.source.strides.end());
    } else if (hasStrides) {
        // strides of another rank than the chunk: keep them as given (a reader's error to report, not ours)
        r.hasStrides = true;
        r.ndim = static_cast<uint8_t>(ndim);
        for (size_t d = 0; d < ndim; ++d)
            m_dims.push_back(d < c.source.strides.size() ? c.source.strides[d] : 1);
    }
    m_recs.push_back(r);
}

void ChunkTable::appendBlob(int rank, uint32_t fileId, uint64_t offset, uint64_t length, const int64_t* offsets,
    const int64_t* sizes, size_t ndim)
{
    checkRoom(ndim, 2);
    Rec r;
    r.rank = rank;
    r.fileId = fileId;
    r.offset = offset;
    r.length = length;
    r.dimsAt = static_cast<uint32_t>(m_dims.size());
    r.ndim = static_cast<uint8_t>(ndim);
    r.kind = ChunkSource::Kind::TorchSaveBlob;
    m_dims.insert(m_dims.end(), offsets, offsets + ndim);
    m_dims.insert(m_dims.end(), sizes, sizes + ndim);
    m_recs.push_back(r);
}

void ChunkTable::appendBox(int rank, const int64_t* offsets, const int64_t* sizes, size_t ndim)
{
    // a chunk with no file: the record and its dimensions, nothing made per chunk (plans of millions of chunks)
    checkRoom(ndim, 2);
    Rec r;
    r.rank = rank;
    r.dimsAt = static_cast<uint32_t>(m_dims.size());
    r.ndim = static_cast<uint8_t>(ndim);
    if (ndim) {
        m_dims.insert(m_dims.end(), offsets, offsets + ndim);
        m_dims.insert(m_dims.end(), sizes, sizes + ndim);
    }
    m_recs.push_back(r);
}

TensorChunk ChunkTable::operator[](size_t i) const
{
    const Rec& r = m_recs[i];
    TensorChunk c;
    c.rank = r.rank;
    const int64_t* d = m_dims.data() + r.dimsAt;
    c.offsets.assign(d, d + r.ndim);
    c.sizes.assign(d + r.ndim, d + 2 * r.ndim);
    if (r.hasStrides) c.source.strides.assign(d + 2 * r.ndim, d + 3 * r.ndim);
    c.source.kind = r.kind;
    if (r.fileId != kNoFile) c.source.file = m_files->name(r.fileId);
    c.source.offset = r.offset;
    c.source.length = r.length;
    c.source.storageOffset = r.storageOffset;
    c.source.bigEndian = r.bigEndian;
    return c;
}

TensorChunk ChunkTable::at(size_t i) const
{
    if (i >= size()) throw std::out_of_range("ChunkTable::at");
    return (*this)[i];
}

int64_t ChunkTable::numelOf(size_t i) const
{
    int64_t n = 1;
    for (auto s : sizesOf(i))
        n *= s;
    return n;
}

const std::string& ChunkTable::fileOf(size_t i) const
{
    static const std::string none;
    return m_recs[i].fileId == kNoFile ? none : m_files->name(m_recs[i].fileId);
}

size_t ChunkTable::memoryBytes() const
{
    return m_recs.capacity() * sizeof(Rec) + m_dims.capacity() * sizeof(int64_t);
}

} // namespace optscope
