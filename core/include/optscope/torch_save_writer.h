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

#include "optscope/checkpoint.h"
#include "optscope/output_file.h"
#include "optscope/progress.h"

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace optscope {

class MappedFile;

/// Where a tensor's bytes go, row-major and little-endian, block by block. A producer calls it with bytes; where the
/// next bytes are a contiguous region of a mapped file, it may instead pass that region (region(file, offset, length)),
/// which the writer then copies inside the kernel. Producers must only use the region form when it is set.
struct ByteSink
{
    std::function<void(const uint8_t* data, size_t size)> bytes;
    std::function<void(const MappedFile& file, uint64_t offset, uint64_t length)> region; ///< optional

    ByteSink() = default;
    template<typename F, typename = decltype(std::declval<F&>()(static_cast<const uint8_t*>(nullptr), size_t(0)))>
    ByteSink(F f) // NOLINT(google-explicit-constructor): any bytes callback is a sink
        : bytes(std::move(f))
    { }
    void operator()(const uint8_t* data, size_t size) const { bytes(data, size); }
};
using TensorProducer = std::function<void(const ByteSink& sink)>;

/// the 4 bytes of a 0-dim float32 tensor holding @p value, little-endian (an optimizer's step, as PyTorch saves it)
void writeFloat32Scalar(float value, const ByteSink& sink);

struct TensorToWrite
{
    DType dtype = DType::Float32;
    std::vector<int64_t> shape;
    bool isParameter = false;
    bool requiresGrad = false;
    TensorProducer produce; ///< must deliver exactly numel * dtypeSize bytes
    int64_t numel() const;
};

/// The object to save: nested dicts, lists and tuples whose leaves are plain values (from a checkpoint's value
/// graph) or tensors. Paths create containers the way DCP's set_element does: a string key makes a dict, an integer
/// a list (padded with None up to the index).
class StateTree
{
public:
    enum class Kind { Dict, List, Tuple, None, Value, Tensor };
    struct Node
    {
        Kind kind = Kind::None;
        std::vector<size_t> children; ///< Dict: values; List/Tuple: elements
        std::vector<std::string> keys; ///< Dict: str(key)
        std::vector<const PyValue*> keyValues; ///< Dict: the original key object, or null for a str key
        const PyValue* value = nullptr; ///< Value
        size_t tensor = 0; ///< Tensor: index into tensors()
    };

    StateTree(); ///< an empty dict as root
    void setValue(const KeyPath& path, const PyValue* value);
    void setTensor(const KeyPath& path, TensorToWrite tensor);

    const Node& node(size_t i) const { return m_nodes[i]; }
    size_t root() const { return 0; }
    const std::vector<TensorToWrite>& tensors() const { return m_tensors; }

private:
    size_t place(const KeyPath& path);
    size_t child(size_t parent, const KeyPathElem& elem, Kind containerKind);
    static size_t keyHash(size_t parent, std::string_view key);
    std::vector<Node> m_nodes;
    /// the dict children of every node by hash(parent, key) -> (parent, position): finding a key is constant time
    /// (a linear search per key made a dict of N keys cost N^2 / 2 comparisons: 16 s at 100k); no key is copied
    std::unordered_multimap<size_t, std::pair<size_t, size_t>> m_keyIndex;
    std::vector<TensorToWrite> m_tensors;
};

struct WriteStats
{
    size_t tensors = 0;
    uint64_t tensorBytes = 0;
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
    /// 'argparse.Namespace'"), or with @p objects into a DCP value (a tensor inside a value, nesting past 400
    /// levels), or empty when it can: the writer's own rule (the value is pickled once to see)
    static std::string unwritableReason(const PyValue* value, bool objects = false);
};

} // namespace optscope
