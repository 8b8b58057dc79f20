// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/base/error.h"
#include "optscope/base/look_ahead.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/sha256.h"
#include "optscope/io/storage.h"
#include "optscope/model/shard_layout.h"
#include "optscope/tensor/aten_bridge.h"
#include "optscope/tensor/chunk_reader.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace optscope {

namespace {

/// The mapped pages of @p d that a copy of the region [begin, begin + sizes) of it read go from this process (they
/// stay in the page cache): a box assembled block by block from a large mapped chunk otherwise keeps all of it
/// resident. Nothing for a chunk in no file; a remote object keeps its blocks (ByteSource::release).
void releaseRegion(const ChunkData& d, const std::vector<int64_t>& begin, const std::vector<int64_t>& sizes)
{
    if (!d.file || d.pointsIntoNoFile() || d.strides.size() != sizes.size()) return;
    int64_t first = d.storageOffset, last = d.storageOffset;
    for (size_t k = 0; k < sizes.size(); ++k) {
        if (sizes[k] <= 0) return;
        if (d.strides[k] < 0) return; // not made by torch.save or DCP; leave it alone
        first += begin[k] * d.strides[k];
        last += (begin[k] + sizes[k] - 1) * d.strides[k];
    }
    const uint64_t elem = d.elementSize();
    d.file->release(d.file->offsetOf(d.storage) + static_cast<uint64_t>(first) * elem,
        static_cast<uint64_t>(last - first + 1) * elem);
}

/// Copies the part of each listed chunk that lies inside the box [offsets, offsets + sizes) into @p out, the box's
/// dense row-major bytes; returns how many elements were copied (the box's numel when the chunks tile it).
template<typename ChunkDataOf>
int64_t copyIntoBox(const TensorEntry& t, const std::vector<size_t>& chunks, const ChunkDataOf& dataOf,
    const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes, uint8_t* out, const Progress& progress)
{
    const size_t ndim = sizes.size();
    const TensorBox box {offsets, sizes};
    TensorBox chunkBox, region;
    std::vector<int64_t> srcBegin(ndim), dstBegin(ndim);
    int64_t covered = 0;
    for (size_t i : chunks) {
        // through the table's accessors: a box meets few of a tensor's chunks, and nothing is made for the others
        if (t.chunks.numelOf(i) == 0) continue;
        const IntSpan chunkOffsets = t.chunks.offsetsOf(i);
        chunkBox.offsets.assign(chunkOffsets.begin(), chunkOffsets.end());
        chunkBox.sizes.assign(t.chunks.sizesOf(i).begin(), t.chunks.sizesOf(i).end());
        if (!intersect(box, chunkBox, region)) continue;
        for (size_t d = 0; d < ndim; ++d) {
            srcBegin[d] = region.offsets[d] - chunkOffsets[d];
            dstBegin[d] = region.offsets[d] - offsets[d];
        }
        const int64_t vol = region.numel();
        progress.checkCancelled();
        const ChunkData& data = dataOf(i);
        aten::copyBlock(data, srcBegin, region.sizes, out, sizes, dstBegin);
        releaseRegion(data, srcBegin, region.sizes);
        covered += vol;
    }
    return covered;
}

/// Refuses to read @p requestedBytes of a broadcast view (a dimension of stride 0, as torch.expand makes) when that
/// is far more than its storage holds: torch.zeros(1).expand(2**30, 2**30) is a 1.2 KB file that torch.save and
/// torch.load keep a view; expanded it is 4 EiB, and hashing, comparing or gathering it never ended.
bool expansionRefused(const TensorEntry& t, uint64_t requestedBytes, uint64_t* storedBytes = nullptr)
{
    constexpr uint64_t kSlack = uint64_t(256) << 20;
    constexpr uint64_t kMaxFactor = 64;
    if (requestedBytes <= kSlack) return false;
    uint64_t stored = 0;
    bool broadcast = false;
    for (size_t i = 0; i < t.chunks.size(); ++i) {
        stored += t.chunks.byteLengthOf(i);
        const IntSpan strides = t.chunks.stridesOf(i);
        const IntSpan sizes = t.chunks.sizesOf(i);
        for (size_t d = 0; d < strides.size() && d < sizes.size(); ++d)
            broadcast = broadcast || (strides[d] == 0 && sizes[d] > 1);
    }
    if (storedBytes) *storedBytes = stored;
    return broadcast && stored <= (requestedBytes - kSlack) / kMaxFactor;
}

void refuseExpansion(const TensorEntry& t, uint64_t requestedBytes, const std::string& where)
{
    uint64_t stored = 0;
    if (!expansionRefused(t, requestedBytes, &stored)) return;
    throw Error(ErrorKind::Limit, where,
        "is a broadcast view (a dimension of stride 0, as torch.expand makes) of " + std::to_string(t.numel())
            + " elements over " + std::to_string(stored) + " stored bytes: reading " + std::to_string(requestedBytes)
            + " bytes of it expanded is not done (torch.save and torch.load keep it a view)");
}

} // namespace

