// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/gpu/cuda_backend.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace optscope::cuda {

namespace {

void check(cudaError_t e, const char* what)
{
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// NCCL entry points, resolved at run time so that binaries start without libnccl.
struct Nccl
{
    ncclResult_t (*commInitAll)(ncclComm_t*, int, const int*) = nullptr;
    ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
    ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
    ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
    ncclResult_t (*groupStart)() = nullptr;
    ncclResult_t (*groupEnd)() = nullptr;
    const char* (*errorString)(ncclResult_t) = nullptr;
    bool ok = false;

    static const Nccl& get()
    {
        static const Nccl n = [] {
            Nccl x;
            void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
            if (!lib) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
            if (!lib) return x;
            x.commInitAll = reinterpret_cast<decltype(x.commInitAll)>(dlsym(lib, "ncclCommInitAll"));
            x.commDestroy = reinterpret_cast<decltype(x.commDestroy)>(dlsym(lib, "ncclCommDestroy"));
            x.broadcast = reinterpret_cast<decltype(x.broadcast)>(dlsym(lib, "ncclBroadcast"));
            x.allGather = reinterpret_cast<decltype(x.allGather)>(dlsym(lib, "ncclAllGather"));
            x.groupStart = reinterpret_cast<decltype(x.groupStart)>(dlsym(lib, "ncclGroupStart"));
            x.groupEnd = reinterpret_cast<decltype(x.groupEnd)>(dlsym(lib, "ncclGroupEnd"));
            x.errorString = reinterpret_cast<decltype(x.errorString)>(dlsym(lib, "ncclGetErrorString"));
            x.ok = x.commInitAll && x.commDestroy && x.broadcast && x.allGather && x.groupStart && x.groupEnd
                && x.errorString;
            return x;
        }();
        return n;
    }
    void check(ncclResult_t r, const char* what) const
    {
        if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + errorString(r));
    }
};

constexpr int kMaxDims = 8;

struct BoxCopy
{
    int ndim;
    int64_t shape[kMaxDims]; ///< destination: the assembled box
    int64_t offsets[kMaxDims]; ///< the chunk's offsets relative to the box (negative where it starts before it)
    int64_t sizes[kMaxDims]; ///< the chunk, dense
};

template<typename T>
__global__ void scatterBox(const T* __restrict__ src, T* __restrict__ dst, BoxCopy box, int64_t numel, int words)
{
    // each element is `words` T's (elements wider than 8 bytes move as several words); elements of the chunk outside
    // the box are skipped
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t rem = i;
        int64_t dstIndex = 0;
        int64_t stride = 1;
        bool inside = true;
        for (int d = box.ndim - 1; d >= 0; --d) {
            const int64_t coord = rem % box.sizes[d] + box.offsets[d];
            rem /= box.sizes[d];
            inside = inside && coord >= 0 && coord < box.shape[d];
            dstIndex += coord * stride;
            stride *= box.shape[d];
        }
        if (!inside) continue;
        for (int w = 0; w < words; ++w)
            dst[dstIndex * words + w] = src[i * words + w];
    }
}

void launchScatter(const void* src, void* dst, const BoxCopy& box, int64_t numel, size_t elem, cudaStream_t s)
{
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((numel + threads - 1) / threads, 65535));
    if (numel == 0) return;
    if (elem % 8 == 0)
        scatterBox<<<blocks, threads, 0, s>>>(
            static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), box, numel, static_cast<int>(elem / 8));
    else if (elem == 4)
        scatterBox<<<blocks, threads, 0, s>>>(
            static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), box, numel, 1);
    else if (elem == 2)
        scatterBox<<<blocks, threads, 0, s>>>(
            static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), box, numel, 1);
    else
        scatterBox<<<blocks, threads, 0, s>>>(
            static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), box, numel, static_cast<int>(elem));
    check(cudaGetLastError(), "scatter kernel launch");
}

