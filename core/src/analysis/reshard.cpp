// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/reshard.h"

#include "optscope/base/error.h"
#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/gpu/gpu_assembler.h"
#include "optscope/model/read_guard.h"
#include "optscope/model/shard_layout.h"
#include "optscope/optim/optimizer_kind.h"
#include "optscope/optim/optimizer_view.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_values.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <unordered_set>

namespace optscope {

ShardingStyle shardingStyleFromName(const std::string& name)
{
    if (name == "fsdp2" || name == "dtensor") return ShardingStyle::Fsdp2;
    if (name == "fsdp1") return ShardingStyle::Fsdp1;
    throw Error(ErrorKind::Usage, {}, "unknown layout '" + name + "' (expected fsdp2 or fsdp1)");
}

std::vector<ReshardChunk> reshardTargetChunks(const std::vector<int64_t>& shape, const ReshardOptions& options)
{
    std::vector<ReshardChunk> chunks;
    if (shape.empty()) {
        chunks.push_back({0, {}, {}});
        return chunks;
    }
    for (int r = 0; r < options.worldSize; ++r) {
        const Dim0Chunk c = chunkDim0(shape[0], options.worldSize, r, options.layout);
        if (!c.exists) continue;
        // ranks past the last row all hold an empty chunk at offset n: DCP's dedup_save_plans keeps one write item
        // per (fqn, offsets), the first rank's
        if (c.size == 0 && !chunks.empty() && chunks.back().offsets[0] == c.offset && chunks.back().sizes[0] == 0)
            continue;
        ReshardChunk chunk {r, std::vector<int64_t>(shape.size(), 0), shape};
        chunk.offsets[0] = c.offset;
        chunk.sizes[0] = c.size;
        chunks.push_back(std::move(chunk));
    }
    return chunks;
}

TensorEntry reshardPreview(const TensorEntry& tensor, const ReshardOptions& options)
{
    TensorEntry preview;
    preview.dtype = tensor.dtype;
    preview.shape = tensor.shape;
    for (const auto& c : reshardTargetChunks(tensor.shape, options)) {
        TensorChunk chunk;
        chunk.rank = c.rank;
        chunk.offsets = c.offsets;
        chunk.sizes = c.sizes;
        preview.chunks.push_back(chunk);
    }
    return preview;
}

namespace {

/// An optimizer step kept as a Python number (Megatron's per-group count, PyTorch before 1.12) as the float32 that
/// PyTorch's optimizers save (savesStepAsTensor), when float32 holds it exactly; nullopt otherwise (it then stays a
/// number)
std::optional<float> stepAsFloat32(const PyValue* v)
{
    if (!v || (v->kind != PyKind::Int && v->kind != PyKind::Float)) return std::nullopt;
    const double d = v->kind == PyKind::Int ? static_cast<double>(v->integer) : v->real;
    if (v->kind == PyKind::Int && static_cast<int64_t>(d) != v->integer) return std::nullopt;
    if (!std::isfinite(d) || std::fabs(d) > 3.0e38) return std::nullopt;
    const auto f = static_cast<float>(d);
    if (static_cast<double>(f) != d) return std::nullopt;
    return f;
}

} // namespace

DcpPlan planReshard(const Checkpoint& cp, const ReshardOptions& options)
{
    if (options.worldSize < 1) throw Error(ErrorKind::Usage, cp.path, "--world-size must be at least 1");
    DcpPlan plan;
    std::set<const Entry*> numericSteps;
    for (const auto& view : findOptimizers(cp)) {
        if (!savesStepAsTensor(detectOptimizerKind(view))) continue;
        for (const auto& p : view.params)
            if (auto it = p.states.find("step"); it != p.states.end() && !it->second->isTensor())
                numericSteps.insert(it->second);
    }
    // a companion file (Fabric's meta.pt) goes into the output as it is, and its entries stay out of the DCP part
    for (const auto& c : cp.companionFiles)
        plan.copies.push_back({c.file, cp.files->open(c.file)});
    for (const Entry& e : cp.entries) {
        if (cp.companionOf(e)) continue;
        if (e.path.empty() || e.path.front().isIndex())
            throw Error(ErrorKind::Format, cp.path,
                "is not a state dict (its top level is not a mapping); DCP can only store mappings");
        if (!e.isTensor()) {
            if (!e.error.empty()) throw Error(ErrorKind::Format, cp.path, "cannot reshard '" + e.key + "': " + e.error);
            if (numericSteps.count(&e))
                if (const auto f = stepAsFloat32(e.value)) {
                    DcpPlan::Tensor pt;
                    pt.path = e.path;
                    pt.dtype = DType::Float32;
                    pt.addChunk(0, {}, {});
                    pt.produce = [value = *f](const std::vector<int64_t>&, const std::vector<int64_t>&,
                                     const ByteSink& sink) { writeFloat32Scalar(value, sink); };
                    plan.order.push_back({true, plan.tensors.size()});
                    plan.tensors.push_back(std::move(pt));
                    continue;
                }
            if (const std::string why = TorchSaveWriter::unwritableReason(e.value, true); !why.empty()) {
                plan.leftOut.push_back(e.key + ": " + why);
                continue;
            }
            plan.order.push_back({false, plan.values.size()});
            plan.values.push_back({e.path, e.value, 0, {}, storagesInside(cp, e)});
            continue;
        }
        const TensorEntry& t = *e.tensor;
        if (!ShardLayout::of(t).complete())
            throw Error(ErrorKind::Format, cp.path,
                "cannot reshard '" + e.key + "': its chunks do not tile the tensor (run `optscope-cli check`)");
        DcpPlan::Tensor pt;
        pt.path = e.path;
        pt.dtype = t.dtype;
        pt.shape = t.shape;
        const Entry* entry = &e;
        if (options.device == ComputeDevice::Cuda)
            pt.produce = [&cp, entry](const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes,
                             const ByteSink& sink) { gpuAssembleBox(cp, *entry, offsets, sizes, sink); };
        else {
            pt.produce = [&cp, entry](const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes,
                             const ByteSink& sink) {
                TensorAssembler(cp, *entry).streamBox(offsets, sizes, sink.bytes, {}, sink.region);
            };
            pt.prefetch = [&cp, entry](const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
                TensorAssembler::prefetchBox(cp, *entry, offsets, sizes);
            };
        }
        for (const auto& c : reshardTargetChunks(t.shape, options))
            pt.addChunk(c.rank, c.offsets, c.sizes);
        plan.order.push_back({true, plan.tensors.size()});
        plan.tensors.push_back(std::move(pt));
    }
    if (plan.tensors.empty() && plan.values.empty())
        throw Error(ErrorKind::Format, cp.path, "has no entries to reshard");
    keepDcpItemsWhole(plan); // (writeDcp would too; here the dry run's counts see it)
    return plan;
}

ReshardSummary summarizeReshard(const Checkpoint& cp, const ReshardOptions& options)
{
    const DcpPlan plan = planReshard(cp, options);
    ReshardSummary s;
    s.worldSize = options.worldSize;
    s.bytesPerRank.assign(static_cast<size_t>(options.worldSize), 0);
    s.chunksPerRank.assign(static_cast<size_t>(options.worldSize), 0);
    for (const auto& t : plan.tensors)
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const uint64_t bytes = static_cast<uint64_t>(t.chunks.numelOf(c)) * dtypeSize(t.dtype);
            const auto r = static_cast<size_t>(std::clamp(t.chunks.rank(c), 0, options.worldSize - 1));
            s.bytesPerRank[r] += bytes;
            ++s.chunksPerRank[r];
            s.bytes += bytes;
            ++s.tensorItems;
        }
    // tensors inside a value kept whole (a tuple or namedtuple holding one) are in the value's item, on its rank
    for (const auto& v : plan.values) {
        const uint64_t bytes = valueTensorBytes(v);
        s.bytesPerRank[static_cast<size_t>(std::clamp(v.rank, 0, options.worldSize - 1))] += bytes;
        s.bytes += bytes;
    }
    s.valueItems = plan.values.size();
    for (const auto& c : plan.copies)
        s.copied.push_back(c.name);
    s.leftOut = plan.leftOut;
    return s;
}