TensorAssembler::TensorAssembler(const Checkpoint& checkpoint, const Entry& entry, size_t maxBlockBytes)
    : m_checkpoint(checkpoint)
    , m_entry(entry)
    , m_maxBlock(std::max<size_t>(maxBlockBytes, 1))
    , m_readAhead(std::min(uint64_t(256) << 20, remoteCacheBytes() / 2))
{ }

void TensorAssembler::checkExpansion(const Checkpoint& checkpoint, const Entry& entry)
{
    refuseExpansion(*entry.tensor, entry.tensor->nbytes(), checkpoint.path + ": '" + entry.key + "'");
}

bool TensorAssembler::checkComparison(const Checkpoint& ca, const Entry& a, const Checkpoint& cb, const Entry& b)
{
    const bool refusedA = expansionRefused(*a.tensor, a.tensor->nbytes());
    const bool refusedB = expansionRefused(*b.tensor, b.tensor->nbytes());
    if (refusedA && refusedB) {
        checkExpansion(ca, a);
        checkExpansion(cb, b);
    }
    return refusedA || refusedB;
}

void TensorAssembler::stream(
    const Sink& sink, const Progress& progress, const std::function<void(uint64_t)>& onBytes, const RegionSink& region)
{
    streamRows(0, m_entry.tensor->shape.empty() ? 1 : m_entry.tensor->shape[0], sink, progress, onBytes, region);
}

namespace {

using BoxFn = std::function<void(const std::vector<int64_t>&, const std::vector<int64_t>&)>;

/// the elements [begin, end) of the sub-tensor at dimension @p d (the outer indices fixed in @p offsets), where
/// @p stride[d] elements make one index of dimension d
void rangeBoxes(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride, size_t d, int64_t begin,
    int64_t end, std::vector<int64_t>& offsets, const BoxFn& onBox)
{
    if (begin >= end) return;
    const int64_t step = stride[d];
    if (begin % step == 0 && end % step == 0) {
        // whole indices of dimension d: one box, full below it
        std::vector<int64_t> sizes(shape.size(), 1);
        offsets[d] = begin / step;
        sizes[d] = (end - begin) / step;
        for (size_t k = d + 1; k < shape.size(); ++k) {
            offsets[k] = 0;
            sizes[k] = shape[k];
        }
        onBox(offsets, sizes);
        return;
    }
    int64_t first = begin / step;
    const int64_t last = (end - 1) / step;
    if (first == last) { // inside one index of dimension d
        offsets[d] = first;
        rangeBoxes(shape, stride, d + 1, begin - first * step, end - first * step, offsets, onBox);
        return;
    }
    if (begin % step != 0) { // the head: the rest of index `first`
        offsets[d] = first;
        rangeBoxes(shape, stride, d + 1, begin - first * step, step, offsets, onBox);
        ++first;
    }
    const int64_t wholeEnd = end / step;
    if (wholeEnd > first) rangeBoxes(shape, stride, d, first * step, wholeEnd * step, offsets, onBox);
    if (end % step != 0) { // the tail: the start of index `wholeEnd`
        offsets[d] = wholeEnd;
        rangeBoxes(shape, stride, d + 1, 0, end - wholeEnd * step, offsets, onBox);
    }
}

} // namespace

void elementRangeBoxes(const std::vector<int64_t>& shape, int64_t first, int64_t count, const BoxFn& onBox)
{
    if (count <= 0) return;
    if (shape.empty()) {
        if (first == 0) onBox({}, {});
        return;
    }
    std::vector<int64_t> stride(shape.size(), 1);
    for (size_t d = shape.size() - 1; d > 0; --d)
        stride[d - 1] = stride[d] * shape[d];
    std::vector<int64_t> offsets(shape.size(), 0);
    rangeBoxes(shape, stride, 0, first, first + count, offsets, onBox);
}

void TensorAssembler::streamElements(int64_t first, int64_t count, const Sink& sink, const Progress& progress)
{
    const TensorEntry& t = *m_entry.tensor;
    const int64_t numel = t.numel();
    if (first < 0 || count < 0 || first > numel || count > numel - first)
        throw Error(ErrorKind::Usage, m_checkpoint.path + ": '" + m_entry.key + "'",
            "elements " + std::to_string(first) + "+" + std::to_string(count) + " outside " + shapeText(t.shape));
    elementRangeBoxes(
        t.shape, first, count, [&](const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
            streamBox(offsets, sizes, sink, progress);
        });
}

void TensorAssembler::prefetch(const Checkpoint& checkpoint, const Entry& entry, uint64_t maxBytes)
{
    if (entry.isTensor())
        prefetchBox(
            checkpoint, entry, std::vector<int64_t>(entry.tensor->shape.size(), 0), entry.tensor->shape, maxBytes);
}

