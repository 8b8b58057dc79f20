// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/gather.h"
#include "optscope/analysis/reshard.h"
#include "optscope/base/error.h"
#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/gpu/gpu_assembler.h"
#include "optscope/gpu/gpu_devices.h"
#include "optscope/model/flat_param_layout.h"
#include "optscope/model/read_guard.h"
#include "optscope/model/shard_layout.h"
#include "optscope/tensor/tensor_assembler.h"

namespace optscope {

ComputeDevice computeDeviceFromName(const std::string& name)
{
    if (name == "cpu") return ComputeDevice::Cpu;
    if (name == "cuda" || name == "gpu") return ComputeDevice::Cuda;
    throw Error(ErrorKind::Usage, {}, "unknown device '" + name + "' (expected cpu or cuda)");
}

std::string describeComputeDevice(ComputeDevice device)
{
    return device == ComputeDevice::Cuda ? gpuAssemblerDescription() : "cpu";
}

bool keyMatchesPrefix(const std::string& key, const std::string& prefix)
{
    if (prefix.empty() || key == prefix) return true;
    return key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0
        && (key[prefix.size()] == '.' || prefix.back() == '.');
}

namespace {

std::string layoutProblem(const ShardLayout& L)
{
    if (!L.outOfBounds.empty())
        return "a chunk lies outside the tensor " + boxText({std::vector<int64_t>(L.shape.size(), 0), L.shape});
    if (!L.overlaps.empty())
        return "chunks " + std::to_string(L.overlaps[0].first) + " and " + std::to_string(L.overlaps[0].second)
            + " overlap at " + boxText(L.overlaps[0].region);
    if (!L.gaps.empty()) return "no chunk covers " + boxText(L.gaps[0]);
    return "chunks cover " + std::to_string(L.coveredElements) + " of " + std::to_string(L.totalElements) + " elements";
}

} // namespace

namespace {

/// a broadcast view too large to expand (broadcastStorageOf) as a view to write: its storage holds the stored
/// elements in row-major order, and a broadcast dimension's stride is 0
TensorToWrite broadcastViewToWrite(const Checkpoint& cp, const Entry& e, BroadcastStorage view)
{
    TensorToWrite t;
    t.dtype = e.tensor->dtype;
    t.shape = e.tensor->shape;
    t.isParameter = e.tensor->isParameter;
    t.requiresGrad = e.tensor->requiresGrad; // as torch.load gives it, a plain tensor's too
    const std::vector<int64_t>& stored = view.stored.tensor->shape; // no size 0: the view holds elements
    t.strides = contiguousStrides(stored);
    for (size_t d = 0; d < stored.size(); ++d)
        if (stored[d] == 1 && t.shape[d] > 1) t.strides[d] = 0;
    t.storageElements = view.stored.tensor->numel();
    auto entry = std::make_shared<const Entry>(std::move(view.stored));
    t.produce = [&cp, entry](const ByteSink& sink) { TensorAssembler(cp, *entry).stream(sink.bytes, {}, {}); };
    return t;
}

} // namespace

StateTree buildStateTree(const Checkpoint& cp, const GatherOptions& options, std::vector<std::string>* leftOut)
{
    StateTree tree;
    size_t pathElements = 1; // the root, and at most one node per path element
    for (const Entry& e : cp.entries)
        if (keyMatchesPrefix(e.key, options.onlyPrefix)) pathElements += e.path.size();
    tree.reserve(pathElements);
    size_t selected = 0;
    for (const Entry& e : cp.entries) {
        if (!keyMatchesPrefix(e.key, options.onlyPrefix)) continue;
        ++selected;
        if (!e.isTensor()) {
            if (!e.error.empty()) throw Error(ErrorKind::Format, cp.path, "cannot gather '" + e.key + "': " + e.error);
            if (leftOut)
                if (const std::string why = TorchSaveWriter::unwritableReason(e.value); !why.empty()) {
                    leftOut->push_back(e.key + ": " + why);
                    continue;
                }
            tree.setValue(e.path, e.value);
            // the tensors a value holds (a sparse tensor's indices and values) over their storages' records
            for (auto& storage : storagesInside(cp, e))
                tree.addStorage(storage.storage, std::move(storage.bytes));
            continue;
        }
        if (auto view = broadcastStorageOf(e)) {
            // too large to expand: written as torch.save writes it, its stored elements and the view's strides (0
            // along each broadcast dimension), as torch.load + torch.save keep it
            tree.setTensor(e.path, broadcastViewToWrite(cp, e, std::move(*view)));
            continue;
        }
        if (e.tensor->withoutData()) // (its layout has no chunk at all: said as what it is)
            throw Error(
                ErrorKind::Unsupported, cp.path, "cannot gather '" + e.key + "': " + e.tensor->withoutDataText());
        const ShardLayout layout = ShardLayout::of(*e.tensor);
        if (!layout.complete())
            throw Error(ErrorKind::Format, cp.path, "cannot gather '" + e.key + "': " + layoutProblem(layout));
        TensorToWrite t;
        t.dtype = e.tensor->dtype;
        t.shape = e.tensor->shape;
        t.isParameter = e.tensor->isParameter;
        t.requiresGrad = e.tensor->requiresGrad; // as torch.load gives it, a plain tensor's too
        const Entry* entry = &e;
        if (options.device == ComputeDevice::Cuda)
            t.produce = [&cp, entry](const ByteSink& sink) { gpuAssemble(cp, *entry, sink); };
        else {
            t.produce = [&cp, entry](const ByteSink& sink) {
                TensorAssembler(cp, *entry).stream(sink.bytes, {}, {}, sink.region);
            };
            t.prefetch = [&cp, entry] { TensorAssembler::prefetch(cp, *entry); };
        }
        tree.setTensor(e.path, std::move(t));
    }
    if (selected == 0)
        throw Error(ErrorKind::Usage, cp.path,
            options.onlyPrefix.empty() ? "the checkpoint has no entries"
                                       : "no entry matches '" + options.onlyPrefix + "'");
    return tree;
}

static GatherResult gatherCheckpointUnguarded(
    const Checkpoint& cp, const std::string& output, const GatherOptions& options, const Progress& progress)
{
    GatherResult r;
    r.device = describeComputeDevice(options.device); // throws if no GPU can be used
    const StateTree tree = buildStateTree(cp, options, &r.leftOut);
    for (size_t i = 0; i < cp.entries.size(); ++i)
        if (!cp.entries[i].isTensor() && keyMatchesPrefix(cp.entries[i].key, options.onlyPrefix)) ++r.values;
    r.values -= r.leftOut.size();
    r.stats = TorchSaveWriter::write(tree, output, progress, options.write);
    return r;
}

UnflattenWritten unflattenToFile(const std::vector<CheckpointPtr>& ranks, const Checkpoint& model,
    const Fsdp1Model& layout, const std::string& output, const Progress& progress, WriteOptions write)
{
    std::vector<const Checkpoint*> inputs {&model};
    for (const auto& r : ranks)
        inputs.push_back(r.get());
    write = guardedWrite(std::move(write), inputs); // nothing is published from an input that changed
    refuseOutputOverInputs(output, write.inputs); // before the work, not after it
    UnflattenWritten w;
    runReadGuarded(inputs, [&] {
        w.result = unflattenFsdp1(ranks, layout);
        w.stats = TorchSaveWriter::write(w.result.tree, output, progress, write);
    });
    return w;
}

GatherResult gatherCheckpoint(
    const Checkpoint& cp, const std::string& output, const GatherOptions& options, const Progress& progress)
{
    if (const std::string why = cp.missingDataReason(); !why.empty())
        throw Error(ErrorKind::Format, cp.path, "is not whole, nothing written: " + why);
    GatherOptions guarded = options;
    guarded.write = guardedWrite(options.write, {&cp}); // nothing is published from an input that changed
    refuseOutputOverInputs(output, guarded.write.inputs); // before any work
    return readGuarded({&cp}, [&] { return gatherCheckpointUnguarded(cp, output, guarded, progress); });
}

} // namespace optscope