int deviceCount(int maxGpus)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error(std::string("no usable CUDA device: ") + cudaGetErrorString(e));
    }
    if (count == 0) throw std::runtime_error("no CUDA device");
    return maxGpus > 0 ? std::min(count, maxGpus) : count;
}

/// Pinned host memory for device->host copies (host->device goes through HostToDevice's lanes): two buffers, so that
/// the next piece is on the wire while the sink takes the last one.
struct Staging
{
    static constexpr size_t kSize = 32u << 20;
    void* buf[2] = {nullptr, nullptr};
    cudaEvent_t done[2] = {nullptr, nullptr};
    explicit Staging(int device)
    {
        check(cudaSetDevice(device), "cudaSetDevice");
        for (int i = 0; i < 2; ++i) {
            check(cudaMallocHost(&buf[i], kSize), "cudaMallocHost");
            check(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming), "cudaEventCreate");
        }
    }
    ~Staging()
    {
        for (int i = 0; i < 2; ++i) {
            if (done[i]) cudaEventDestroy(done[i]);
            if (buf[i]) cudaFreeHost(buf[i]);
        }
    }
    /// device memory [src, src + total) to @p sink in order, in pieces of kSize
    void toHost(const char* src, size_t total, cudaStream_t s, const std::function<void(const uint8_t*, size_t)>& sink)
    {
        size_t issued = 0;
        size_t len[2] = {0, 0};
        auto issue = [&](int b) {
            len[b] = std::min(kSize, total - issued);
            check(cudaMemcpyAsync(buf[b], src + issued, len[b], cudaMemcpyDeviceToHost, s), "D2H copy");
            check(cudaEventRecord(done[b], s), "D2H record");
            issued += len[b];
        };
        if (total == 0) return;
        issue(0);
        for (size_t given = 0, b = 0; given < total; b ^= 1) {
            if (issued < total) issue(static_cast<int>(b ^ 1)); // its last piece was taken by the sink already
            check(cudaEventSynchronize(done[b]), "D2H wait");
            sink(static_cast<const uint8_t*>(buf[b]), len[b]);
            given += len[b];
        }
    }
};

/// What one GPU keeps for the whole process: its copy lanes and the device->host pair, made on first use (pinning
/// some 200 MB costs tens of milliseconds: made per tensor, it dominated gathers of many small tensors). A transfer
/// holds the GPU's lock throughout, so tensors pass through one GPU one at a time; GPUs are locked in ascending
/// order. Never destroyed: the CUDA runtime may be gone by the time static destructors run.
struct DeviceTransfers
{
    std::mutex lock;
    std::unique_ptr<HostToDevice> upload;
    std::unique_ptr<Staging> download;
    HostToDevice& up(int device)
    {
        if (!upload) upload = std::make_unique<HostToDevice>(device);
        return *upload;
    }
    Staging& down(int device)
    {
        if (!download) download = std::make_unique<Staging>(device);
        return *download;
    }
};

DeviceTransfers& transfersOf(int device)
{
    static std::mutex m;
    static auto* all = new std::map<int, std::unique_ptr<DeviceTransfers>>;
    std::lock_guard<std::mutex> guard(m);
    auto& t = (*all)[device];
    if (!t) t = std::make_unique<DeviceTransfers>();
    return *t;
}

std::vector<std::unique_lock<std::mutex>> lockDevices(int ngpu)
{
    std::vector<std::unique_lock<std::mutex>> locks;
    for (int g = 0; g < ngpu; ++g)
        locks.emplace_back(transfersOf(g).lock);
    return locks;
}

} // namespace

std::string describeAssembler(int maxGpus)
{
    const int n = deviceCount(maxGpus);
    if (n == 1) return "cuda:0";
    const Nccl& nccl = Nccl::get();
    if (!nccl.ok) return "cuda:0 (libnccl not found: one GPU used)";
    return "cuda:0-" + std::to_string(n - 1) + " + NCCL";
}