void TensorAssembler::prefetchBox(const Checkpoint& checkpoint, const Entry& entry, const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& sizes, uint64_t maxBytes)
{
    if (!entry.isTensor() || !checkpoint.files || !isUrl(checkpoint.files->rootDir())) return;
    const TensorEntry& t = *entry.tensor;
    const ChunkTable& chunks = t.chunks;
    const size_t ndim = t.shape.size();
    if (offsets.size() != ndim || sizes.size() != ndim) return;
    bool wholeRows = ndim > 0;
    for (size_t d = 1; d < ndim; ++d)
        wholeRows = wholeRows && offsets[d] == 0 && sizes[d] == t.shape[d];
    const TensorBox box {offsets, sizes};
    TensorBox chunkBox, region;
    std::vector<size_t> order; // the chunks the box meets, in the order streamRows reads them (by first row)
    for (size_t i = 0; i < chunks.size(); ++i) {
        if (chunks.ndim(i) != ndim) continue;
        chunkBox.offsets = chunks.offsetsOf(i).vec();
        chunkBox.sizes = chunks.sizesOf(i).vec();
        if (intersect(box, chunkBox, region)) order.push_back(i);
    }
    if (ndim > 0)
        std::stable_sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return chunks.offsetsOf(x)[0] < chunks.offsetsOf(y)[0]; });
    uint64_t asked = 0;
    for (size_t k = 0; k < order.size() && asked < maxBytes; ++k) {
        const TensorChunk c = chunks[order[k]];
        intersect(box, TensorBox {c.offsets, c.sizes}, region);
        if (region.sizes == c.sizes || !wholeRows) { // read whole (a general box copies every chunk it meets whole)
            asked += ChunkReader::prefetch(checkpoint, c, maxBytes - asked);
            continue;
        }
        // rows of a larger chunk: located, then only those rows, as streamRows' direct path reads them
        bool fullRows = true;
        for (size_t d = 1; d < ndim; ++d)
            fullRows = fullRows && c.offsets[d] == 0 && c.sizes[d] == t.shape[d];
        if (!fullRows || c.sizes[0] == 0) continue;
        try {
            const ChunkData d = ChunkReader::resolve(checkpoint, entry, c, true);
            if (!d.deferred || !d.isContiguous() || d.sizes != c.sizes) continue;
            const uint64_t rowBytes = static_cast<uint64_t>(c.numel() / c.sizes[0]) * dtypeSize(t.dtype);
            const uint8_t* p = d.data() + static_cast<uint64_t>(region.offsets[0] - c.offsets[0]) * rowBytes;
            const uint64_t n = std::min(static_cast<uint64_t>(region.sizes[0]) * rowBytes, maxBytes - asked);
            d.file->prefetch(d.file->offsetOf(p), n);
            asked += n;
        } catch (const Error&) { } // its read reports it
    }
}

void TensorAssembler::streamBox(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes,
    const Sink& sink, const Progress& progress, const RegionSink& region)
{
    const TensorEntry& t = *m_entry.tensor;
    const size_t ndim = t.shape.size();
    const std::string where = m_checkpoint.path + ": '" + m_entry.key + "'";
    if (offsets.size() != ndim || sizes.size() != ndim) throw Error(ErrorKind::Usage, where, "box of the wrong rank");
    bool wholeRows = true;
    for (size_t d = 0; d < ndim; ++d) {
        if (offsets[d] < 0 || sizes[d] < 0 || offsets[d] + sizes[d] > t.shape[d])
            throw Error(ErrorKind::Usage, where,
                "box " + shapeText(offsets) + "+" + shapeText(sizes) + " outside " + shapeText(t.shape));
        if (d > 0 && (offsets[d] != 0 || sizes[d] != t.shape[d])) wholeRows = false;
    }
    if (ndim == 0) {
        stream(sink, progress, {}, region);
        return;
    }
    if (wholeRows) {
        if (sizes[0] > 0) streamRows(offsets[0], offsets[0] + sizes[0], sink, progress, {}, region);
        return;
    }
    // a general box: copy every intersecting chunk's part into one dense buffer
    int64_t numel = 1;
    for (auto s : sizes)
        numel *= s;
    if (numel == 0) return;
    refuseExpansion(t, static_cast<uint64_t>(numel) * dtypeSize(t.dtype), where);
    std::vector<uint8_t> buffer(static_cast<size_t>(numel) * dtypeSize(t.dtype));
    std::vector<size_t> met; // the chunks whose rows meet the box's: a column block of N row chunks reads few
    chunksMeeting(offsets[0], offsets[0] + sizes[0], where, met);
    const int64_t covered = copyIntoBox(
        t, met, [&](size_t i) { return ChunkReader::resolve(m_checkpoint, m_entry, t.chunks[i]); }, offsets, sizes,
        buffer.data(), progress);
    if (covered != numel)
        throw Error(ErrorKind::Format, where,
            std::string(covered < numel ? "chunks leave a gap" : "chunks overlap") + " in the box " + shapeText(offsets)
                + "+" + shapeText(sizes));
    sink(buffer.data(), buffer.size());
}