// read as a flat tensor of its elements: endianness, change checks and remote reads as every tensor's. Shared
// storages and values come once; a value without located storages is not walked
std::vector<DcpPlan::Value::Storage> storagesInside(const Checkpoint& cp, const Entry& e)
{
    std::vector<DcpPlan::Value::Storage> out;
    if (e.valueFile.empty()) return out;
    std::unordered_set<const PyValue*> seen;
    std::unordered_set<const PyStorageInfo*> storages;
    std::vector<const PyValue*> stack {e.value};
    while (!stack.empty()) {
        const PyValue* v = stack.back();
        stack.pop_back();
        // a storage on its own: a quantized tensor's (_rebuild_qtensor), its elements read as the plain integers of
        // their size (so that a big-endian file's are swapped as those are)
        const bool bare = v->kind == PyKind::Storage && v->storage;
        if ((!bare && !mayHaveChildren(v)) || !seen.insert(v).second) continue;
        const bool ofTensor = v->kind == PyKind::Tensor && v->tensor->storage
            && v->tensor->storage->kind == PyKind::Storage && v->tensor->storage->storage && !v->tensor->wrapper;
        if (ofTensor || bare) {
            const PyStorageInfo* s = bare ? v->storage : v->tensor->storage->storage;
            if (!s->located || !storages.insert(s).second) continue;
            const DType dtype = bare ? dtypeStoredAs(s->dtype) : v->tensor->dtype;
            const uint64_t elem = std::max<uint64_t>(dtypeSize(dtype), 1);
            TensorEntry stored;
            stored.dtype = dtype;
            stored.shape = {static_cast<int64_t>(s->recordLength / elem)};
            TensorChunk chunk;
            chunk.offsets = {0};
            chunk.sizes = stored.shape;
            chunk.source.file = e.valueFile.str();
            chunk.source.offset = s->recordOffset;
            chunk.source.length = s->recordLength;
            chunk.source.strides = {1};
            chunk.source.bigEndian = e.valueBigEndian;
            stored.chunks.push_back(std::move(chunk));
            auto entry = std::make_shared<Entry>();
            entry->key = e.key;
            entry->kind = EntryKind::Tensor;
            entry->tensor = std::move(stored);
            TensorToWrite bytes;
            bytes.dtype = dtype;
            bytes.shape = entry->tensor->shape;
            bytes.produce = [&cp, entry = std::shared_ptr<const Entry>(entry)](const ByteSink& sink) {
                TensorAssembler(cp, *entry).stream(sink.bytes, {}, {}, sink.region);
            };
            out.push_back({s, std::move(bytes)});
            continue;
        }
        forEachChild(v, [&](const PyValue* c) { stack.push_back(c); });
    }
    return out;
}

DcpWriteStats reshardCheckpoint(
    const Checkpoint& cp, const std::string& outDir, const ReshardOptions& options, const Progress& progress)
{
    if (const std::string why = cp.missingDataReason(); !why.empty())
        throw Error(ErrorKind::Format, cp.path, "is not whole, nothing written: " + why);
    // nothing is published from an input that changed while it was read
    const WriteOptions write = guardedWrite(options.write, {&cp});
    refuseOutputOverInputs(outDir, write.inputs); // before the plan, which can take seconds
    describeComputeDevice(options.device); // --device cuda without a usable GPU fails before anything is written
    return readGuarded({&cp}, [&] { return writeDcp(planReshard(cp, options), outDir, progress, write); });
}

} // namespace optscope
