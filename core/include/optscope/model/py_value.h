// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The inert Python object graph that the pickle machine produces. Nothing here can execute code: classes and
// functions are only names (Global), instances of unknown classes are records of how they would have been built
// (Object: callable, args, state), and torch tensors are lazy references to storage bytes (Tensor).
//
// Values live in a PyArena and are referenced by plain pointers: pickles may contain cycles and shared references
// (memo), which an owning tree could not represent. The arena owns every value and keeps the input bytes alive,
// because strings point into them (zero-copy).

#include "optscope/model/dict_index.h"
#include "optscope/model/dtype.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace optscope {

enum class PyKind : unsigned char {
    None,
    Bool,
    Int, ///< fits in int64
    BigInt, ///< text = little-endian two's complement bytes
    Float,
    Complex,
    Str, ///< UTF-8 text
    Bytes,
    ByteArray,
    Tuple,
    List,
    Dict, ///< ordered; dict, OrderedDict, defaultdict, Counter
    Set,
    FrozenSet,
    Global, ///< a class or function, by name only
    Object, ///< an inert instance or call result: callable(args) [+ BUILD state]
    Storage, ///< a torch storage (persistent id)
    Tensor, ///< a torch tensor: a lazy view on a storage, or a sharded wrapper (ShardedTensor, DTensor)
    Dtype, ///< a torch dtype
};

const char* pyKindName(PyKind kind);

/// What a plain value was made by, where torch made it (PyValue::torchType).
enum class PyTorchType : unsigned char { None, Size, Device, Layout };

struct PyValue;
/// @p v's Python type as Python names it: pyKindName, or "torch.Size" / "torch.device" / "torch.layout"
const char* pyTypeName(const PyValue* v);

/// How an Object came to be (which opcode would have called the class).
enum class PyObjectHow : unsigned char { Reduce, NewObj, Inst };

struct PyGlobalInfo
{
    std::string_view module;
    std::string_view name; ///< qualified name, may contain dots (nested classes, enum members)
    bool known = false; ///< in the interpreted (safe) set
    std::string path() const { return std::string(module) + "." + std::string(name); }
};

struct PyObjectInfo
{
    PyValue* callable = nullptr; ///< a Global, or another value for REDUCE on a non-global callable
    PyValue* args = nullptr; ///< tuple (may be null)
    PyValue* kwargs = nullptr; ///< NEWOBJ_EX only
    PyValue* state = nullptr; ///< BUILD argument, if any
    std::vector<PyValue*> listItems; ///< APPEND(S) on the object (list subclasses)
    std::vector<PyValue*> dictItems; ///< SETITEM(S) on the object (dict subclasses), key/value interleaved
    PyObjectHow how = PyObjectHow::Reduce;
};

struct PyContainer
{
    std::vector<PyValue*> items; ///< Dict: key0, value0, key1, value1, ...
    PyValue* attrs = nullptr; ///< BUILD state applied to a dict (OrderedDict.__dict__, e.g. state_dict _metadata)
    /// Dict (built by the pickle machine once past 16 items or given a long key): hashable key -> position of the key
    /// in items, under the hash of the key's rendering (dict_index.h)
    std::unique_ptr<DictIndex> index;
};

struct PyStorageInfo
{
    std::string_view key; ///< record name under "<prefix>/data/" (zip) or root key (legacy)
    std::string_view location; ///< "cpu", "cuda:0", ...
    int64_t numel = 0; ///< elements of dtype
    /// where the torch.save reader found the storage's bytes: absolute offset in the mapped file and length. Kept here
    /// rather than in a map by key, which took about 80 bytes per tensor of a file of many small tensors.
    uint64_t recordOffset = 0;
    uint64_t recordLength = 0;
    DType dtype = DType::Unknown; ///< element type of the storage (UInt8 for UntypedStorage)
    bool untyped = false;
    bool located = false; ///< recordOffset/recordLength are set (the archive holds the bytes)
};

/// One local shard of a sharded tensor wrapper.
struct PyTensorShard
{
    PyValue* tensor = nullptr; ///< a plain Tensor value
    std::vector<int64_t> offsets; ///< global offsets; empty when unknown (DTensor: depends on the rank)
    int rank = -1;
};

/// One shard a ShardedTensor's metadata lists, whichever rank holds it.
struct PyShardBox
{
    std::vector<int64_t> offsets;
    std::vector<int64_t> sizes;
    int rank = -1; ///< from its placement ("rank:1/cpu"); -1 when not given
};

/// What only a wrapper subclass (DTensor, ShardedTensor) has: kept apart, since plain tensors are nearly all of them.
struct PyTensorWrapperInfo
{
    std::vector<PyTensorShard> shards; ///< the local shards this file holds
    /// ShardedTensor: every rank's shard as its ShardedTensorMetadata lists them (the local ones included). A rank
    /// that torch.chunk leaves without rows (4 rows over 3 ranks: 2 + 2 + 0) holds no local shard, and its
    /// metadata lists only the other ranks' shards.
    std::vector<PyShardBox> metadataShards;
    std::string_view placements; ///< DTensor: "Shard(0)", "Replicate()", ... joined by ','
};

