// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/flat_param_layout.h"
#include "optscope/base/error.h"

#include <algorithm>

namespace optscope {

FlatParamLayout FlatParamLayout::compute(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& params, int worldSize, int64_t alignedNumel)
{
    if (worldSize < 1) throw Error(ErrorKind::Usage, {}, "world size must be at least 1");
    if (alignedNumel < 0) throw Error(ErrorKind::Usage, {}, "alignment must not be negative");
    FlatParamLayout L;
    L.worldSize = worldSize;
    L.alignedNumel = alignedNumel;
    int64_t total = 0;
    auto pad = [&](int64_t n) {
        L.segments.push_back({true, -1, total, n});
        total += n;
    };
    for (const auto& [fqn, shape] : params) {
        if (alignedNumel > 0) {
            const int64_t toPad = alignedNumel - total % alignedNumel;
            if (toPad > 0 && toPad < alignedNumel) pad(toPad);
        }
        Member m;
        m.fqn = fqn;
        m.shape = shape;
        m.numel = 1;
        for (auto s : shape)
            m.numel *= s;
        m.offset = total;
        L.segments.push_back({false, static_cast<int>(L.members.size()), total, m.numel});
        total += m.numel;
        L.members.push_back(std::move(m));
    }
    if (alignedNumel > 0) {
        const int64_t toPad = worldSize - total % worldSize;
        if (toPad > 0 && toPad < worldSize) pad(toPad);
    }
    L.unpaddedNumel = total;
    L.shardNumel = (total + worldSize - 1) / worldSize;
    return L;
}

int64_t FlatParamLayout::rankPadding(int rank) const
{
    const int64_t start = std::min(unpaddedNumel, rankStart(rank));
    const int64_t end = std::min(unpaddedNumel, rankStart(rank) + shardNumel);
    return shardNumel - (end - start);
}

std::vector<FlatParamLayout::ShardParamInfo> FlatParamLayout::shardParamInfos(int rank) const
{
    // as FlatParamHandle.shard -> _get_shard_metadata: the rank's interval is [start, end] inclusive in the padded
    // unsharded flat parameter
    const int64_t start = rankStart(rank);
    const int64_t end = start + shardNumel - 1;
    std::vector<ShardParamInfo> out;
    for (const auto& seg : segments) {
        if (seg.padding) continue;
        ShardParamInfo info;
        const int64_t pStart = seg.offset;
        const int64_t pEnd = seg.offset + seg.numel - 1;
        if (start <= pEnd && end >= pStart && seg.numel > 0) {
            info.inShard = true;
            if (start <= pStart) {
                info.intraStart = 0;
                info.offsetInShard = pStart - start;
            } else {
                info.intraStart = start - pStart;
                info.offsetInShard = 0;
            }
            info.intraEnd = std::min(pEnd, end) - pStart;
            info.numelInShard = info.intraEnd - info.intraStart + 1;
        }
        out.push_back(info);
    }
    return out;
}

Dim0Chunk chunkDim0(int64_t n, int world, int rank, ShardingStyle style)
{
    Dim0Chunk c;
    const int64_t full = world > 0 ? (n + world - 1) / world : n;
    const int64_t start = full * rank;
    if (style == ShardingStyle::Fsdp1) {
        // torch.chunk returns only the non-empty pieces: ranks past them hold nothing (n == 0: one empty chunk)
        if (start >= n && !(n == 0 && rank == 0)) {
            c.exists = false;
            c.offset = n;
            c.size = 0;
            return c;
        }
    }
    c.offset = std::min(n, start);
    c.size = std::max<int64_t>(0, std::min(n, start + full) - c.offset);
    return c;
}

std::vector<int64_t> dim0PaddingRows(const std::vector<int64_t>& shape, const std::vector<int>& ranks,
    const std::vector<std::vector<int64_t>>& offsets, const std::vector<std::vector<int64_t>>& sizes, int world)
{
    if (shape.empty() || ranks.empty() || world < 2) return {};
    const int64_t n = shape[0];
    const int64_t full = chunkDim0(n, world, 0).size;
    if (full <= 0) return {};
    std::vector<int> seen(static_cast<size_t>(world), 0);
    for (size_t i = 0; i < ranks.size(); ++i) {
        const int r = ranks[i];
        if (r < 0 || r >= world || seen[static_cast<size_t>(r)]++) return {};
        for (size_t d = 1; d < sizes[i].size(); ++d)
            if (offsets[i][d] != 0 || sizes[i][d] != shape[d]) return {};
        const Dim0Chunk c = chunkDim0(n, world, r);
        if (offsets[i][0] != c.offset || sizes[i][0] != c.size) return {};
    }
    std::vector<int64_t> padding(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r)
        padding[static_cast<size_t>(r)] = full - chunkDim0(n, world, r).size;
    return padding;
}

std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& shape)
{
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;)
        strides[d - 1] = strides[d] * shape[d];
    return strides;
}

namespace {

/// [begin, end) relative to the sub-tensor at dimension @p dim whose leading indices are fixed in @p prefix
void flatBoxes(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, size_t dim,
    std::vector<int64_t>& prefix, int64_t base, int64_t begin, int64_t end, std::vector<FlatRangeBox>& out)
{
    if (begin >= end) return;
    const size_t ndim = shape.size();
    const int64_t inner = strides[dim]; // elements per index of this dimension
    auto emit = [&](int64_t lo, int64_t hi) { // indices [lo, hi) of this dimension, the rest whole
        FlatRangeBox b;
        b.offsets = prefix;
        b.sizes.assign(prefix.size(), 1);
        b.offsets.push_back(lo);
        b.sizes.push_back(hi - lo);
        for (size_t d = dim + 1; d < ndim; ++d) {
            b.offsets.push_back(0);
            b.sizes.push_back(shape[d]);
        }
        b.flatStart = base + lo * inner;
        out.push_back(std::move(b));
    };
    auto row = [&](int64_t index, int64_t lo, int64_t hi) { // part of one index: recurse into the next dimension
        prefix.push_back(index);
        flatBoxes(shape, strides, dim + 1, prefix, base + index * inner, lo, hi, out);
        prefix.pop_back();
    };
    if (dim + 1 == ndim || (begin % inner == 0 && end % inner == 0)) {
        emit(begin / inner, end / inner);
        return;
    }
    const int64_t first = begin / inner;
    const int64_t last = end / inner; // the row holding end (partial) or one past the full rows
    if (first == last) {
        row(first, begin - first * inner, end - first * inner);
        return;
    }
    int64_t fullFrom = first;
    if (begin % inner != 0) {
        row(first, begin - first * inner, inner);
        fullFrom = first + 1;
    }
    if (fullFrom < last) emit(fullFrom, last);
    if (end % inner != 0) row(last, 0, end - last * inner);
}

} // namespace

std::vector<FlatRangeBox> flatRangeBoxes(const std::vector<int64_t>& shape, int64_t begin, int64_t end)
{
    std::vector<FlatRangeBox> out;
    if (begin >= end) return out;
    if (shape.empty()) {
        out.push_back({});
        return out;
    }
    for (auto s : shape)
        if (s <= 0) return out;
    std::vector<int64_t> prefix;
    flatBoxes(shape, contiguousStrides(shape), 0, prefix, 0, begin, end, out);
    return out;
}

} // namespace optscope