void TensorAssembler::chunksMeeting(
    int64_t rowBegin, int64_t rowEnd, const std::string& where, std::vector<size_t>& out)
{
    const TensorEntry& t = *m_entry.tensor;
    const auto& shape = t.shape;
    const size_t ndim = shape.size();
    out.clear();
    auto meets = [&](size_t i) {
        return ndim == 0
            || (t.chunks.offsetsOf(i)[0] < rowEnd && t.chunks.offsetsOf(i)[0] + t.chunks.sizesOf(i)[0] > rowBegin);
    };
    if (!m_chunksChecked) {
        // every chunk must lie inside the tensor; empty chunks are legal and ignored
        // (through the table's accessors: nothing is made per chunk, a tensor can have millions)
        for (size_t i = 0; i < t.chunks.size(); ++i) {
            const IntSpan offs = t.chunks.offsetsOf(i);
            const IntSpan sizes = t.chunks.sizesOf(i);
            if (t.chunks.ndim(i) != ndim)
                throw Error(ErrorKind::Format, where,
                    "chunk " + std::to_string(i) + " has rank " + std::to_string(t.chunks.ndim(i)) + ", the tensor "
                        + std::to_string(ndim));
            bool empty = false;
            for (size_t d = 0; d < ndim; ++d) {
                if (offs[d] < 0 || sizes[d] < 0 || offs[d] > shape[d] || sizes[d] > shape[d] - offs[d])
                    throw Error(ErrorKind::Format, where,
                        "chunk at offsets " + shapeText(offs.vec()) + " sizes " + shapeText(sizes.vec())
                            + " lies outside the tensor " + shapeText(shape));
                empty = empty || sizes[d] == 0;
            }
            if (!empty && meets(i)) out.push_back(i);
        }
        m_chunksChecked = true; // a one-box read is done in one pass; a second box builds the index
        return;
    }
    if (!m_rows) {
        RowIndex index;
        for (size_t i = 0; i < t.chunks.size(); ++i)
            if (t.chunks.numelOf(i) > 0) index.byStart.push_back(static_cast<uint32_t>(i));
        if (ndim > 0) {
            std::stable_sort(index.byStart.begin(), index.byStart.end(),
                [&](uint32_t x, uint32_t y) { return t.chunks.offsetsOf(x)[0] < t.chunks.offsetsOf(y)[0]; });
            while (index.leaves < index.byStart.size())
                index.leaves *= 2;
            index.maxEnd.assign(2 * index.leaves, std::numeric_limits<int64_t>::min());
            for (size_t p = 0; p < index.byStart.size(); ++p)
                index.maxEnd[index.leaves + p]
                    = t.chunks.offsetsOf(index.byStart[p])[0] + t.chunks.sizesOf(index.byStart[p])[0];
            for (size_t n = index.leaves; n-- > 1;)
                index.maxEnd[n] = std::max(index.maxEnd[2 * n], index.maxEnd[2 * n + 1]);
        }
        m_rows = std::move(index);
    }
    const RowIndex& index = *m_rows;
    if (ndim == 0) {
        out.assign(index.byStart.begin(), index.byStart.end());
        return;
    }
    // the chunks that begin before rowEnd (a prefix of byStart) and end after rowBegin (subtrees whose largest end
    // does not reach past rowBegin are skipped whole): a chunk over every row does not make each query a scan
    const size_t hi
        = static_cast<size_t>(std::partition_point(index.byStart.begin(), index.byStart.end(), [&](uint32_t i) {
              return t.chunks.offsetsOf(i)[0] < rowEnd;
          }) - index.byStart.begin());
    struct Node
    {
        size_t node, first, count; // a subtree and the leaves it spans
    };
    std::vector<Node> todo {{1, 0, index.leaves}};
    while (!todo.empty()) {
        const Node n = todo.back();
        todo.pop_back();
        if (n.first >= hi || index.maxEnd[n.node] <= rowBegin) continue;
        if (n.count == 1) {
            out.push_back(index.byStart[n.first]);
            continue;
        }
        todo.push_back({2 * n.node + 1, n.first + n.count / 2, n.count / 2});
        todo.push_back({2 * n.node, n.first, n.count / 2});
    }
    std::sort(out.begin(), out.end());
}

namespace {

/// One streamRows call over the chunks its rows meet: the chunks' data resolved once each, then the rows emitted
/// segment by segment along dim 0 (between consecutive chunk boundaries the set of chunks is constant), each segment
/// zero-copy from one chunk, assembled block by block from several, or, for rows larger than a block, box by box
class RowStream
{
public:
    using Sink = TensorAssembler::Sink;
    using RegionSink = TensorAssembler::RegionSink;

