// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The object a writer saves (torch.save, DCP): nested dicts, lists and tuples of plain values and tensors whose bytes
// a producer streams into a sink. Shared by the writers and the code that builds what they write (gather, fix, the
// FSDP1 unflattening), none of which needs a writer to describe its output.

#include "optscope/model/checkpoint.h"

#include <cstdint>

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
    /// a view's first element in its storage (elements of dtype); 0 but for a tensor inside a value (addStorage)
    int64_t storageOffset = 0;
    int64_t numel() const;
    /// the elements its storage holds, which produce() delivers: numel(), or a view's storageElements
    int64_t storedNumel() const { return strides.empty() ? numel() : storageElements; }
};

/// The object to save: nested dicts, lists and tuples whose leaves are plain values (from a checkpoint's value
/// graph) or tensors. Paths create containers the way DCP's set_element does: a string key makes a dict, an integer
/// a list (padded with None up to the index).
///
/// Memory is per node, with no allocation of its own: a million values of an optimizer's state are a million leaves
/// (the tree of a gather of 1M values held 283 MB in per-container vectors and a node-based hash map; now 107 MB).
/// A container's children are a list linked through the nodes, in insertion order; one open-addressing table over
/// (parent, key or index) finds a child in constant time.
class StateTree
{
public:
    enum class Kind : uint8_t { Dict, List, Tuple, None, Value, Tensor };
    static constexpr uint32_t kNoNode = UINT32_MAX;
    struct Node
    {
        Kind kind = Kind::None;
        bool keyed = false; ///< a dict's child: found by key; otherwise a list's or tuple's, found by position
        uint32_t parent = kNoNode;
        uint32_t position = 0; ///< its place among its parent's children
        uint32_t next = kNoNode; ///< the parent's next child
        uint32_t first = kNoNode; ///< Dict, List, Tuple: first child
        uint32_t last = kNoNode; ///< Dict, List, Tuple: last child
        uint32_t size = 0; ///< Dict, List, Tuple: number of children
        union {
            const PyValue* value = nullptr; ///< Value
            size_t tensor; ///< Tensor: index into tensors()
        };
        const PyValue* keyValue = nullptr; ///< keyed: the original key object, or null for a str key
        CompactString key; ///< keyed: str(key)
    };

    StateTree(); ///< an empty dict as root
    /// room for @p nodes nodes: a caller that knows its paths (the sum of their lengths bounds the nodes) spares the
    /// copies of a growing array (untouched room costs address space, not memory)
    void reserve(size_t nodes);
    void setValue(const KeyPath& path, const PyValue* value);
    void setTensor(const KeyPath& path, TensorToWrite tensor);
    /// The bytes of @p storage, a storage that tensors inside a value look at (a namedtuple's field, an object's
    /// attribute: dcp.save pickles such a value whole, tensors and all): written as a storage record of its own,
    /// which every tensor of the value's graph over @p storage refers to, as torch.save shares one storage among its
    /// views. @p bytes: a flat tensor of the storage's elements, in the dtype its tensors have
    void addStorage(const PyStorageInfo* storage, TensorToWrite bytes);
    /// the index in tensors() of @p storage's record (addStorage), or -1
    int64_t storageRecordOf(const PyStorageInfo* storage) const;
    /// how many of tensors() are such storages' records: the rest are the tree's tensors
    size_t storageRecords() const { return m_storages.size(); }

    const Node& node(size_t i) const { return m_nodes[i]; }
    size_t root() const { return 0; }
    /// calls @p f(index, node) for each child of @p n (a Dict, List or Tuple) in order
    template<typename F> void forEachChild(const Node& n, F&& f) const
    {
        for (uint32_t c = n.first; c != kNoNode; c = m_nodes[c].next)
            f(size_t(c), m_nodes[c]);
    }
    /// the children of @p n as indices (a copy: for tests and small containers)
    std::vector<size_t> children(const Node& n) const;
    const std::vector<TensorToWrite>& tensors() const { return m_tensors; }

private:
    size_t place(const KeyPath& path);
    size_t child(size_t parent, const KeyPathElem& elem, Kind containerKind);
    /// a new node of @p kind appended to @p parent's children
    uint32_t append(uint32_t parent, Kind kind, const KeyPathElem* keyed);
    void setKind(size_t node, Kind kind);
    static size_t slotHash(uint32_t parent, bool keyed, std::string_view key, uint32_t position);
    size_t slotHash(const Node& n) const;
    void index(uint32_t node);
    void grow();
    std::vector<Node> m_nodes;
    std::vector<uint32_t> m_slots; ///< open addressing over every child node (0: empty; the root is no child)
    size_t m_indexed = 0;
    std::vector<TensorToWrite> m_tensors;
    std::unordered_map<const PyStorageInfo*, size_t> m_storages; ///< addStorage's: storage -> its record
};

} // namespace optscope
