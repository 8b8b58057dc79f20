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
#include "optscope/formats/torch_save_writer.h"
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
        const PyValue* value = nullptr;
        int rank = 0;
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

/// Writes @p plan as a DCP folder at @p outDir, which must not exist yet (or be an empty directory).
DcpWriteStats writeDcp(
    const DcpPlan& plan, const std::string& outDir, const Progress& progress = {}, WriteOptions options = {});

} // namespace optscope