    RowStream(const Checkpoint& checkpoint, const Entry& entry, std::string where, std::vector<size_t> live,
        int64_t rowBegin, int64_t rowEnd, size_t maxBlock, uint64_t readAhead, const Sink& sink,
        const Progress& progress, const std::function<void(uint64_t)>& onBytes, const RegionSink& region)
        : m_checkpoint(checkpoint)
        , m_entry(entry)
        , m_t(*entry.tensor)
        , m_where(std::move(where))
        , m_live(std::move(live))
        , m_rowBegin(rowBegin)
        , m_rowEnd(rowEnd)
        , m_maxBlock(maxBlock)
        , m_readAhead(readAhead)
        , m_sink(sink)
        , m_progress(progress)
        , m_onBytes(onBytes)
        , m_region(region)
        , m_itemsRead {checkpoint, m_t, {}}
        , m_resolved(m_live.size())
        , m_locatedOnly(m_live.size())
    {
        const size_t ndim = m_t.shape.size();
        if (m_checkpoint.files && isUrl(m_checkpoint.files->rootDir()))
            for (size_t i : m_live)
                if (ndim == 0 || (firstRow(i) >= rowBegin && endRow(i) <= rowEnd)) m_itemsRead.chunks.push_back(i);
    }

    /// a 0-dim tensor: its one element
    void scalar()
    {
        if (m_live.size() != 1)
            throw Error(ErrorKind::Format, m_where,
                "0-dim tensor has " + std::to_string(m_live.size()) + " chunks (expected exactly one)");
        const ChunkData& d = data(m_live[0]);
        const size_t elem = dtypeSize(m_t.dtype);
        if (d.bigEndian && elem > 1) {
            std::vector<uint8_t> buf(elem);
            aten::copyBlock(d, {}, {}, buf.data(), {}, {});
            emit(buf.data(), elem);
        } else {
            emit(d.data(), elem);
        }
    }

    void rows()
    {
        const auto& shape = m_t.shape;
        std::vector<int64_t> cuts {m_rowBegin, m_rowEnd};
        for (size_t i : m_live) {
            for (int64_t b : {firstRow(i), endRow(i)})
                if (b > m_rowBegin && b < m_rowEnd) cuts.push_back(b);
        }
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        m_rowElems = 1;
        for (size_t d = 1; d < shape.size(); ++d)
            m_rowElems *= shape[d];
        m_rowBytes = static_cast<uint64_t>(m_rowElems) * dtypeSize(m_t.dtype);

        // a sweep over the chunks by first row: each segment's chunks are those begun and not yet ended (a scan of
        // every chunk per segment was quadratic: 5 s for one tensor in 10k chunks)
        std::vector<size_t> byStart = m_live;
        std::stable_sort(byStart.begin(), byStart.end(), [&](size_t x, size_t y) { return firstRow(x) < firstRow(y); });
        size_t nextStart = 0;
        // remote chunks the box reads whole are asked for ahead of the scan (ChunkReader::prefetch), many at once: a
        // window (LookAhead) of m_readAhead bytes over the chunks in the order they are read; a chunk the box reads
        // in part is left to copyOut's read-ahead, which stays inside the box
        const bool remote = !byStart.empty() && m_checkpoint.files && isUrl(m_checkpoint.files->rootDir());
        auto readWhole = [&](size_t position) {
            return firstRow(byStart[position]) >= m_rowBegin && endRow(byStart[position]) <= m_rowEnd;
        };
        LookAhead ahead(
            byStart.size(),
            [&](size_t n) -> uint64_t {
                return remote && readWhole(n) ? std::min(m_t.chunks[byStart[n]].source.length, m_readAhead) : 0;
            },
            [&](size_t n) { ChunkReader::prefetch(m_checkpoint, m_t.chunks[byStart[n]], m_readAhead); }, m_readAhead);
        std::vector<size_t> here;
        for (size_t s = 0; s + 1 < cuts.size(); ++s) {
            const int64_t a = cuts[s];
            const int64_t b = cuts[s + 1];
            if (remote) ahead.before(nextStart); // before the chunks of this segment are begun
            // a chunk the sweep has passed is let go: its file may close (a tensor over 4,096 ranks' files held
            // every one open at once)
            here.erase(std::remove_if(here.begin(), here.end(),
                           [&](size_t i) {
                               if (endRow(i) > a) return false;
                               m_resolved[slotOf(i)].reset();
                               m_locatedOnly[slotOf(i)].reset();
                               return true;
                           }),
                here.end());
            for (; nextStart < byStart.size() && firstRow(byStart[nextStart]) < b; ++nextStart)
                if (endRow(byStart[nextStart]) > a) here.push_back(byStart[nextStart]);
            // in table order, as before: the order of overlapping chunks decides nothing, but keeps results identical
            std::sort(here.begin(), here.end());
            if (here.empty())
                throw Error(ErrorKind::Format, m_where,
                    "no chunk covers rows [" + std::to_string(a) + ", " + std::to_string(b) + ") of "
                        + shapeText(shape));
            segment(a, b, here);
        }
    }

private:
    int64_t firstRow(size_t i) const { return m_t.chunks.offsetsOf(i)[0]; }
    int64_t endRow(size_t i) const { return m_t.chunks.offsetsOf(i)[0] + m_t.chunks.sizesOf(i)[0]; }

    /// chunk i's slot in m_live (in table order, so a chunk's slot is found by binary search)
    size_t slotOf(size_t i) const
    {
        return static_cast<size_t>(std::lower_bound(m_live.begin(), m_live.end(), i) - m_live.begin());
    }

