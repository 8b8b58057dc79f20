// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/shard_layout.h"

#include <algorithm>
#include <numeric>

namespace optscope {

int64_t TensorBox::numel() const
{
    int64_t n = 1;
    for (auto s : sizes)
        n *= s;
    return n;
}

std::string boxText(const TensorBox& box)
{
    std::string t = "[";
    for (size_t d = 0; d < box.offsets.size(); ++d) {
        if (d) t += ", ";
        t += std::to_string(box.offsets[d]) + ":" + std::to_string(box.offsets[d] + box.sizes[d]);
    }
    return t + "]";
}

bool intersect(const TensorBox& a, const TensorBox& b, TensorBox& out)
{
    out.offsets.resize(a.offsets.size());
    out.sizes.resize(a.offsets.size());
    for (size_t d = 0; d < a.offsets.size(); ++d) {
        const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
        const int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
        if (hi <= lo) return false;
        out.offsets[d] = lo;
        out.sizes[d] = hi - lo;
    }
    return true;
}

namespace {

constexpr int64_t kMaxGridCells = 1 << 22;

/// every chunk's box and rank into @p L, those outside the tensor's shape in its outOfBounds; the others that hold
/// elements, by index
std::vector<size_t> collectChunks(const TensorEntry& tensor, ShardLayout& L)
{
    const size_t ndim = L.shape.size();
    std::vector<size_t> valid; // in bounds, non-empty
    const ChunkTable& table = tensor.chunks;
    L.ranks.reserve(table.size());
    L.chunks.reserve(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
        // through the table's accessors: a TensorChunk value per chunk copied its file name and strides too
        const IntSpan offsets = table.offsetsOf(i), sizes = table.sizesOf(i);
        L.ranks.push_back(table.rank(i));
        L.chunks.push_back({offsets.vec(), sizes.vec()});
        bool ok = offsets.size() == ndim && sizes.size() == ndim;
        for (size_t d = 0; ok && d < ndim; ++d)
            ok = offsets[d] >= 0 && sizes[d] >= 0 && offsets[d] + sizes[d] <= L.shape[d];
        if (!ok) {
            L.outOfBounds.push_back(i);
            continue;
        }
        if (table.numelOf(i) > 0) valid.push_back(i);
    }
    return valid;
}

/// overlaps of the @p valid chunks (at least 1-dim): pairs whose boxes intersect. A region listed k times (replicas,
/// or a hostile .metadata: 2,000 entries for one row) is k - 1 pairs, each repeat against its first listing, not
/// k(k-1)/2: chunks with one box are grouped first, and only one of each box takes part in the sweep (sorted by dim-0
/// start, so that it stops early) for partial overlaps, whose list stops at kMaxOverlapPairs (overlapsTruncated).
void findOverlaps(const std::vector<size_t>& valid, ShardLayout& L)
{
    std::vector<size_t> byBox(valid);
    auto boxLess = [&](size_t a, size_t b) {
        const TensorBox& x = L.chunks[a];
        const TensorBox& y = L.chunks[b];
        return x.offsets != y.offsets ? x.offsets < y.offsets : x.sizes != y.sizes ? x.sizes < y.sizes : a < b;
    };
    std::sort(byBox.begin(), byBox.end(), boxLess);
    std::vector<size_t> byStart; // one chunk of each distinct box, the first listed
    for (size_t k = 0; k < byBox.size();) {
        size_t end = k + 1;
        while (end < byBox.size() && L.chunks[byBox[end]].offsets == L.chunks[byBox[k]].offsets
            && L.chunks[byBox[end]].sizes == L.chunks[byBox[k]].sizes)
            ++end;
        for (size_t j = k + 1; j < end; ++j)
            L.overlaps.push_back({byBox[k], byBox[j], L.chunks[byBox[k]]});
        byStart.push_back(byBox[k]);
        k = end;
    }
    std::sort(byStart.begin(), byStart.end(),
        [&](size_t a, size_t b) { return L.chunks[a].offsets[0] < L.chunks[b].offsets[0]; });
    size_t partial = 0;
    for (size_t x = 0; x < byStart.size() && !L.overlapsTruncated; ++x) {
        const TensorBox& a = L.chunks[byStart[x]];
        for (size_t y = x + 1; y < byStart.size(); ++y) {
            const TensorBox& b = L.chunks[byStart[y]];
            if (b.offsets[0] >= a.offsets[0] + a.sizes[0]) break;
            TensorBox region;
            if (!intersect(a, b, region)) continue;
            if (++partial > ShardLayout::kMaxOverlapPairs) {
                L.overlapsTruncated = true;
                break;
            }
            L.overlaps.push_back({std::min(byStart[x], byStart[y]), std::max(byStart[x], byStart[y]), region});
        }
    }
}

/// the grid of all chunk boundaries per dimension (coordinate compression) and its number of cells, or more than
/// kMaxGridCells when that is too many to enumerate
int64_t boundaryGrid(const std::vector<size_t>& valid, const ShardLayout& L, std::vector<std::vector<int64_t>>& cuts)
{
    const size_t ndim = L.shape.size();
    cuts.assign(ndim, {});
    int64_t cells = 1;
    for (size_t d = 0; d < ndim; ++d) {
        cuts[d] = {0, L.shape[d]};
        for (size_t i : valid) {
            cuts[d].push_back(L.chunks[i].offsets[d]);
            cuts[d].push_back(L.chunks[i].offsets[d] + L.chunks[i].sizes[d]);
        }
        std::sort(cuts[d].begin(), cuts[d].end());
        cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
        const int64_t n = static_cast<int64_t>(cuts[d].size()) - 1;
        cells = cells > kMaxGridCells / std::max<int64_t>(n, 1) ? kMaxGridCells + 1 : cells * n;
    }
    return cells;
}

/// coverage by volume, where the grid has too many cells: exact when there are no overlaps (pairs of partial overlaps
/// sharing elements are subtracted twice, and a truncated list misses some)
void coverByVolume(const std::vector<size_t>& valid, ShardLayout& L)
{
    int64_t sum = 0;
    for (size_t i : valid)
        sum += L.chunks[i].numel();
    for (const auto& o : L.overlaps)
        sum -= o.region.numel();
    L.coveredElements = std::min(sum, L.totalElements);
    L.gapsExact = L.coveredElements >= L.totalElements && !L.overlapsTruncated;
}

/// coverage cell by cell of the boundary grid: the covered volume, and the uncovered cells as gaps, merged along dim 0
/// when the rest of the box matches
void coverByGrid(
    const std::vector<size_t>& valid, const std::vector<std::vector<int64_t>>& cuts, int64_t cells, ShardLayout& L)
{
    const size_t ndim = L.shape.size();
    std::vector<int64_t> dims(ndim);
    for (size_t d = 0; d < ndim; ++d)
        dims[d] = static_cast<int64_t>(cuts[d].size()) - 1;
    std::vector<uint8_t> covered(static_cast<size_t>(cells), 0);
    auto cellIndex = [&](const std::vector<int64_t>& idx) {
        int64_t flat = 0;
        for (size_t d = 0; d < ndim; ++d)
            flat = flat * dims[d] + idx[d];
        return static_cast<size_t>(flat);
    };
    for (size_t i : valid) {
        const TensorBox& b = L.chunks[i];
        std::vector<int64_t> lo(ndim), hi(ndim);
        for (size_t d = 0; d < ndim; ++d) {
            lo[d] = std::lower_bound(cuts[d].begin(), cuts[d].end(), b.offsets[d]) - cuts[d].begin();
            hi[d] = std::lower_bound(cuts[d].begin(), cuts[d].end(), b.offsets[d] + b.sizes[d]) - cuts[d].begin();
        }
        std::vector<int64_t> idx(lo);
        while (true) {
            covered[cellIndex(idx)] = 1;
            size_t d = ndim;
            while (d-- > 0) {
                if (++idx[d] < hi[d]) break;
                idx[d] = lo[d];
            }
            if (d == static_cast<size_t>(-1)) break;
        }
    }
    std::vector<int64_t> idx(ndim, 0);
    for (int64_t c = 0; c < cells; ++c) {
        int64_t rem = c;
        for (size_t d = ndim; d-- > 0;) {
            idx[d] = rem % dims[d];
            rem /= dims[d];
        }
        TensorBox cell;
        for (size_t d = 0; d < ndim; ++d) {
            cell.offsets.push_back(cuts[d][idx[d]]);
            cell.sizes.push_back(cuts[d][idx[d] + 1] - cuts[d][idx[d]]);
        }
        if (covered[static_cast<size_t>(c)]) {
            L.coveredElements += cell.numel();
            continue;
        }
        if (cell.numel() == 0) continue;
        bool merged = false;
        for (auto& g : L.gaps) {
            bool sameRest = g.offsets[0] + g.sizes[0] == cell.offsets[0];
            for (size_t d = 1; sameRest && d < ndim; ++d)
                sameRest = g.offsets[d] == cell.offsets[d] && g.sizes[d] == cell.sizes[d];
            if (sameRest) {
                g.sizes[0] += cell.sizes[0];
                merged = true;
                break;
            }
        }
        if (!merged) L.gaps.push_back(std::move(cell));
    }
}

} // namespace

ShardLayout ShardLayout::of(const TensorEntry& tensor)
{
    ShardLayout L;
    L.shape = tensor.shape;
    L.totalElements = tensor.numel();
    const std::vector<size_t> valid = collectChunks(tensor, L);
    if (L.shape.empty()) { // 0-dim: every chunk holds the one element
        if (valid.size() > 1)
            for (size_t k = 1; k < valid.size(); ++k)
                L.overlaps.push_back({valid[0], valid[k], TensorBox {}});
        L.coveredElements = valid.empty() ? 0 : 1;
        if (valid.empty()) L.gaps.push_back(TensorBox {});
        return L;
    }
    findOverlaps(valid, L);
    if (L.totalElements == 0) return L;
    std::vector<std::vector<int64_t>> cuts;
    const int64_t cells = boundaryGrid(valid, L, cuts);
    if (cells > kMaxGridCells)
        coverByVolume(valid, L);
    else
        coverByGrid(valid, cuts, cells, L);
    return L;
}

} // namespace optscope
