// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The object a writer saves (torch.save, DCP): nested dicts, lists and tuples of plain values and tensors whose bytes
// a producer streams into a sink. Shared by the writers and the code that builds what they write (gather, fix, the
// FSDP1 unflattening), none of which needs a writer to describe its output.

#include "optscope/model/checkpoint.h"

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace optscope {

class ByteSource;

/// Where a tensor's bytes go, row-major and little-endian, block by block. A producer calls it with bytes; where the
/// next bytes are a contiguous region of a mapped file, it may instead pass that region (region(file, offset, length)),
/// which the writer then copies inside the kernel. Producers must only use the region form when it is set.
struct ByteSink
{
    std::function<void(const uint8_t* data, size_t size)> bytes;
    std::function<void(const ByteSource& file, uint64_t offset, uint64_t length)> region; ///< optional

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
    /// optional: asks ahead for what produce() will read; a writer calls it for the next tensor while it writes this
    /// one, so that a remote source's requests are in flight across the boundary (TensorAssembler::prefetch)
    std::function<void()> prefetch;
    /// a view written as a view (torch.save keeps one: a broadcast view too large to expand, whose gather was 4 EiB):
    /// its strides, over a storage of storageElements elements that produce() delivers. Empty: contiguous, numel()
    std::vector<int64_t> strides;
    int64_t storageElements = 0;
    int64_t numel() const;
    /// the elements its storage holds, which produce() delivers: numel(), or a view's storageElements
    int64_t storedNumel() const { return strides.empty() ? numel() : storageElements; }
};

/// The object to save: nested dicts, lists and tuples whose leaves are plain values (from a checkpoint's value
/// graph) or tensors. Paths create containers the way DCP's set_element does: a string key makes a dict, an integer
/// a list (padded with None up to the index).
class StateTree
{
public:
    enum class Kind { Dict, List, Tuple, None, Value, Tensor };
    /// a dict's, list's or tuple's contents, apart from the nodes: most nodes are leaves (a million values of an
    /// optimizer's state), and three empty vectors each tripled a node's size
    struct Container
    {
        std::vector<size_t> children; ///< Dict: values; List/Tuple: elements
        std::vector<std::string> keys; ///< Dict: str(key)
        std::vector<const PyValue*> keyValues; ///< Dict: the original key object, or null for a str key
    };
    struct Node
    {
        Kind kind = Kind::None;
        size_t container = 0; ///< Dict, List, Tuple: its contents, container()
        const PyValue* value = nullptr; ///< Value
        size_t tensor = 0; ///< Tensor: index into tensors()
    };

    StateTree(); ///< an empty dict as root
    void setValue(const KeyPath& path, const PyValue* value);
    void setTensor(const KeyPath& path, TensorToWrite tensor);

    const Node& node(size_t i) const { return m_nodes[i]; }
    /// the contents of @p n, a Dict, List or Tuple
    const Container& container(const Node& n) const { return m_containers[n.container]; }
    size_t root() const { return 0; }
    const std::vector<TensorToWrite>& tensors() const { return m_tensors; }

private:
    size_t place(const KeyPath& path);
    size_t child(size_t parent, const KeyPathElem& elem, Kind containerKind);
    /// @p node becomes of @p kind, with contents of its own when that is a container kind and it had none
    void setKind(size_t node, Kind kind);
    static size_t keyHash(size_t parent, std::string_view key);
    std::vector<Node> m_nodes;
    std::vector<Container> m_containers;
    /// the dict children of every node by hash(parent, key) -> (parent, position): finding a key is constant time
    /// (a linear search per key made a dict of N keys cost N^2 / 2 comparisons: 16 s at 100k); no key is copied
    std::unordered_multimap<size_t, std::pair<size_t, size_t>> m_keyIndex;
    std::vector<TensorToWrite> m_tensors;
};

} // namespace optscope