    /// chunk i's data, read
    const ChunkData& data(size_t i)
    {
        std::optional<ChunkData>& r = m_resolved[slotOf(i)];
        if (!r) {
            r = ChunkReader::resolve(m_checkpoint, m_entry, m_t.chunks[i]);
            if (m_t.chunks.sizesOf(i) != r->sizes)
                throw Error(ErrorKind::Format, m_where, "chunk data shape differs from its metadata");
        }
        return *r;
    }

    /// a chunk the dim-0 path reads rows of: a remote one is located only, and the rows read are fetched (a reshard
    /// reads each source byte once, not the whole source chunk for every target box it feeds)
    const ChunkData& located(size_t i)
    {
        const size_t slot = slotOf(i);
        if (m_resolved[slot]) return *m_resolved[slot];
        std::optional<ChunkData>& r = m_locatedOnly[slot];
        if (!r) {
            r = ChunkReader::resolve(m_checkpoint, m_entry, m_t.chunks[i], true);
            if (m_t.chunks.sizesOf(i) != r->sizes)
                throw Error(ErrorKind::Format, m_where, "chunk data shape differs from its metadata");
        }
        return *r;
    }

    void emit(const uint8_t* p, size_t n)
    {
        m_sink(p, n);
        m_checkpoint.files->checkFaults(); // the sink read mapped bytes: stop at the first block a fault zeroed
        m_produced += n;
        if (m_onBytes) m_onBytes(m_produced);
    }

    /// rows [a, b), which the chunks @p here cover, block by block
    void segment(int64_t a, int64_t b, const std::vector<size_t>& here)
    {
        const auto& shape = m_t.shape;
        const size_t ndim = shape.size();
        const size_t elem = dtypeSize(m_t.dtype);
        // zero-copy: one chunk spanning the full rows, stored densely in little-endian order
        bool direct = false;
        if (here.size() == 1) {
            const auto& c = m_t.chunks[here[0]];
            bool fullRows = true;
            for (size_t d = 1; d < ndim; ++d)
                fullRows = fullRows && c.offsets[d] == 0 && c.sizes[d] == shape[d];
            if (fullRows) {
                const ChunkData& d = located(here[0]);
                direct = d.isContiguous() && (!d.bigEndian || elem == 1);
            }
        }
        const int64_t rowsPerBlock
            = std::max<int64_t>(1, static_cast<int64_t>(m_maxBlock / std::max<uint64_t>(m_rowBytes, 1)));
        for (int64_t r0 = a; r0 < b; r0 += rowsPerBlock) {
            m_progress.checkCancelled();
            const int64_t r1 = std::min(b, r0 + rowsPerBlock);
            if (direct) {
                directRows(here[0], r0, r1, b);
                continue;
            }
            checkRowsCovered(here, r0, r1);
            if (m_rowBytes > m_maxBlock)
                emitRowInBoxes(r0, here);
            else
                copyRows(here, r0, r1);
        }
    }

    /// rows [r0, r1) of one chunk that stores them densely (the box ends at row @p boxEnd)
    void directRows(size_t chunk, int64_t r0, int64_t r1, int64_t boxEnd)
    {
        const auto& c = m_t.chunks[chunk];
        const ChunkData& d = located(chunk);
        const uint8_t* p = d.data() + static_cast<uint64_t>(r0 - c.offsets[0]) * m_rowBytes;
        const uint64_t len = static_cast<uint64_t>(r1 - r0) * m_rowBytes;
        if (d.deferred) { // these rows only, fetched now and their memory given back once copied
            m_rowsBuffer.resize(static_cast<size_t>(len));
            // read ahead within this box only: the chunk's other rows may feed another box, read before
            const uint8_t* end = d.data() + static_cast<uint64_t>(boxEnd - c.offsets[0]) * m_rowBytes;
            d.file->copyOut(d.file->offsetOf(p), len, m_rowsBuffer.data(), d.file->offsetOf(end));
            emit(m_rowsBuffer.data(), static_cast<size_t>(len));
            return;
        }
        if (d.owned) { // a remote chunk's own copy: no file region to hand on or give back
            emit(p, static_cast<size_t>(len));
            return;
        }
        const uint64_t fileOffset = d.file->offsetOf(p);
        if (m_region) {
            // the consumer copies the region itself (in the kernel): no bytes through this process
            m_region(*d.file, fileOffset, len);
            m_produced += len;
            if (m_onBytes) m_onBytes(m_produced);
            return;
        }
        d.file->adviseSequential(fileOffset, len);
        emit(p, static_cast<size_t>(len));
        d.file->release(fileOffset, len);
    }

