// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Writes torch.save files that `torch.load(path, weights_only=True)` reads, streaming: the whole object is never in
// memory, each tensor's bytes are produced block by block into its storage record.
//
// Layout (as PyTorch 2.6 writes it, see zip_writer.h and torch_save_reader.h): <prefix>/data.pkl (protocol 2),
// <prefix>/byteorder ("little"), <prefix>/data/<k> (one storage per tensor, k = 0, 1, ...), <prefix>/version ("3\n");
// the prefix is the output file's name without its extension, as torch.save names it. Tensors are
// _rebuild_tensor_v2 over a typed storage (FloatStorage, ...), or _rebuild_tensor_v3 over torch.storage.UntypedStorage
// for dtypes without one (float8, uint16-64); contiguous strides, storage offset 0, no requires_grad.
//
// The output goes to a temporary name next to the destination and is renamed when complete.

#include "optscope/base/progress.h"
#include "optscope/io/output_file.h"
#include "optscope/model/checkpoint.h"
#include "optscope/model/state_tree.h"

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace optscope {

struct WriteStats
{
    size_t tensors = 0; ///< the tree's tensors (not the storages of tensors inside its values: StateTree::addStorage)
    uint64_t tensorBytes = 0; ///< every record's, those storages' too
    uint64_t fileBytes = 0;
};

class TorchSaveWriter
{
public:
    /// Writes @p tree to @p path (temporary name, then rename). Throws Error on I/O failure, on values that
    /// weights_only loading cannot represent (inert objects of unknown classes), or when cancelled (the temporary
    /// is removed and @p path is left untouched).
    static WriteStats write(
        const StateTree& tree, const std::string& path, const Progress& progress = {}, WriteOptions options = {});
    /// Writes @p tree as a complete archive at the current position of @p out (a DCP .distcp item: offsets and
    /// alignment relative to the archive's first byte), under @p prefix ("archive" for DCP). @p objects: inert
    /// objects are written back as they were pickled (a DCP value: its loader unpickles with weights_only=False)
    static WriteStats writeArchive(const StateTree& tree, OutputFile& out, const std::string& prefix,
        const Progress& progress = {}, bool objects = false);
    /// the archive prefix torch.save uses for @p path: its file name without the last extension
    static std::string archivePrefix(const std::string& path);
    /// why @p value cannot be written into a file that torch.load(weights_only=True) accepts ("an object of class
    /// 'argparse.Namespace'"), or with @p objects into a DCP value (nesting past 400 levels, a tensor inside it
    /// that nestedTensorUnwritable refuses), or empty when it can: the writer's own rule (the value is pickled once to
    /// see)
    static std::string unwritableReason(const PyValue* value, bool objects = false);
    /// why the tensor @p value, found inside a value, cannot be written over its storage's bytes (a sharded or
    /// meta tensor, a view outside its storage), or empty when it can
    static std::string nestedTensorUnwritable(const PyValue* value);
};

} // namespace optscope
