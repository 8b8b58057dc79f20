// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The seam between the core and CUDA/NCCL: plain C++ declarations, no CUDA headers, so core .cpp files can call it.
// Failures throw std::runtime_error with a message; the core turns them into optscope::Error.

#include "optscope/gpu/gpu_devices.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace optscope::cuda {

/// devices, driver status and NCCL availability (NCCL is dlopen'ed: libnccl.so.2)
GpuInfo queryDevices();

/// One chunk of a tensor, already dense and little-endian in host memory (row-major over its own sizes).
struct HostChunk
{
    const void* data = nullptr;
    std::vector<int64_t> offsets; ///< global offsets
    std::vector<int64_t> sizes;
    int rank = -1; ///< decides which GPU takes the chunk (rank modulo the GPU count)
};

struct TensorAssembly
{
    std::vector<int64_t> shape;
    size_t elementSize = 1;
    /// what is assembled: the box [boxOffsets, boxOffsets + boxSizes) of the tensor (a reshard's target chunk);
    /// both empty: the whole tensor
    std::vector<int64_t> boxOffsets;
    std::vector<int64_t> boxSizes;
    /// must cover the box exactly (checked by the caller); a chunk may reach outside it (those elements are skipped)
    std::vector<HostChunk> chunks;
};

/// Assembles the box of the tensor in device memory: each GPU copies (through pinned staging buffers) the chunks of
/// its ranks host->device; with several GPUs, NCCL broadcasts every chunk to all of them and each GPU scatters it
/// into its full copy. The box is then streamed device->host from GPU 0 (through pinned memory) to @p sink, in
/// row-major order. @p maxGpus limits the GPUs used (0 = all).
void assembleTensor(
    const TensorAssembly& assembly, const std::function<void(const uint8_t*, size_t)>& sink, int maxGpus = 0);

/// "cuda:0" or "cuda:0-3 + NCCL 2.x", or throws when no GPU can be used
std::string describeAssembler(int maxGpus = 0);

/// One rank's loaded shard, dense bytes in host memory (at most shardBytes; shorter shards are zero-padded).
struct HostShard
{
    const void* data = nullptr;
    size_t bytes = 0;
};

/// Verify-by-load's "load on the GPUs, all-gather, compare": rank r's shard goes to GPU r / ceil(ranks / gpus) (one
/// rank per GPU when there are enough GPUs, else consecutive ranks share one), padded to @p shardBytes; NCCL
/// all-gathers the padded shards so that every GPU holds all of them in rank order (one GPU needs no NCCL).
/// @p reference (the source tensor, whole) is assembled on GPU 0 beside them, and each rank's shard is compared there
/// bit for bit with its bytes of the reference; nothing comes back to the host. Rank r's shard must be the r-th
/// consecutive run of the reference's row-major bytes (dim-0 chunks in rank order). Returns, per rank, the elements
/// that differ.
std::vector<uint64_t> allGatherAndCompare(
    const std::vector<HostShard>& shards, size_t shardBytes, const TensorAssembly& reference, int maxGpus = 0);

/// Host -> device copies from pageable memory (mapped checkpoint files) through pinned staging: @p lanes worker
/// threads (0 = three quarters of the cores, at most 12), each with two pinned buffers and a stream of its own, copy
/// pieces of @p pieceBytes (0 = 4 MiB) in parallel, several in flight. copy() queues and returns; finish() waits for
/// every queued copy to be on the device and rethrows the first failure. The sources must stay valid until finish()
/// returns.
class HostToDevice
{
public:
    explicit HostToDevice(int device, int lanes = 0, size_t pieceBytes = 0);
    ~HostToDevice();
    HostToDevice(const HostToDevice&) = delete;
    HostToDevice& operator=(const HostToDevice&) = delete;
    void copy(void* deviceDst, const void* hostSrc, size_t bytes);
    void finish();
    int lanes() const;

private:
    void release();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Elements of @p elementSize bytes that differ bit for bit between two buffers in device memory (verify's and diff's
/// equality, on the GPU: 16-byte loads, a persistent grid, one atomic per warp).
uint64_t countDifferentElements(const void* a, const void* b, size_t bytes, size_t elementSize, int device = 0);

/// device memory and a plain copy back, for tests and benchmarks that must not include CUDA headers
void* deviceAlloc(size_t bytes, int device = 0);
void deviceFree(void* p);
void copyToHost(void* hostDst, const void* deviceSrc, size_t bytes);

} // namespace optscope::cuda