    /// before a buffer for rows [r0, r1) is allocated, the chunks (resolved: their stored shapes match the metadata)
    /// must cover them exactly; a damaged global shape must not become a huge allocation
    void checkRowsCovered(const std::vector<size_t>& here, int64_t r0, int64_t r1)
    {
        const int64_t want = (r1 - r0) * m_rowElems;
        int64_t claimed = 0;
        bool overlap = false;
        for (size_t i : here) {
            const auto& c = m_t.chunks[i];
            const int64_t rows = std::min(r1, c.offsets[0] + c.sizes[0]) - std::max(r0, c.offsets[0]);
            if (rows <= 0) continue;
            data(i);
            const int64_t part = rows * (c.numel() / c.sizes[0]);
            overlap = overlap || part > want - claimed;
            if (!overlap) claimed += part;
        }
        if (overlap || claimed != want)
            throw Error(ErrorKind::Format, m_where,
                std::string(overlap ? "chunks overlap" : "chunks leave a gap") + " in rows [" + std::to_string(r0)
                    + ", " + std::to_string(r1) + ") of " + shapeText(m_t.shape));
    }

    /// rows [r0, r1) assembled in one buffer from the chunks @p here
    void copyRows(const std::vector<size_t>& here, int64_t r0, int64_t r1)
    {
        const auto& shape = m_t.shape;
        const size_t ndim = shape.size();
        const size_t elem = dtypeSize(m_t.dtype);
        const int64_t want = (r1 - r0) * m_rowElems;
        std::vector<int64_t> blockShape(shape);
        blockShape[0] = r1 - r0;
        m_buffer.assign(static_cast<size_t>(static_cast<uint64_t>(r1 - r0) * m_rowBytes), 0);
        int64_t covered = 0;
        for (size_t i : here) {
            const auto& c = m_t.chunks[i];
            std::vector<int64_t> srcBegin(ndim, 0), extent(ndim), dstBegin(ndim);
            const int64_t lo = std::max(r0, c.offsets[0]);
            const int64_t hi = std::min(r1, c.offsets[0] + c.sizes[0]);
            if (lo >= hi) continue;
            srcBegin[0] = lo - c.offsets[0];
            extent[0] = hi - lo;
            dstBegin[0] = lo - r0;
            int64_t vol = extent[0];
            for (size_t d = 1; d < ndim; ++d) {
                extent[d] = c.sizes[d];
                dstBegin[d] = c.offsets[d];
                vol *= extent[d];
            }
            const ChunkData& cd = data(i);
            aten::copyBlock(cd, srcBegin, extent, m_buffer.data(), blockShape, dstBegin);
            covered += vol;
            if (cd.isContiguous() && !cd.owned) {
                // the rows just copied are done with
                int64_t chunkRow = 1;
                for (size_t d = 1; d < ndim; ++d)
                    chunkRow *= c.sizes[d];
                const uint64_t rb = static_cast<uint64_t>(chunkRow) * elem;
                cd.file->release(cd.file->offsetOf(cd.data()) + static_cast<uint64_t>(srcBegin[0]) * rb,
                    static_cast<uint64_t>(extent[0]) * rb);
            }
        }
        if (covered != want)
            throw Error(ErrorKind::Format, m_where,
                std::string(covered < want ? "chunks leave a gap" : "chunks overlap") + " in rows ["
                    + std::to_string(r0) + ", " + std::to_string(r1) + ") of " + shapeText(shape) + " ("
                    + std::to_string(covered) + " of " + std::to_string(want) + " elements covered)");
        emit(m_buffer.data(), m_buffer.size());
    }

    /// A row larger than one block (a huge inner extent, such as a [1, 10^10] broadcast saved with stride 0, whose
    /// file is tiny) is cut into boxes of at most one block, emitted in row-major order: the outermost dim k >= 1
    /// whose trailing extent fits a block is split into runs, the dims between 1 and k are walked one index at a time.
    void emitRowInBoxes(int64_t row, const std::vector<size_t>& here)
    {
        const auto& shape = m_t.shape;
        const size_t ndim = shape.size();
        const size_t elem = dtypeSize(m_t.dtype);
        size_t k = ndim - 1;
        uint64_t trailing = elem; // bytes of one index of dim k (dims k+1.. whole)
        for (size_t d = 1; d < ndim; ++d) {
            uint64_t b = elem;
            for (size_t e = d + 1; e < ndim; ++e)
                b *= static_cast<uint64_t>(shape[e]);
            if (b <= m_maxBlock) {
                k = d;
                trailing = b;
                break;
            }
        }
        const int64_t run = std::max<int64_t>(1, static_cast<int64_t>(m_maxBlock / trailing));
        std::vector<int64_t> off(ndim, 0), size(shape);
        off[0] = row;
        size[0] = 1;
        for (size_t d = 1; d < k; ++d)
            size[d] = 1;
        auto dataOf = [this](size_t i) -> const ChunkData& { return data(i); };
        while (true) {
            for (off[k] = 0; off[k] < shape[k]; off[k] += run) {
                m_progress.checkCancelled();
                size[k] = std::min(run, shape[k] - off[k]);
                int64_t want = 1;
                for (auto v : size)
                    want *= v;
                m_buffer.assign(static_cast<size_t>(want) * elem, 0);
                const int64_t covered = copyIntoBox(m_t, here, dataOf, off, size, m_buffer.data(), m_progress);
                if (covered != want)
                    throw Error(ErrorKind::Format, m_where,
                        std::string(covered < want ? "chunks leave a gap" : "chunks overlap") + " in the box "
                            + shapeText(off) + "+" + shapeText(size) + " of " + shapeText(shape));
                emit(m_buffer.data(), m_buffer.size());
            }
            // the next index of dims 1 .. k-1 (odometer); done when it wraps around
            bool done = true;
            for (size_t d = k; d-- > 1;) {
                if (++off[d] < shape[d]) {
                    done = false;
                    break;
                }
                off[d] = 0;
            }
            if (done) return;
        }
    }

