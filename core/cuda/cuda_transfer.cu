// SPDX-License-Identifier: GPL-3.0-or-later
// Host -> device copies of pageable memory (the mapped checkpoint files) and the bitwise device compare.
//
// Why lanes: cudaMemcpyAsync from pageable memory is synchronous and slow, so bytes go through pinned staging
// buffers. One thread's memcpy into a pinned buffer (about 10 GB/s, page faults of the mapped file included) is then
// the bottleneck, not the PCIe/NVLink-C2C link (50+ GB/s). Each lane is a worker thread with two pinned buffers and a
// stream of its own: lanes fill buffers in parallel while earlier ones are on the wire, several copies in flight.
#include "optscope/gpu/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace optscope::cuda {

namespace {

void check(cudaError_t e, const char* what)
{
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// one staging buffer; a copy is cut into pieces of this size. On the H100 machine 4 MiB pieces gave 51 GB/s with 12
// lanes, 8 MiB 44, 16 MiB 42, 32 MiB 38 (smaller pieces keep more of them in flight; bench/results/gpu.md)
constexpr size_t kDefaultPiece = 4u << 20;

} // namespace

struct HostToDevice::Impl
{
    struct Piece
    {
        char* dst;
        const char* src;
        size_t bytes;
    };
    struct Lane
    {
        void* buf[2] = {nullptr, nullptr};
        cudaEvent_t done[2] = {nullptr, nullptr};
        cudaStream_t stream = nullptr;
        int next = 0;
    };

    int device = 0;
    size_t piece = kDefaultPiece;
    std::vector<Lane> lanes;
    std::vector<std::thread> workers;
    std::mutex mutex;
    std::condition_variable wake; // pieces queued, or closing
    std::condition_variable idle; // a lane finished a piece
    std::deque<Piece> queue;
    int busy = 0;
    bool closing = false;
    std::exception_ptr failure;

    void run(Lane& lane)
    {
        if (cudaSetDevice(device) != cudaSuccess) {
            std::lock_guard<std::mutex> lock(mutex);
            if (!failure) failure = std::make_exception_ptr(std::runtime_error("cudaSetDevice in a copy lane failed"));
            queue.clear();
            idle.notify_all();
            return;
        }
        for (;;) {
            Piece p;
            {
                std::unique_lock<std::mutex> lock(mutex);
                wake.wait(lock, [&] { return closing || !queue.empty(); });
                if (queue.empty()) return;
                p = queue.front();
                queue.pop_front();
                ++busy;
            }
            try {
                const int k = lane.next;
                lane.next ^= 1;
                check(cudaEventSynchronize(lane.done[k]), "staging buffer wait");
                std::memcpy(lane.buf[k], p.src, p.bytes);
                check(cudaMemcpyAsync(p.dst, lane.buf[k], p.bytes, cudaMemcpyHostToDevice, lane.stream), "H2D copy");
                check(cudaEventRecord(lane.done[k], lane.stream), "staging buffer record");
            } catch (...) {
                std::lock_guard<std::mutex> lock(mutex);
                if (!failure) failure = std::current_exception();
                queue.clear(); // the rest is moot
            }
            {
                std::lock_guard<std::mutex> lock(mutex);
                --busy;
            }
            idle.notify_all();
        }
    }
};

HostToDevice::HostToDevice(int device, int lanes, size_t pieceBytes)
    : impl_(std::make_unique<Impl>())
{
    // with 8 MiB pieces 8 lanes reached 38-46 GB/s of the H100 machine's 55 (16 cores), 12 lanes 43-44, 16 lanes 42
    if (lanes <= 0) lanes = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) * 3 / 4, 1, 12);
    impl_->device = device;
    if (pieceBytes) impl_->piece = pieceBytes;
    impl_->lanes.resize(static_cast<size_t>(lanes));
    check(cudaSetDevice(device), "cudaSetDevice");
    try {
        for (auto& lane : impl_->lanes) {
            check(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), "cudaStreamCreate");
            for (int i = 0; i < 2; ++i) {
                check(cudaMallocHost(&lane.buf[i], impl_->piece), "cudaMallocHost (staging)");
                check(cudaEventCreateWithFlags(&lane.done[i], cudaEventDisableTiming), "cudaEventCreate");
            }
        }
    } catch (...) {
        release();
        throw;
    }
    for (auto& lane : impl_->lanes)
        impl_->workers.emplace_back([this, &lane] { impl_->run(lane); });
}

