// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"

#include <cstdint>
#include <vector>

namespace optscope {

/// An axis-aligned box of a tensor: [offsets, offsets + sizes) per dimension.
struct TensorBox
{
    std::vector<int64_t> offsets;
    std::vector<int64_t> sizes;
    int64_t numel() const;
    bool empty() const { return numel() == 0; }
};

/// the overlap of two boxes of the same rank in @p out; false when they do not overlap (two 0-dim boxes always do)
bool intersect(const TensorBox& a, const TensorBox& b, TensorBox& out);

/// Which rank holds which slice of one tensor, and what is wrong with the chunk set: chunks outside the tensor,
/// overlapping chunks, regions no chunk covers. Pure geometry over the metadata; reads no tensor data.
struct ShardLayout
{
    struct Overlap
    {
        size_t first = 0; ///< chunk indices
        size_t second = 0;
        TensorBox region; ///< their intersection
    };

    std::vector<int64_t> shape;
    std::vector<int> ranks; ///< per chunk, as in the entry
    std::vector<TensorBox> chunks; ///< per chunk
    std::vector<size_t> outOfBounds; ///< chunks reaching outside the tensor (or of the wrong rank)
    /// chunks whose boxes intersect: a region listed k times is k - 1 pairs (each repeat with the first listing,
    /// region = the box); then pairs of distinct boxes that partly overlap, at most kMaxOverlapPairs of them
    std::vector<Overlap> overlaps;
    static constexpr size_t kMaxOverlapPairs = 4096;
    bool overlapsTruncated = false; ///< more partly overlapping pairs than kMaxOverlapPairs: the rest not listed
    /// uncovered regions; exact when the chunk grid is small (always for dim-0 sharding), otherwise one box per
    /// uncovered grid cell may be merged less, and gapsExact is false only if the grid was too large to enumerate
    std::vector<TensorBox> gaps;
    bool gapsExact = true;
    int64_t coveredElements = 0; ///< elements covered at least once
    int64_t totalElements = 0;

    bool complete() const
    {
        return outOfBounds.empty() && overlaps.empty() && !overlapsTruncated && gaps.empty() && gapsExact;
    }

    static ShardLayout of(const TensorEntry& tensor);
};

/// "[0:2, 0:6]" style rendering of a box
std::string boxText(const TensorBox& box);

} // namespace optscope