    /// a remote DCP item read whole here is done once nothing points into it: its blocks may go (a gather of many
    /// small items held them all). A member before the chunks' data, so that it runs after they are gone.
    struct ItemsRead
    {
        const Checkpoint& checkpoint;
        const TensorEntry& tensor;
        std::vector<size_t> chunks;
        ~ItemsRead()
        {
            for (size_t i : chunks)
                ChunkReader::itemRead(checkpoint, tensor.chunks[i]);
        }
    };

    const Checkpoint& m_checkpoint;
    const Entry& m_entry;
    const TensorEntry& m_t;
    const std::string m_where;
    const std::vector<size_t> m_live; ///< the chunks the rows meet, in table order
    const int64_t m_rowBegin, m_rowEnd;
    const size_t m_maxBlock;
    const uint64_t m_readAhead;
    const Sink& m_sink;
    const Progress& m_progress;
    const std::function<void(uint64_t)>& m_onBytes;
    const RegionSink& m_region;
    ItemsRead m_itemsRead;
    std::vector<std::optional<ChunkData>> m_resolved; ///< per chunk of m_live: read
    std::vector<std::optional<ChunkData>> m_locatedOnly; ///< per chunk of m_live: located, not read (located())
    std::vector<uint8_t> m_rowsBuffer, m_buffer;
    int64_t m_rowElems = 1;
    uint64_t m_rowBytes = 0;
    uint64_t m_produced = 0;
};

} // namespace

void TensorAssembler::streamRows(int64_t rowBegin, int64_t rowEnd, const Sink& sink, const Progress& progress,
    const std::function<void(uint64_t)>& onBytes, const RegionSink& region)
{
    const TensorEntry& t = *m_entry.tensor;
    const auto& shape = t.shape;
    const std::string where = m_checkpoint.path + ": '" + m_entry.key + "'";
    if (t.dtype == DType::Unknown) throw Error(ErrorKind::Format, where, "tensor has an unknown dtype");
    for (auto s : shape)
        if (s < 0) throw Error(ErrorKind::Format, where, "tensor has a negative dimension " + shapeText(shape));
    if (t.numel() == 0) return;
    if (!shape.empty() && rowEnd > rowBegin)
        refuseExpansion(
            t, t.nbytes() / static_cast<uint64_t>(shape[0]) * static_cast<uint64_t>(rowEnd - rowBegin), where);
    std::vector<size_t> live;
    chunksMeeting(rowBegin, rowEnd, where, live);
    RowStream rows(m_checkpoint, m_entry, where, std::move(live), rowBegin, rowEnd, m_maxBlock, m_readAhead, sink,
        progress, onBytes, region);
    if (shape.empty())
        rows.scalar();
    else
        rows.rows();
}

std::optional<BroadcastStorage> broadcastStorageOf(const Entry& entry)
{
    if (!entry.isTensor()) return std::nullopt;
    const TensorEntry& t = *entry.tensor;
    if (t.chunks.size() != 1 || !expansionRefused(t, t.nbytes())) return std::nullopt;
    TensorChunk chunk = t.chunks[0];
    if (chunk.sizes.size() != t.shape.size() || chunk.source.strides.size() != t.shape.size()) return std::nullopt;
    BroadcastStorage view;
    std::vector<int64_t> shape = t.shape;
    for (size_t d = 0; d < shape.size(); ++d) {
        if (chunk.offsets[d] != 0 || chunk.sizes[d] != shape[d]) return std::nullopt; // a part of a larger tensor
        if (chunk.source.strides[d] != 0 || shape[d] <= 1) continue;
        view.repeats *= shape[d]; // at most numel(), which fits
        shape[d] = chunk.sizes[d] = 1;
    }
    view.stored.key = entry.key;
    view.stored.kind = EntryKind::Tensor;
    TensorEntry stored;
    stored.shape = std::move(shape);
    stored.dtype = t.dtype;
    stored.chunks.useFileTable(t.chunks.fileTable());
    stored.chunks.push_back(chunk);
    view.stored.tensor = std::move(stored);
    return view;
}

std::string hashTensor(const Checkpoint& checkpoint, const Entry& entry, const Progress& progress,
    const std::function<void(uint64_t)>& onBytes)
{
    if (const auto view = broadcastStorageOf(entry)) return hashTensor(checkpoint, view->stored, progress, onBytes);
    Sha256 h;
    TensorAssembler(checkpoint, entry).stream([&](const uint8_t* p, size_t n) { h.update(p, n); }, progress, onBytes);
    return h.hexDigest();
}

} // namespace optscope