namespace {

int64_t product(const std::vector<int64_t>& v)
{
    int64_t n = 1;
    for (auto s : v)
        n *= s;
    return n;
}

/// The box of a tensor assembled in device memory on GPUs 0..ngpu-1 (the caller holds their locks); freed with it.
struct DeviceAssembly
{
    const Nccl& nccl = Nccl::get();
    int ngpu = 0;
    size_t nbytes = 0;
    std::vector<void*> full;
    std::vector<cudaStream_t> streams;
    std::vector<ncclComm_t> comms;
    std::vector<std::vector<void*>> staged;

    DeviceAssembly(const TensorAssembly& a, int gpus);
    ~DeviceAssembly() { release(); }
    /// frees everything (also what a constructor that threw had made)
    void release()
    {
        for (int g = 0; g < ngpu; ++g) {
            cudaSetDevice(g);
            for (void* p : staged[g])
                if (p) cudaFree(p);
            if (full[g]) cudaFree(full[g]);
            if (streams[g]) cudaStreamDestroy(streams[g]);
            if (comms[g]) nccl.commDestroy(comms[g]);
        }
        ngpu = 0;
    }
    DeviceAssembly(const DeviceAssembly&) = delete;
    DeviceAssembly& operator=(const DeviceAssembly&) = delete;
};

DeviceAssembly::DeviceAssembly(const TensorAssembly& a, int gpus)
    : ngpu(gpus)
    , full(gpus, nullptr)
    , streams(gpus, nullptr)
    , comms(gpus, nullptr)
    , staged(gpus, std::vector<void*>(a.chunks.size(), nullptr))
{
    const bool whole = a.boxSizes.empty();
    const std::vector<int64_t>& boxSizes = whole ? a.shape : a.boxSizes;
    const std::vector<int64_t> boxOffsets = whole ? std::vector<int64_t>(a.shape.size(), 0) : a.boxOffsets;
    if (a.shape.size() > kMaxDims)
        throw std::runtime_error("tensors of more than 8 dimensions are not supported on the GPU path");
    if (boxSizes.size() != a.shape.size() || boxOffsets.size() != a.shape.size())
        throw std::runtime_error("the box does not have the tensor's dimensions");
    nbytes = static_cast<size_t>(product(boxSizes)) * a.elementSize;
    if (nbytes == 0) return;
    try {
        for (int g = 0; g < ngpu; ++g) {
            check(cudaSetDevice(g), "cudaSetDevice");
            check(cudaStreamCreateWithFlags(&streams[g], cudaStreamNonBlocking), "cudaStreamCreate");
            check(cudaMalloc(&full[g], nbytes), "cudaMalloc (assembled tensor)");
        }
        if (ngpu > 1) {
            std::vector<int> devs(ngpu);
            for (int g = 0; g < ngpu; ++g)
                devs[g] = g;
            nccl.check(nccl.commInitAll(comms.data(), ngpu, devs.data()), "ncclCommInitAll");
        }
        // 1. each chunk goes to the GPU of its rank (host -> device, dense chunk bytes), through the copy lanes of
        // that GPU
        std::vector<HostToDevice*> upload(ngpu, nullptr);
        std::vector<int> owner(a.chunks.size());
        for (size_t c = 0; c < a.chunks.size(); ++c) {
            const HostChunk& ch = a.chunks[c];
            const int64_t cn = product(ch.sizes);
            if (cn == 0) continue;
            const int g = static_cast<int>((ch.rank >= 0 ? ch.rank : static_cast<int>(c)) % ngpu);
            owner[c] = g;
            for (int h = 0; h < ngpu; ++h) {
                check(cudaSetDevice(h), "cudaSetDevice");
                check(cudaMalloc(&staged[h][c], static_cast<size_t>(cn) * a.elementSize), "cudaMalloc (chunk)");
            }
            check(cudaSetDevice(g), "cudaSetDevice");
            if (!upload[g]) upload[g] = &transfersOf(g).up(g);
            upload[g]->copy(staged[g][c], ch.data, static_cast<size_t>(cn) * a.elementSize);
        }
        for (auto& u : upload)
            if (u) u->finish();
        // 2. several GPUs: broadcast every chunk from its owner to all
        if (ngpu > 1) {
            nccl.check(nccl.groupStart(), "ncclGroupStart");
            for (size_t c = 0; c < a.chunks.size(); ++c) {
                if (!staged[0][c]) continue;
                const int64_t cn = product(a.chunks[c].sizes);
                for (int g = 0; g < ngpu; ++g)
                    nccl.check(nccl.broadcast(staged[g][c], staged[g][c], static_cast<size_t>(cn) * a.elementSize,
                                   ncclUint8, owner[c], comms[g], streams[g]),
                        "ncclBroadcast");
            }
            nccl.check(nccl.groupEnd(), "ncclGroupEnd");
        }
        // 3. every GPU scatters the chunks into its copy of the box
        for (int g = 0; g < ngpu; ++g) {
            check(cudaSetDevice(g), "cudaSetDevice");
            for (size_t c = 0; c < a.chunks.size(); ++c) {
                if (!staged[g][c]) continue;
                const HostChunk& ch = a.chunks[c];
                if (a.shape.empty()) {
                    check(cudaMemcpyAsync(full[g], staged[g][c], a.elementSize, cudaMemcpyDeviceToDevice, streams[g]),
                        "D2D copy");
                    continue;
                }
                BoxCopy box {};
                box.ndim = static_cast<int>(a.shape.size());
                for (int d = 0; d < box.ndim; ++d) {
                    box.shape[d] = boxSizes[d];
                    box.offsets[d] = ch.offsets[d] - boxOffsets[d];
                    box.sizes[d] = ch.sizes[d];
                }
                launchScatter(staged[g][c], full[g], box, product(ch.sizes), a.elementSize, streams[g]);
            }
            check(cudaStreamSynchronize(streams[g]), "scatter sync");
        }
    } catch (...) {
        release();
        throw;
    }
}

int usableGpus(int maxGpus, int limit)
{
    int ngpu = std::min(deviceCount(maxGpus), limit);
    if (ngpu > 1 && !Nccl::get().ok) ngpu = 1;
    return ngpu;
}

/// The padded rank shards all-gathered on GPUs 0..ngpu-1 (the caller holds their locks): `gathered` is GPU 0's
/// copy, rank r's shard at r * shardBytes.
struct DeviceGather
{
    const Nccl& nccl = Nccl::get();
    int ngpu = 0;
    std::vector<void*> send, recv;
    std::vector<cudaStream_t> streams;
    std::vector<ncclComm_t> comms;
    const char* gathered = nullptr;

