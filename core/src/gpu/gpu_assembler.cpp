// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/gpu/gpu_assembler.h"
#include "optscope/base/error.h"
#include "optscope/model/shard_layout.h"
#include "optscope/tensor/aten_bridge.h"
#include "optscope/tensor/chunk_reader.h"

#include <algorithm>
#include <stdexcept>

#ifdef OPTSCOPE_HAS_CUDA
#include "optscope/gpu/cuda_backend.h"
#endif

namespace optscope {

#ifdef OPTSCOPE_HAS_CUDA

namespace {

/// The host side of one GPU assembly: the chunks that meet the box, as dense little-endian bytes (the mapped file's
/// own where the chunk is stored that way, else a converted copy kept here), trimmed to the box's rows on dim 0.
struct HostAssembly
{
    cuda::TensorAssembly assembly;
    std::vector<std::vector<uint8_t>> dense;
    std::vector<ChunkData> keep;
};

void prepare(const Checkpoint& cp, const Entry& entry, const std::vector<int64_t>& boxOffsets,
    const std::vector<int64_t>& boxSizes, HostAssembly& h)
{
    const TensorEntry& t = *entry.tensor;
    cuda::TensorAssembly& a = h.assembly;
    a.shape = t.shape;
    a.elementSize = dtypeSize(t.dtype);
    a.boxOffsets = boxOffsets;
    a.boxSizes = boxSizes;
    const size_t ndim = t.shape.size();
    for (const auto& c : t.chunks) {
        if (c.numel() == 0) continue;
        TensorBox part; // of the chunk, inside the box
        if (!intersect({c.offsets, c.sizes}, {boxOffsets, boxSizes}, part)) continue;
        ChunkData d = ChunkReader::resolve(cp, entry, c);
        cuda::HostChunk hc;
        hc.rank = c.rank;
        if (d.isContiguous() && (!d.bigEndian || a.elementSize == 1)) {
            // the rows of dim 0 inside the box are one run of the chunk's bytes; other dims are cut on the GPU
            hc.offsets = c.offsets;
            hc.sizes = c.sizes;
            size_t skip = 0;
            if (ndim > 0) {
                const int64_t rowElements = c.numel() / c.sizes[0];
                skip = static_cast<size_t>((part.offsets[0] - c.offsets[0]) * rowElements) * a.elementSize;
                hc.offsets[0] = part.offsets[0];
                hc.sizes[0] = part.sizes[0];
            }
            hc.data = d.data() + skip;
        } else {
            std::vector<int64_t> begin(ndim);
            for (size_t k = 0; k < ndim; ++k)
                begin[k] = part.offsets[k] - c.offsets[k];
            h.dense.emplace_back(static_cast<size_t>(part.numel()) * a.elementSize);
            aten::copyBlock(d, begin, part.sizes, h.dense.back().data(), part.sizes, std::vector<int64_t>(ndim, 0));
            hc.offsets = part.offsets;
            hc.sizes = part.sizes;
            hc.data = h.dense.back().data();
        }
        h.keep.push_back(std::move(d));
        a.chunks.push_back(std::move(hc));
    }
}

} // namespace

std::string gpuAssemblerDescription(int maxGpus)
{
    try {
        return cuda::describeAssembler(maxGpus);
    } catch (const std::runtime_error& e) {
        throw Error(ErrorKind::Unsupported, {}, std::string("--device cuda: ") + e.what());
    }
}

void gpuAssembleBox(const Checkpoint& cp, const Entry& entry, const std::vector<int64_t>& offsets,
    const std::vector<int64_t>& sizes, const ByteSink& sink, int maxGpus)
{
    HostAssembly h;
    prepare(cp, entry, offsets, sizes, h);
    try {
        cuda::assembleTensor(h.assembly, sink, maxGpus);
    } catch (const std::runtime_error& e) {
        throw Error(ErrorKind::Unsupported, cp.path, "'" + entry.key + "' on the GPU: " + e.what());
    }
}

void gpuAssemble(const Checkpoint& cp, const Entry& entry, const ByteSink& sink, int maxGpus)
{
    gpuAssembleBox(cp, entry, std::vector<int64_t>(entry.tensor->shape.size(), 0), entry.tensor->shape, sink, maxGpus);
}

std::vector<uint64_t> gpuCompareShards(
    const Checkpoint& cp, const Entry& entry, const std::vector<std::vector<uint8_t>>& shards, int maxGpus)
{
    HostAssembly h;
    prepare(cp, entry, std::vector<int64_t>(entry.tensor->shape.size(), 0), entry.tensor->shape, h);
    size_t shardBytes = 1;
    std::vector<cuda::HostShard> hs;
    for (const auto& s : shards) {
        shardBytes = std::max(shardBytes, s.size());
        hs.push_back({s.data(), s.size()});
    }
    try {
        return cuda::allGatherAndCompare(hs, shardBytes, h.assembly, maxGpus);
    } catch (const std::runtime_error& e) {
        throw Error(ErrorKind::Unsupported, cp.path, "'" + entry.key + "' on the GPUs: " + e.what());
    }
}

#else

std::string gpuAssemblerDescription(int)
{
    throw Error(ErrorKind::Unsupported, {}, "--device cuda: this build has no CUDA support (OPTSCOPE_WITH_CUDA=OFF)");
}

void gpuAssembleBox(
    const Checkpoint&, const Entry&, const std::vector<int64_t>&, const std::vector<int64_t>&, const ByteSink&, int)
{
    gpuAssemblerDescription();
}

void gpuAssemble(const Checkpoint&, const Entry&, const ByteSink&, int)
{
    gpuAssemblerDescription();
}

std::vector<uint64_t> gpuCompareShards(const Checkpoint&, const Entry&, const std::vector<std::vector<uint8_t>>&, int)
{
    gpuAssemblerDescription();
    return {};
}

#endif

} // namespace optscope
