// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/gpu/gpu_assembler.h"
#include "optscope/base/error.h"
#include "optscope/tensor/aten_bridge.h"
#include "optscope/tensor/chunk_reader.h"

#include <stdexcept>

#ifdef OPTSCOPE_HAS_CUDA
#include "optscope/gpu/cuda_backend.h"
#endif

namespace optscope {

#ifdef OPTSCOPE_HAS_CUDA

std::string gpuAssemblerDescription(int maxGpus)
{
    try {
        return cuda::describeAssembler(maxGpus);
    } catch (const std::runtime_error& e) {
        throw Error(ErrorKind::Unsupported, {}, std::string("--device cuda: ") + e.what());
    }
}

void gpuAssemble(const Checkpoint& cp, const Entry& entry, const ByteSink& sink, int maxGpus)
{
    const TensorEntry& t = entry.tensor;
    cuda::TensorAssembly a;
    a.shape = t.shape;
    a.elementSize = dtypeSize(t.dtype);
    std::vector<std::vector<uint8_t>> dense; // chunks that are not already dense little-endian bytes
    std::vector<ChunkData> keep;
    for (const auto& c : t.chunks) {
        if (c.numel() == 0) continue;
        ChunkData d = ChunkReader::resolve(cp, entry, c);
        cuda::HostChunk h;
        h.offsets = c.offsets;
        h.sizes = c.sizes;
        h.rank = c.rank;
        if (d.isContiguous() && (!d.bigEndian || a.elementSize == 1)) {
            h.data = d.data();
        } else {
            dense.emplace_back(d.nbytes());
            aten::copyBlock(d, std::vector<int64_t>(c.sizes.size(), 0), c.sizes, dense.back().data(), c.sizes,
                std::vector<int64_t>(c.sizes.size(), 0));
            h.data = dense.back().data();
        }
        keep.push_back(std::move(d));
        a.chunks.push_back(std::move(h));
    }
    try {
        cuda::assembleTensor(a, sink, maxGpus);
    } catch (const std::runtime_error& e) {
        throw Error(ErrorKind::Unsupported, cp.path, "'" + entry.key + "' on the GPU: " + e.what());
    }
}

#else

std::string gpuAssemblerDescription(int)
{
    throw Error(ErrorKind::Unsupported, {}, "--device cuda: this build has no CUDA support (OPTSCOPE_WITH_CUDA=OFF)");
}

void gpuAssemble(const Checkpoint&, const Entry&, const ByteSink&, int)
{
    gpuAssemblerDescription();
}

#endif

} // namespace optscope