struct PyTensorInfo
{
    PyValue* storage = nullptr; ///< Storage value; null for wrappers and storage-less (meta) tensors
    int64_t storageOffset = 0; ///< in elements
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;
    std::string_view subclass; ///< "torch.distributed.tensor.DTensor", ShardedTensor, ...; empty for plain tensors
    PyTensorWrapperInfo* wrapper = nullptr; ///< wrapper subclasses only (made by PyArena::wrapperOf)
    DType dtype = DType::Unknown;
    bool requiresGrad = false;
    bool isParameter = false;
    bool conj = false; ///< metadata bits from _rebuild_tensor_v2's 7th argument
    bool neg = false;
};

/// One node of the object graph. Fields used depend on kind; unused ones stay default.
struct PyValue
{
    PyKind kind = PyKind::None;
    DType dtype = DType::Unknown; ///< Dtype
    bool boolean = false; ///< Bool
    /// Referred to from more than one place (interned, memoised and read back, DUP, aliased by an interpreted call):
    /// PyArena::release leaves it alone
    bool pinned = false;
    /// container nesting below this value, as seen while building (a cap on hostile input: PickleLimits::maxNesting,
    /// 2,000, fails the read long before 16 bits run out)
    int16_t depth = 0;
    /// a Tuple that torch.Size made, a Str that torch.device or a layout (torch.serialization._get_layout, a sparse
    /// tensor's) made: read as the plain values they hold, written back and shown as what they were (a weights-only
    /// load accepts them)
    PyTorchType torchType = PyTorchType::None;
    double real = 0.0; ///< Float, Complex (real part)
    std::string_view text; ///< Str, Bytes, ByteArray, BigInt
    /// The record of the kind: one field, not six (a 100k-tensor torch.save makes 300k values). Read only the one
    /// that the kind names; hasContainer() asks whether there are container items.
    union {
        PyContainer* container = nullptr; ///< Tuple, List, Dict, Set, FrozenSet
        PyGlobalInfo* global; ///< Global
        PyObjectInfo* object; ///< Object
        PyStorageInfo* storage; ///< Storage
        PyTensorInfo* tensor; ///< Tensor
        double imag; ///< Complex (imaginary part)
        int64_t integer; ///< Int
    };

    bool is(PyKind k) const { return kind == k; }
    bool isContainerKind() const
    {
        return kind == PyKind::Tuple || kind == PyKind::List || kind == PyKind::Dict || kind == PyKind::Set
            || kind == PyKind::FrozenSet;
    }
    /// a container kind whose record exists
    bool hasContainer() const { return isContainerKind() && container; }
    bool isSequence() const { return kind == PyKind::Tuple || kind == PyKind::List; }
    bool isMapping() const { return kind == PyKind::Dict; }
    /// Tuple/List/Set/FrozenSet elements; Dict keys and values interleaved
    const std::vector<PyValue*>& items() const;
    size_t size() const; ///< elements, or dict pairs
    const PyValue* item(size_t i) const { return items()[i]; }
    const PyValue* dictKey(size_t i) const { return items()[2 * i]; }
    const PyValue* dictValue(size_t i) const { return items()[2 * i + 1]; }
    /// dict lookup by string key; null if absent or not a dict
    const PyValue* get(std::string_view key) const;
    /// Object: its class path "module.name", or "" if the callable is not a Global
    std::string className() const;
    /// Object or Global: is the class/function path equal to @p path?
    bool isClass(std::string_view path) const;
};

/// Calls @p f with every value directly inside @p v: a container's items (and a dict's BUILD attributes), an object's
/// callable, arguments, state and items, a tensor's storage and its wrapper's local shards. Shared values come once per
/// reference (a walk over the graph keeps its own set of the visited).
/// whether forEachChild may call its function for @p v (an object, a container or a tensor): a value without is a
/// leaf, answered on its own (a million scalars need no walk and no memo)
inline bool mayHaveChildren(const PyValue* v)
{
    return (v->kind == PyKind::Object && v->object) || v->hasContainer() || (v->kind == PyKind::Tensor && v->tensor);
}

template<typename F> void forEachChild(const PyValue* v, F&& f)
{
    if (v->kind == PyKind::Object && v->object) {
        const PyObjectInfo& o = *v->object;
        for (const PyValue* c : {o.callable, o.args, o.kwargs, o.state})
            if (c) f(c);
        for (const PyValue* c : o.listItems)
            f(c);
        for (const PyValue* c : o.dictItems)
            f(c);
    } else if (v->hasContainer()) {
        for (const PyValue* c : v->container->items)
            f(c);
        if (v->container->attrs) f(v->container->attrs);
    } else if (v->kind == PyKind::Tensor && v->tensor) {
        if (v->tensor->storage) f(v->tensor->storage);
        if (v->tensor->wrapper)
            for (const auto& s : v->tensor->wrapper->shards)
                if (s.tensor) f(s.tensor);
    }
}