    DeviceGather(const std::vector<HostShard>& shards, size_t shardBytes, int gpus);
    ~DeviceGather() { release(); }
    /// frees everything (also what a constructor that threw had made)
    void release()
    {
        for (int g = 0; g < ngpu; ++g) {
            cudaSetDevice(g);
            if (send[g]) cudaFree(send[g]);
            if (recv[g]) cudaFree(recv[g]);
            if (streams[g]) cudaStreamDestroy(streams[g]);
            if (comms[g]) nccl.commDestroy(comms[g]);
        }
        ngpu = 0;
    }
    DeviceGather(const DeviceGather&) = delete;
    DeviceGather& operator=(const DeviceGather&) = delete;
};

DeviceGather::DeviceGather(const std::vector<HostShard>& shards, size_t shardBytes, int gpus)
    : ngpu(gpus)
    , send(gpus, nullptr)
    , recv(gpus, nullptr)
    , streams(gpus, nullptr)
    , comms(gpus, nullptr)
{
    const int ranks = static_cast<int>(shards.size());
    const int perGpu = (ranks + ngpu - 1) / ngpu; // consecutive ranks share a GPU
    const size_t sendBytes = static_cast<size_t>(perGpu) * shardBytes;
    const size_t recvBytes = sendBytes * static_cast<size_t>(ngpu);
    try {
        for (int g = 0; g < ngpu; ++g) {
            check(cudaSetDevice(g), "cudaSetDevice");
            check(cudaStreamCreateWithFlags(&streams[g], cudaStreamNonBlocking), "cudaStreamCreate");
            check(cudaMalloc(&send[g], sendBytes), "cudaMalloc (rank shards)");
            check(cudaMemsetAsync(send[g], 0, sendBytes, streams[g]), "cudaMemset");
            if (ngpu > 1) check(cudaMalloc(&recv[g], recvBytes), "cudaMalloc (all-gather)");
            check(cudaStreamSynchronize(streams[g]), "cudaMemset sync"); // the copy lanes use streams of their own
            // each rank of this GPU loads its shard, as that rank would
            HostToDevice& upload = transfersOf(g).up(g);
            for (int j = 0; j < perGpu; ++j) {
                const int r = g * perGpu + j;
                if (r >= ranks || shards[r].bytes == 0) continue;
                if (shards[r].bytes > shardBytes)
                    throw std::runtime_error("a rank's shard is larger than the shard size");
                upload.copy(
                    static_cast<char*>(send[g]) + static_cast<size_t>(j) * shardBytes, shards[r].data, shards[r].bytes);
            }
            upload.finish();
        }
        gathered = static_cast<const char*>(send[0]);
        if (ngpu > 1) {
            std::vector<int> devs(ngpu);
            for (int g = 0; g < ngpu; ++g)
                devs[g] = g;
            nccl.check(nccl.commInitAll(comms.data(), ngpu, devs.data()), "ncclCommInitAll");
            nccl.check(nccl.groupStart(), "ncclGroupStart");
            for (int g = 0; g < ngpu; ++g)
                nccl.check(
                    nccl.allGather(send[g], recv[g], sendBytes, ncclUint8, comms[g], streams[g]), "ncclAllGather");
            nccl.check(nccl.groupEnd(), "ncclGroupEnd");
            for (int g = 0; g < ngpu; ++g) {
                check(cudaSetDevice(g), "cudaSetDevice");
                check(cudaStreamSynchronize(streams[g]), "all-gather sync");
            }
            gathered = static_cast<const char*>(recv[0]);
        }
    } catch (...) {
        release();
        throw;
    }
}

} // namespace