HostToDevice::~HostToDevice()
{
    release();
}

void HostToDevice::release()
{
    if (!impl_) return;
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        impl_->closing = true;
        impl_->queue.clear();
    }
    impl_->wake.notify_all();
    for (auto& w : impl_->workers)
        if (w.joinable()) w.join();
    impl_->workers.clear();
    cudaSetDevice(impl_->device);
    for (auto& lane : impl_->lanes) {
        if (lane.stream) cudaStreamSynchronize(lane.stream);
        for (int i = 0; i < 2; ++i) {
            if (lane.done[i]) cudaEventDestroy(lane.done[i]);
            if (lane.buf[i]) cudaFreeHost(lane.buf[i]);
            lane.done[i] = nullptr;
            lane.buf[i] = nullptr;
        }
        if (lane.stream) cudaStreamDestroy(lane.stream);
        lane.stream = nullptr;
    }
}

int HostToDevice::lanes() const
{
    return static_cast<int>(impl_->lanes.size());
}

void HostToDevice::copy(void* deviceDst, const void* hostSrc, size_t bytes)
{
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        if (impl_->failure) return; // finish() reports it
        const size_t piece = impl_->piece;
        for (size_t off = 0; off < bytes; off += piece)
            impl_->queue.push_back({static_cast<char*>(deviceDst) + off, static_cast<const char*>(hostSrc) + off,
                std::min(piece, bytes - off)});
    }
    impl_->wake.notify_all();
}

void HostToDevice::finish()
{
    std::unique_lock<std::mutex> lock(impl_->mutex);
    impl_->idle.wait(lock, [&] { return impl_->queue.empty() && impl_->busy == 0; });
    lock.unlock();
    cudaSetDevice(impl_->device);
    for (auto& lane : impl_->lanes)
        check(cudaStreamSynchronize(lane.stream), "H2D sync");
    lock.lock();
    if (impl_->failure) {
        std::exception_ptr f = impl_->failure;
        impl_->failure = nullptr;
        std::rethrow_exception(f);
    }
}

// ---- the bitwise compare ------------------------------------------------------------------------------------------

namespace {

/// elements of E bytes in one 16-byte vector that differ between x and y (E = 1, 2, 4, 8 or 16)
template<int E> __device__ __forceinline__ unsigned differing(uint4 x, uint4 y)
{
    const uint32_t d[4] = {x.x ^ y.x, x.y ^ y.y, x.z ^ y.z, x.w ^ y.w};
    if constexpr (E == 16) return (d[0] | d[1] | d[2] | d[3]) != 0;
    if constexpr (E == 8) return ((d[0] | d[1]) != 0) + ((d[2] | d[3]) != 0);
    unsigned n = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if constexpr (E == 4) n += d[i] != 0;
        if constexpr (E == 2) n += ((d[i] & 0xffffu) != 0) + ((d[i] >> 16) != 0);
        if constexpr (E == 1) {
            // a byte is nonzero when its low 7 bits carry into bit 7 or its bit 7 is set
            const uint32_t t = ((d[i] & 0x7f7f7f7fu) + 0x7f7f7f7fu) | d[i];
            n += __popc(t & 0x80808080u);
        }
    }
    return n;
}