/// Whether a value refers, anywhere inside it, to a storage whose bytes the archive holds (a sparse or quantized
/// tensor kept inert, a tensor inside an object). One instance answers for many values of one arena and remembers
/// every answer, so values that share a subtree cost its walk once in all (a walk per value was quadratic in a
/// hostile file of shared lists); cycles are answered per strongly connected component (Tarjan), exactly.
class LocatedStorageReach
{
public:
    bool holds(const PyValue* value);

private:
    struct Node
    {
        uint32_t index = 0, low = 0;
        bool onStack = false, result = false;
    };
    std::unordered_map<const PyValue*, Node> m_nodes; ///< element references stay valid as it grows
    uint32_t m_next = 0;
};

/// Owns values, extension records and copied strings; keeps the input bytes alive.
/// None, the two bools and the small integers are made once per arena and shared: values are immutable once built,
/// and a torch.save pickle spells out a few of them (offset 0, sizes, strides, requires_grad) for every tensor.
class PyArena
{
public:
    PyArena() = default;
    PyArena(const PyArena&) = delete;
    PyArena& operator=(const PyArena&) = delete;

    PyValue* make(PyKind kind);
    PyValue* makeContainer(PyKind kind);
    PyValue* makeInt(int64_t v);
    PyValue* makeFloat(double v);
    PyValue* makeBool(bool v);
    PyValue* makeNone();
    PyValue* makeStr(std::string_view s, bool copy);
    PyValue* makeBytes(std::string_view s, bool copy, PyKind kind = PyKind::Bytes);
    PyValue* makeGlobal(std::string_view module, std::string_view name, bool known);
    PyObjectInfo* makeObjectInfo();
    PyStorageInfo* makeStorageInfo();
    PyTensorInfo* makeTensorInfo();
    std::string_view copy(std::string_view s);
    /// @p t's wrapper record, made on first use
    PyTensorWrapperInfo& wrapperOf(PyTensorInfo& t);
    /// Gives back a value nothing refers to any more, with every part of it that only it refers to, for the next
    /// make() to reuse: the pickle machine's argument tuples of tensor rebuilds and persistent ids, about 800 bytes
    /// per tensor of a torch.save file that the graph would otherwise keep. Stops at pinned values and at kinds that
    /// other records point at (Global, Object, Storage, Tensor, Dtype).
    void release(PyValue* v) { release(v, 0); }
    /// keep something (the mapped input) alive as long as the arena
    void keepAlive(std::shared_ptr<const void> owner) { m_keepAlive.push_back(std::move(owner)); }
    size_t valueCount() const { return m_values.size(); }

private:
    void release(PyValue* v, int depth);
    static constexpr int64_t kSmallIntMin = -1;
    static constexpr int64_t kSmallIntMax = 1024;
    PyValue* m_none = nullptr;
    PyValue* m_bools[2] = {nullptr, nullptr};
    std::vector<PyValue*> m_smallInts; ///< index i - kSmallIntMin; made on first use
    std::deque<PyValue> m_values;
    std::deque<PyContainer> m_containers;
    std::vector<PyValue*> m_freeValues; ///< released, for make() to reuse
    std::vector<PyContainer*> m_freeContainers;
    std::deque<PyGlobalInfo> m_globals;
    std::deque<PyObjectInfo> m_objects;
    std::deque<PyStorageInfo> m_storages;
    std::deque<PyTensorInfo> m_tensors;
    std::deque<PyTensorWrapperInfo> m_tensorWrappers;
    std::deque<std::string> m_strings;
    std::vector<std::shared_ptr<const void>> m_keepAlive;
};

/// Python's str() of a value used as a dict key when DCP flattens keys: str -> itself, int -> decimal,
/// bool -> "True"/"False", None -> "None", float -> repr. Other kinds get a descriptive rendering.
std::string pyStr(const PyValue* v);
/// A short Python-like rendering for messages and the UI ("[1, 2]", "{'lr': 0.001}", "<torch.float32>").
std::string pyRepr(const PyValue* v, size_t maxLength = 200);
/// Python float repr (shortest round-trip): 0.001, 1e-08, 1.0, inf, nan
std::string pyFloatRepr(double v);
/// BigInt text (little-endian two's complement) as a decimal string; integers of more than 1786 bytes (about 4300
/// digits, CPython's limit for str(int), sys.int_info.default_max_str_digits: the conversion is quadratic) in
/// hexadecimal, "0x..." or "-0x..."
std::string bigIntToDecimal(std::string_view littleEndian);

} // namespace optscope
