// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// FSDP1 FlatParameter layout (torch/distributed/fsdp/_flat_param.py, FlatParamHandle), computed offline.
//
//  * One FlatParameter per FSDP unit: its original parameters, in module.named_modules() x named_parameters(recurse=
//    False) order, flattened and concatenated.
//  * use_orig_params=True aligns addresses: before each parameter, pad with (aligned - total % aligned) elements when
//    that is in (0, aligned), aligned = 16 bytes / element size of the forward/backward (mixed-precision) dtype; after
//    the last one, pad to a multiple of the world size. use_orig_params=False pads nothing here. The result is
//    _unpadded_unsharded_size.
//  * Sharding (_get_unpadded_shard/_get_shard): torch.flatten(flat).chunk(W); rank r takes chunk r (empty if there
//    are fewer chunks) right-padded to the size of chunk 0, so every rank holds ceil(N / W) elements and rank r covers
//    [r*C, (r+1)*C) of the padded unsharded flat parameter.
//  * _shard_param_infos per rank and original parameter: in_shard, offset_in_shard, numel_in_shard and the inclusive
//    intra-parameter range [intra_param_start_idx, intra_param_end_idx], padding skipped (_get_shard_metadata).

#include <cstdint>
#include <string>
#include <vector>

namespace optscope {

struct FlatParamLayout
{
    struct Member
    {
        std::string fqn;
        std::vector<int64_t> shape;
        int64_t numel = 0;
        int64_t offset = 0; ///< first element in the unsharded flat parameter
    };
    /// _ShardParamInfo (intra range inclusive, as PyTorch stores it)
    struct ShardParamInfo
    {
        bool inShard = false;
        int64_t offsetInShard = 0;
        int64_t numelInShard = 0;
        int64_t intraStart = 0;
        int64_t intraEnd = -1;
        bool operator==(const ShardParamInfo& o) const
        {
            return inShard == o.inShard && offsetInShard == o.offsetInShard && numelInShard == o.numelInShard
                && intraStart == o.intraStart && intraEnd == o.intraEnd;
        }
    };
    struct Segment
    {
        bool padding = false;
        int member = -1; ///< index into members, -1 for padding
        int64_t offset = 0;
        int64_t numel = 0;
    };

    std::vector<Member> members;
    std::vector<Segment> segments; ///< members and padding in flat order (_numels_with_padding, _is_padding_mask)
    int worldSize = 1;
    int64_t alignedNumel = 0; ///< 0 when use_orig_params=False
    int64_t unpaddedNumel = 0; ///< _unpadded_unsharded_size (includes alignment padding)
    int64_t shardNumel = 0; ///< elements each rank holds (ceil(unpadded / world size))

    int64_t paddedNumel() const { return shardNumel * worldSize; }
    /// [start, end) of rank r in the padded unsharded flat parameter
    int64_t rankStart(int rank) const { return shardNumel * rank; }
    /// elements of rank r's shard that are right padding (_shard_numel_padded)
    int64_t rankPadding(int rank) const;
    std::vector<ShardParamInfo> shardParamInfos(int rank) const;

    /// @p params in flattening order; @p alignedNumel = 0 for use_orig_params=False, 16 / element size otherwise
    static FlatParamLayout compute(
        const std::vector<std::pair<std::string, std::vector<int64_t>>>& params, int worldSize, int64_t alignedNumel);
    /// alignment PyTorch uses for use_orig_params=True: 16 bytes / element size of the fwd/bwd dtype
    static int64_t alignedNumelFor(size_t elementSize) { return static_cast<int64_t>(16 / elementSize); }
};

/// torch.chunk along dim 0 of size @p n over @p world ranks, for rank @p rank: FSDP2 / DTensor Shard(0) gives every
/// rank a chunk (empty ones at offset n); ShardedTensor (FSDP1 SHARDED_STATE_DICT) only the first ceil-sized ones.
struct Dim0Chunk
{
    int64_t offset = 0;
    int64_t size = 0;
    bool exists = true; ///< false: this rank holds no chunk at all (FSDP1 layout past the last chunk)
};
enum class ShardingStyle { Fsdp2, Fsdp1 };
Dim0Chunk chunkDim0(int64_t n, int world, int rank, ShardingStyle style = ShardingStyle::Fsdp2);

/// The rows of padding each rank's chunk carries when the chunks (offsets/sizes per chunk, rank per chunk) are exactly
/// chunkDim0 of dim 0 over @p world ranks (FSDP pads every chunk to ceil(n / world) rows); empty when they are not.
std::vector<int64_t> dim0PaddingRows(const std::vector<int64_t>& shape, const std::vector<int>& ranks,
    const std::vector<std::vector<int64_t>>& offsets, const std::vector<std::vector<int64_t>>& sizes, int world);

/// One rectangular piece of a flat element range of a row-major tensor.
struct FlatRangeBox
{
    std::vector<int64_t> offsets;
    std::vector<int64_t> sizes;
    int64_t flatStart = 0; ///< row-major index of the box's first element in the tensor
};
/// Elements [@p begin, @p end) of a row-major tensor of @p shape as rectangular boxes in flat order (a partial first
/// row, a block of full rows, a partial last row, recursively per dimension): at most 2*ndim-1 boxes. Flat partitions
/// (FSDP1 flat parameters, DeepSpeed ZeRO) store such ranges; each box views the flat storage with the tensor's
/// contiguous strides at storage offset base + (flatStart - begin). A 0-dim tensor is one box with no dimensions.
std::vector<FlatRangeBox> flatRangeBoxes(const std::vector<int64_t>& shape, int64_t begin, int64_t end);
/// row-major contiguous strides of @p shape (elements)
std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& shape);

} // namespace optscope
