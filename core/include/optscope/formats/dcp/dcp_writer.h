// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Writes torch.distributed.checkpoint folders that torch.distributed.checkpoint.load reads (see dcp_reader.h for the
// format): .metadata (a pickle of Metadata with TensorStorageMetadata / BytesStorageMetadata, planner_data paths
// and storage_data locations) and one __<rank>_0.distcp per rank that stores anything, holding its items back to back,
// each a complete torch.save archive (prefix "archive/", 64-byte alignment relative to the item). BYTE_IO values come
// first in a file, then tensor chunks, as FileSystemWriter orders them.
//
// The folder is written under a temporary name next to the destination and renamed when complete.

#include "optscope/base/progress.h"
#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/model/checkpoint.h"

#include <memory>

#include <string>
#include <vector>

namespace optscope {

struct DcpPlan
{
    /// the bytes of one box of a tensor (global offsets and sizes per dimension), row-major over sizes, little-endian
    using BoxProducer = std::function<void(
        const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes, const ByteSink& sink)>;
    struct Tensor
    {
        KeyPath path; ///< key = joinKeyPath(path); path goes to planner_data
        DType dtype = DType::Float32;
        std::vector<int64_t> shape;
        bool requiresGrad = false;
        /// the chunks to write, as boxes: the rank whose __<rank>_0.distcp stores each, its offsets and sizes (a plan
        /// of 1,024 ranks resharded to 2,048 has millions: no heap object per chunk, one producer per tensor)
        ChunkTable chunks;
        BoxProducer produce;
        /// optional: asks ahead for the bytes of a box that produce() will be called for next, so that a remote
        /// source's requests are in flight while the box before is written (TensorAssembler::prefetchBox)
        std::function<void(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes)> prefetch;
        void addChunk(int rank, const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes)
        {
            chunks.appendBox(rank, offsets.data(), sizes.data(), offsets.size());
        }
    };
    struct Value
    {
        KeyPath path;
        const PyValue* value = nullptr; ///< the whole value, or null when parts hold it
        int rank = 0;
        /// A value DCP keeps as one item although entries lie inside it (dcpItemDepths: a tuple holding a tensor):
        /// its leaves, by path below `path`, saved together in the item's archive as dcp.save pickles the tuple.
        struct Part
        {
            KeyPath path; ///< below the item's path; its first element is the tuple's or list's index
            const PyValue* value = nullptr; ///< a value leaf, or null for a tensor
            TensorToWrite tensor;
        };
        std::vector<Part> parts;
        /// the storages that tensors inside the value look at (a namedtuple holding a tensor, which dcp.save pickles
        /// whole), each with its bytes: records of the item's archive (StateTree::addStorage)
        struct Storage
        {
            const PyStorageInfo* storage = nullptr;
            TensorToWrite bytes;
        };
        std::vector<Storage> storages;
    };
    /// a file written into the folder as it is, byte for byte (Checkpoint::companionFiles: Fabric's meta.pt)
    struct Copy
    {
        std::string name; ///< relative to the folder
        std::shared_ptr<const ByteSource> source; ///< an input's file, checked unchanged before the folder is committed
    };
    std::vector<Tensor> tensors;
    std::vector<Value> values;
    std::vector<Copy> copies;
    /// values the plan leaves out, "key: why" (TorchSaveWriter::unwritableReason with objects: a tensor inside a
    /// value); inert objects are written back as they were pickled, since DCP's loader unpickles BYTE_IO items with
    /// weights_only=False
    std::vector<std::string> leftOut;
    /// order of the keys in .metadata (and so of the nesting a loader rebuilds): (is tensor, index); empty = tensors,
    /// then values
    std::vector<std::pair<bool, size_t>> order;
};

struct DcpWriteStats
{
    size_t files = 0; ///< data files (__<rank>_0.distcp); .metadata is one more
    size_t tensorItems = 0;
    size_t valueItems = 0;
    std::vector<std::string> copied; ///< files copied as they are (DcpPlan::copies), by name
    uint64_t bytes = 0; ///< all files written, .metadata and copies included
    std::vector<std::string> leftOut; ///< the plan's (DcpPlan::leftOut)
};

/// Makes @p plan's items the ones dcp.save (torch 2.4+ traverse_state_dict) makes of the same state dict, where a
/// reader flattened further (flattenStateDict shows each tensor inside a tuple as an entry of its own). DCP descends
/// every mapping, never a tuple, and a list only when one of its elements is a tensor, a mapping or such a list; so
/// {"t": (tensor, 5)} is the one item "t", saved whole with the tensor in its archive, and so is [(tensor, 5)]: the
/// tensors and values inside become one Value's parts, in the place of the first. writeDcp does this to every plan;
/// a caller that counts the plan's items does it first.
void keepDcpItemsWhole(DcpPlan& plan);

/// the bytes of the tensors a value item holds (its parts' tensors, the storages of tensors inside it)
uint64_t valueTensorBytes(const DcpPlan::Value& value);

/// Writes @p plan as a DCP folder at @p outDir, which must not exist yet (or be an empty directory).
DcpWriteStats writeDcp(
    const DcpPlan& plan, const std::string& outDir, const Progress& progress = {}, WriteOptions options = {});

} // namespace optscope