void assembleTensor(const TensorAssembly& a, const std::function<void(const uint8_t*, size_t)>& sink, int maxGpus)
{
    const int ngpu = usableGpus(maxGpus, 1 << 20);
    const auto locks = lockDevices(ngpu);
    const DeviceAssembly assembled(a, ngpu);
    if (assembled.nbytes == 0) return;
    // device -> host from GPU 0, through pinned memory, in order
    check(cudaSetDevice(0), "cudaSetDevice");
    transfersOf(0).down(0).toHost(
        static_cast<const char*>(assembled.full[0]), assembled.nbytes, assembled.streams[0], sink);
}

std::vector<uint64_t> allGatherAndCompare(
    const std::vector<HostShard>& shards, size_t shardBytes, const TensorAssembly& reference, int maxGpus)
{
    const int ranks = static_cast<int>(shards.size());
    std::vector<uint64_t> differing(shards.size(), 0);
    if (ranks == 0 || shardBytes == 0) return differing;
    const int ngpu = usableGpus(maxGpus, ranks);
    const auto locks = lockDevices(ngpu);
    const DeviceGather gather(shards, shardBytes, ngpu);
    const DeviceAssembly ref(reference, 1); // on GPU 0, beside the gathered copy
    size_t total = 0;
    for (const auto& s : shards)
        total += s.bytes;
    if (total != ref.nbytes) throw std::runtime_error("the rank shards do not add up to the reference tensor");
    size_t at = 0;
    for (int r = 0; r < ranks; ++r) {
        if (shards[r].bytes)
            differing[r] = countDifferentElements(gather.gathered + static_cast<size_t>(r) * shardBytes,
                static_cast<const char*>(ref.full[0]) + at, shards[r].bytes, reference.elementSize, 0);
        at += shards[r].bytes;
    }
    return differing;
}

} // namespace optscope::cuda