/// a persistent grid over the vectors: four independent 16-byte loads of each side in flight per thread
template<int E>
__global__ void countDiffering(
    const uint4* __restrict__ a, const uint4* __restrict__ b, size_t vectors, unsigned long long* __restrict__ total)
{
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    unsigned long long n = 0;
    for (; i + 3 * stride < vectors; i += 4 * stride) {
        uint4 x[4], y[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            x[k] = __ldg(a + i + k * stride);
            y[k] = __ldg(b + i + k * stride);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k)
            n += differing<E>(x[k], y[k]);
    }
    for (; i < vectors; i += stride)
        n += differing<E>(__ldg(a + i), __ldg(b + i));
    for (int o = 16; o > 0; o >>= 1)
        n += __shfl_down_sync(0xffffffffu, n, o);
    if ((threadIdx.x & 31) == 0 && n) atomicAdd(total, n);
}

/// the tail after the last whole vector, and element sizes that do not divide 16: element by element
__global__ void countDifferingBytes(
    const uint8_t* a, const uint8_t* b, size_t elements, size_t elementSize, unsigned long long* total)
{
    unsigned long long n = 0;
    for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < elements; e += size_t(gridDim.x) * blockDim.x) {
        bool diff = false;
        for (size_t k = 0; k < elementSize; ++k)
            diff |= a[e * elementSize + k] != b[e * elementSize + k];
        n += diff;
    }
    if (n) atomicAdd(total, n);
}

} // namespace

uint64_t countDifferentElements(const void* a, const void* b, size_t bytes, size_t elementSize, int device)
{
    if (elementSize == 0 || bytes % elementSize) throw std::invalid_argument("compare: bytes not whole elements");
    check(cudaSetDevice(device), "cudaSetDevice");
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    unsigned long long* total = nullptr;
    check(cudaMalloc(&total, sizeof *total), "cudaMalloc (compare)");
    unsigned long long result = 0;
    try {
        check(cudaMemset(total, 0, sizeof *total), "cudaMemset");
        const bool vectorised = 16 % elementSize == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0
            && reinterpret_cast<uintptr_t>(b) % 16 == 0;
        size_t head = 0; // bytes the vector kernel covers
        if (vectorised) {
            const size_t vectors = bytes / 16;
            head = vectors * 16;
            const int threads = 256;
            const int blocks = static_cast<int>(
                std::max<size_t>(1, std::min<size_t>(size_t(sms) * 8, (vectors + threads - 1) / threads)));
            if (vectors) {
                const auto* va = static_cast<const uint4*>(a);
                const auto* vb = static_cast<const uint4*>(b);
                switch (elementSize) {
                case 1:
                    countDiffering<1><<<blocks, threads>>>(va, vb, vectors, total);
                    break;
                case 2:
                    countDiffering<2><<<blocks, threads>>>(va, vb, vectors, total);
                    break;
                case 4:
                    countDiffering<4><<<blocks, threads>>>(va, vb, vectors, total);
                    break;
                case 8:
                    countDiffering<8><<<blocks, threads>>>(va, vb, vectors, total);
                    break;
                default:
                    countDiffering<16><<<blocks, threads>>>(va, vb, vectors, total);
                    break;
                }
                check(cudaGetLastError(), "compare kernel launch");
            }
        }
        const size_t tailElements = (bytes - head) / elementSize;
        if (tailElements) {
            const int blocks = static_cast<int>(std::min<size_t>(size_t(sms) * 8, (tailElements + 255) / 256));
            countDifferingBytes<<<blocks, 256>>>(static_cast<const uint8_t*>(a) + head,
                static_cast<const uint8_t*>(b) + head, tailElements, elementSize, total);
            check(cudaGetLastError(), "compare kernel launch");
        }
        check(cudaMemcpy(&result, total, sizeof result, cudaMemcpyDeviceToHost), "compare result");
    } catch (...) {
        cudaFree(total);
        throw;
    }
    cudaFree(total);
    return result;
}

void* deviceAlloc(size_t bytes, int device)
{
    check(cudaSetDevice(device), "cudaSetDevice");
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
    return p;
}

void deviceFree(void* p)
{
    if (p) cudaFree(p);
}

void copyToHost(void* hostDst, const void* deviceSrc, size_t bytes)
{
    check(cudaMemcpy(hostDst, deviceSrc, bytes, cudaMemcpyDeviceToHost), "D2H copy");
}

} // namespace optscope::cuda
