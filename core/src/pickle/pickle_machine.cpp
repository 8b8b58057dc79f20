// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/pickle/pickle_machine.h"
#include "optscope/base/error.h"
#include "optscope/model/dict_index.h"
#include "optscope/pickle/pickle_opcodes.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <iterator>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace optscope {

namespace {

using namespace pickle_op;

/// Which memo entries a pickle ever reads back (GET, BINGET, LONG_BINGET), from one pass over its opcodes up to the
/// first STOP. Empty when that cannot be told exactly (an opcode or argument the pass does not know, PUT and MEMOIZE
/// mixed, an index larger than the input): the machine then keeps every memo entry, as it always did.
/// Why: a torch.save pickle memoises every tuple and string, so the memo would keep each tensor's argument tuples
/// alive; knowing which entries are never read lets the machine give those tuples back to the arena.
std::vector<bool> memoEntriesReadBack(const uint8_t* data, uint64_t size)
{
    uint64_t pos = 0;
    bool ok = true;
    bool puts = false, memoizes = false;
    uint64_t memoized = 0, maxIndex = 0;
    std::vector<uint64_t> gets;
    auto uint = [&](unsigned n) -> uint64_t {
        if (n > size - pos) {
            ok = false;
            return 0;
        }
        uint64_t v = 0;
        for (unsigned b = 0; b < n; ++b)
            v |= static_cast<uint64_t>(data[pos + b]) << (8 * b);
        pos += n;
        return v;
    };
    auto line = [&]() -> std::string_view {
        const void* nl = pos < size ? std::memchr(data + pos, '\n', size - pos) : nullptr;
        if (!nl) {
            ok = false;
            return {};
        }
        const auto len = static_cast<size_t>(static_cast<const uint8_t*>(nl) - (data + pos));
        std::string_view s(reinterpret_cast<const char*>(data + pos), len);
        pos += len + 1;
        if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
        return s;
    };
    auto decimal = [&](std::string_view s) -> uint64_t {
        uint64_t v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size()) ok = false;
        return v;
    };
    auto put = [&](uint64_t index) {
        puts = true;
        maxIndex = std::max(maxIndex, index);
    };
    bool stopped = false;
    while (ok && !stopped && pos < size) {
        const uint8_t op = data[pos++];
        switch (op) {
        case STOP:
            stopped = true;
            break;
        case GET:
            gets.push_back(decimal(line()));
            break;
        case BINGET:
            gets.push_back(uint(1));
            break;
        case LONG_BINGET:
            gets.push_back(uint(4));
            break;
        case PUT:
            put(decimal(line()));
            break;
        case BINPUT:
            put(uint(1));
            break;
        case LONG_BINPUT:
            put(uint(4));
            break;
        case MEMOIZE:
            memoizes = true;
            maxIndex = std::max(maxIndex, memoized++);
            break;
        default: // an argument to step over
            pos = argumentEnd(data, size, pos, argumentOf(op));
            ok = pos != kPastTheEnd;
        }
    }
    if (!ok || !stopped || (puts && memoizes) || maxIndex > size) return {};
    std::vector<bool> read(maxIndex + 1, false);
    for (auto g : gets) {
        if (g > maxIndex) return {}; // reads an entry never written: the machine reports it
        read[g] = true;
    }
    return read;
}

std::string hex2(uint8_t b)
{
    static const char* digits = "0123456789abcdef";
    return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

bool endsWith(std::string_view s, std::string_view suffix)
{
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool startsWith(std::string_view s, std::string_view prefix)
{
    return s.substr(0, prefix.size()) == prefix;
}

// Known classes and functions: interpreted or at least understood to be harmless data records.
const std::unordered_set<std::string>& knownPaths()
{
    static const std::unordered_set<std::string> paths = {
        "collections.OrderedDict",
        "collections.defaultdict",
        "collections.Counter",
        "builtins.set",
        "builtins.frozenset",
        "builtins.bytearray",
        "builtins.complex",
        "builtins.getattr",
        "builtins.list",
        "builtins.dict",
        "builtins.tuple",
        "builtins.int",
        "builtins.float",
        "builtins.str",
        "builtins.bool",
        "builtins.bytes",
        "builtins.object",
        "builtins.slice",
        "builtins.range",
        "copyreg._reconstructor",
        "copyreg.__newobj__",
        "copyreg.__newobj_ex__",
        "_codecs.encode",
        "torch.Size",
        "torch.device",
        "torch.Tensor",
        "torch.nn.parameter.Parameter",
        "torch.serialization._get_layout",
        // quantization schemes (a quantized tensor's), which weights_only allows
        "torch.per_tensor_affine",
        "torch.per_tensor_symmetric",
        "torch.per_channel_affine",
        "torch.per_channel_symmetric",
        "torch.per_channel_affine_float_qparams",
        "torch._utils._rebuild_tensor",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_tensor_v3",
        "torch._utils._rebuild_parameter",
        "torch._utils._rebuild_parameter_with_state",
        "torch._utils._rebuild_wrapper_subclass",
        "torch._utils._rebuild_meta_tensor_no_storage",
        "torch._utils._rebuild_qtensor",
        "torch._utils._rebuild_sparse_tensor",
        "torch._utils._rebuild_nested_tensor",
        "torch._utils._rebuild_device_tensor_from_numpy",
        "torch._utils._rebuild_device_tensor_from_cpu_tensor",
        "torch._tensor._rebuild_from_type_v2",
        "pathlib.Path",
        "pathlib.PosixPath",
        "pathlib.PurePosixPath",
        "pathlib.WindowsPath",
        "pathlib.PureWindowsPath",
        "pathlib._local.Path",
        "pathlib._local.PosixPath",
        "pathlib._local.PurePosixPath",
        "pathlib._local.WindowsPath",
        "pathlib._local.PureWindowsPath",
        // sharded tensors (torch.distributed._shard) and DTensor, as weights_only allows them
        "torch.distributed._shard.sharded_tensor.api.ShardedTensor",
        "torch.distributed._shard.sharded_tensor.api.ShardedTensor.ProcessGroupState",
        "torch.distributed._shard.sharded_tensor.shard.Shard",
        "torch.distributed._shard.sharded_tensor.metadata.ShardedTensorMetadata",
        "torch.distributed._shard.sharded_tensor.metadata.TensorProperties",
        "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING",
        "torch.distributed._shard.metadata.ShardMetadata",
        "torch.distributed._shard.sharding_spec.api.EnumerableShardingSpec",
        "torch.distributed._shard.sharding_spec.chunk_sharding_spec.ChunkShardingSpec",
        "torch.distributed.remote_device._remote_device",
        "torch.distributed.device_mesh.DeviceMesh",
        "torch.distributed._tensor.device_mesh.DeviceMesh",
    };
    return paths;
}

bool isDcpMetadataClass(std::string_view module, std::string_view name)
{
    // 2.0+ torch.distributed.checkpoint.*, 1.13 torch.distributed._shard.checkpoint.*
    const bool metadataModule
        = module == "torch.distributed.checkpoint.metadata" || module == "torch.distributed._shard.checkpoint.metadata";
    const bool filesystemModule = module == "torch.distributed.checkpoint.filesystem"
        || module == "torch.distributed._shard.checkpoint.filesystem";
    if (metadataModule) {
        static const std::unordered_set<std::string_view> names = {"Metadata", "TensorStorageMetadata",
            "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties", "MetadataIndex", "StorageMeta",
            "_MEM_FORMAT_ENCODING", "MEM_FORMAT_ENCODING", "TensorInfo", "StorageMetadata"};
        return names.count(name) > 0;
    }
    if (filesystemModule) return name == "_StorageInfo" || name == "_StoragePrefix";
    // DCP's planner dataclasses and enums: writers that cache their save plans in the metadata (Megatron-Core's
    // torch_dist) pickle them there; torch's own reader unpickles them, and here they stay inert records
    if (module == "torch.distributed.checkpoint.planner") {
        static const std::unordered_set<std::string_view> names
            = {"SavePlan", "LoadPlan", "WriteItem", "ReadItem", "TensorWriteData", "WriteItemType", "LoadItemType"};
        return names.count(name) > 0;
    }
    return false;
}

bool isDTensorClass(std::string_view module, std::string_view name)
{
    if (!startsWith(module, "torch.distributed.tensor") && !startsWith(module, "torch.distributed._tensor"))
        return false;
    static const std::unordered_set<std::string_view> names = {"DTensor", "DTensorSpec", "TensorMeta", "Shard",
        "Replicate", "Partial", "_Partial", "_StridedShard", "DeviceMesh"};
    return names.count(name) > 0;
}

bool isStorageClass(std::string_view module, std::string_view name)
{
    return (module == "torch" || module == "torch.cuda" || module == "torch.storage") && endsWith(name, "Storage");
}

} // namespace

bool isKnownGlobal(std::string_view module, std::string_view name)
{
    if (isStorageClass(module, name) || isDcpMetadataClass(module, name) || isDTensorClass(module, name)) return true;
    if (module == "torch" && dtypeFromName(name)) return true;
    std::string path;
    path.reserve(module.size() + name.size() + 1);
    path.append(module).append(".").append(name);
    return knownPaths().count(path) > 0;
}

namespace {

class Machine
{
public:
    Machine(const uint8_t* data, uint64_t size, PyArena& arena, const PickleOptions& options)
        : m_data(data)
        , m_size(size)
        , m_arena(arena)
        , m_opt(options)
        , m_limits(scaled(options.limits, size))
        , m_memoRead(memoEntriesReadBack(data, size))
    { }

    PickleResult run();

private:
    // --- the opcodes, by what they do (pickle_opcodes.h's groupOf) ---------------------------------------------
    void stackOp();
    void pushNumber();
    void pushText();
    void buildContainer();
    void memoOp();
    void objectOp();

    // --- input ---------------------------------------------------------------------------------------------
    [[noreturn]] void fail(ErrorKind kind, const std::string& detail) const
    {
        throw Error(kind, m_opt.sourceName, "pickle: " + detail, m_opt.baseOffset + m_opOffset);
    }

    const uint8_t* take(uint64_t n)
    {
        if (n > m_size - m_pos)
            fail(ErrorKind::Truncated,
                "opcode " + hex2(m_op) + " needs " + std::to_string(n) + " bytes but only "
                    + std::to_string(m_size - m_pos) + " remain");
        const uint8_t* p = m_data + m_pos;
        m_pos += n;
        return p;
    }
    uint8_t u8() { return *take(1); }
    uint16_t u16()
    {
        const uint8_t* p = take(2);
        return static_cast<uint16_t>(p[0] | (p[1] << 8));
    }
    uint32_t u32()
    {
        const uint8_t* p = take(4);
        return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16)
            | (static_cast<uint32_t>(p[3]) << 24);
    }
    int32_t i32() { return static_cast<int32_t>(u32()); }
    uint64_t u64()
    {
        const uint8_t* p = take(8);
        uint64_t v = 0;
        for (int i = 7; i >= 0; --i)
            v = (v << 8) | p[i];
        return v;
    }
    std::string_view bytes(uint64_t n)
    {
        const uint8_t* p = take(n);
        return {reinterpret_cast<const char*>(p), static_cast<size_t>(n)};
    }
    /// protocol-0 argument: up to '\n' (excluded); a missing newline is truncation
    std::string_view line()
    {
        const uint8_t* start = m_data + m_pos;
        const void* nl = std::memchr(start, '\n', m_size - m_pos);
        if (!nl) fail(ErrorKind::Truncated, "opcode " + hex2(m_op) + " argument has no terminating newline");
        const auto len = static_cast<size_t>(static_cast<const uint8_t*>(nl) - start);
        m_pos += len + 1;
        std::string_view s(reinterpret_cast<const char*>(start), len);
        if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
        return s;
    }

    // --- stack ---------------------------------------------------------------------------------------------
    size_t frameBase() const { return m_marks.empty() ? 0 : m_marks.back(); }
    void push(PyValue* v)
    {
        if (m_stack.size() >= m_limits.maxStack)
            fail(ErrorKind::Limit, "stack exceeds " + std::to_string(m_limits.maxStack) + " values");
        m_stack.push_back(v);
    }
    PyValue* pop()
    {
        if (m_stack.size() <= frameBase())
            fail(ErrorKind::Format, "opcode " + hex2(m_op) + " pops from an empty stack");
        PyValue* v = m_stack.back();
        m_stack.pop_back();
        return v;
    }
    PyValue* top()
    {
        if (m_stack.size() <= frameBase())
            fail(ErrorKind::Format, "opcode " + hex2(m_op) + " needs a value on the stack");
        return m_stack.back();
    }
    std::vector<PyValue*> popMark()
    {
        if (m_marks.empty()) fail(ErrorKind::Format, "opcode " + hex2(m_op) + " without a MARK");
        const size_t base = m_marks.back();
        m_marks.pop_back();
        std::vector<PyValue*> items(m_stack.begin() + static_cast<std::ptrdiff_t>(base), m_stack.end());
        m_stack.resize(base);
        return items;
    }

    // --- memo ----------------------------------------------------------------------------------------------
    void memoPut(uint64_t index, PyValue* v)
    {
        if (index > m_limits.maxMemoIndex)
            fail(ErrorKind::Limit, "memo index " + std::to_string(index) + " is too large");
        const bool existing = memoFind(index) != nullptr;
        if (!existing && m_memoCount >= m_limits.maxMemo)
            fail(ErrorKind::Limit, "memo exceeds " + std::to_string(m_limits.maxMemo) + " entries");
        if (!m_memoRead.empty() && (index >= m_memoRead.size() || !m_memoRead[index])) {
            v = unreadMemoEntry(); // never read back: the value stays free to be given back
        } else {
            v->pinned = true;
        }
        if (index < m_memoDense.size() || index <= m_memoDense.size() + 1024) {
            if (index >= m_memoDense.size()) m_memoDense.resize(index + 1, nullptr);
            m_memoDense[index] = v;
        } else {
            m_memoSparse[static_cast<uint32_t>(index)] = v;
        }
        if (!existing) ++m_memoCount;
    }
    /// stands in the memo for an entry memoEntriesReadBack says is never read, so that re-putting it counts as before
    static PyValue* unreadMemoEntry()
    {
        static PyValue marker;
        return &marker;
    }
    PyValue* memoFind(uint64_t index) const
    {
        if (index < m_memoDense.size()) return m_memoDense[index];
        auto it = m_memoSparse.find(static_cast<uint32_t>(index));
        return it == m_memoSparse.end() ? nullptr : it->second;
    }
    PyValue* memoGet(uint64_t index)
    {
        PyValue* v = memoFind(index);
        if (!v) fail(ErrorKind::Format, "memo has no entry " + std::to_string(index));
        if (v == unreadMemoEntry()) fail(ErrorKind::Format, "memo entry " + std::to_string(index) + " was not kept");
        return v;
    }

    // --- values --------------------------------------------------------------------------------------------
    void noteChild(PyValue* parent, const PyValue* child)
    {
        if (!child) return;
        const int32_t d = child->depth + 1;
        if (d > parent->depth) {
            parent->depth = d;
            if (d > m_limits.maxNesting)
                fail(ErrorKind::Limit, "containers nested deeper than " + std::to_string(m_limits.maxNesting));
        }
    }
    /// an interpreted call put @p v into a second container (its arguments may stay reachable): never release it
    static PyValue* pin(const PyValue* v)
    {
        auto* p = const_cast<PyValue*>(v);
        if (p) p->pinned = true;
        return p;
    }
    static void pinItems(const PyValue* v)
    {
        if (v && v->hasContainer())
            for (PyValue* i : v->container->items)
                i->pinned = true;
    }
    PyValue* makeSequence(PyKind kind, std::vector<PyValue*> items)
    {
        PyValue* v = m_arena.makeContainer(kind);
        for (auto* i : items)
            noteChild(v, i);
        v->container->items = std::move(items);
        return v;
    }
    void append(PyValue* target, PyValue* value);
    void setItem(PyValue* target, PyValue* key, PyValue* value);
    void addToSet(PyValue* target, PyValue* value);
    PyValue* makeInt(std::string_view littleEndian);
    PyValue* parseDecimalInt(std::string_view text);
    PyValue* decodeUtf8OrLatin1(std::string_view raw);

    PyValue* findClass(std::string_view module, std::string_view name);
    PyValue* callReduce(PyValue* callable, PyValue* args);
    PyValue* makeObject(PyValue* callable, PyValue* args, PyValue* kwargs, PyObjectHow how);
    void build(PyValue* inst, PyValue* state);
    PyValue* persistentLoad(PyValue* pid);
    void warn(ReaderCode code, const std::string& message, const std::string& classPath = {});

    // interpreted callables
    PyValue* rebuildTensor(const std::string& fn, PyValue* args);
    PyValue* rebuildFromTypeV2(const std::string& fn, PyValue* args);
    PyValue* rebuildWrapperSubclass(const std::string& fn, PyValue* args);
    // the rules callReduce applies, one per callable (or family of callables): nullptr leaves the call inert
    using ReduceRule = PyValue* (Machine::*)(const std::string& fn, PyValue* args);
    static const std::unordered_map<std::string_view, ReduceRule>& reduceRules();
    PyValue* reduceDict(const std::string& fn, PyValue* args);
    PyValue* reduceSequence(const std::string& fn, PyValue* args);
    PyValue* reduceBytes(const std::string& fn, PyValue* args);
    PyValue* reduceComplex(const std::string& fn, PyValue* args);
    PyValue* reduceScalar(const std::string& fn, PyValue* args);
    PyValue* reduceGetattr(const std::string& fn, PyValue* args);
    PyValue* reduceReconstructor(const std::string& fn, PyValue* args);
    PyValue* reduceNewobj(const std::string& fn, PyValue* args);
    PyValue* reduceSize(const std::string& fn, PyValue* args);
    PyValue* reduceDevice(const std::string& fn, PyValue* args);
    PyValue* reduceLayout(const std::string& fn, PyValue* args);
    PyValue* rebuildParameter(const std::string& fn, PyValue* args);
    PyValue* rebuildMetaTensor(const std::string& fn, PyValue* args);
    PyValue* reducePath(const std::string& fn, PyValue* args);
    void applyWrapperState(PyValue* tensor, PyValue* state);

    const uint8_t* m_data;
    uint64_t m_size;
    uint64_t m_pos = 0;
    uint64_t m_opOffset = 0;
    uint8_t m_op = 0;
    PyArena& m_arena;
    const PickleOptions& m_opt;
    /// The caps grow with the input: a memo entry, a stack value and a MARK each cost at least one opcode byte, so
    /// an N-byte pickle can never need more than N of them, and honouring that keeps work and memory linear in the
    /// input (a 1,024-rank DCP .metadata holds 2.2 million chunks and over 16 million memo entries). The fixed values
    /// stay the floor for small inputs; depth and integer sizes stay fixed (they bound recursion, not counts).
    static PickleLimits scaled(PickleLimits l, uint64_t size)
    {
        if (!l.scaleWithInput) return l;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(size, SIZE_MAX));
        l.maxMemo = std::max(l.maxMemo, n);
        l.maxStack = std::max(l.maxStack, n);
        l.maxMarks = std::max(l.maxMarks, n);
        return l; // a memo index is a key in a sparse map: its cap bounds nothing that grows
    }
    const PickleLimits m_limits;
    std::vector<PyValue*> m_stack;
    std::vector<size_t> m_marks;
    std::vector<bool> m_memoRead; ///< memoEntriesReadBack; empty: keep every entry
    std::vector<PyValue*> m_memoDense;
    std::unordered_map<uint32_t, PyValue*> m_memoSparse;
    size_t m_memoCount = 0;
    std::vector<PickleWarning> m_warnings;
    std::unordered_set<std::string> m_warnedGlobals;
    int m_protocol = 0;
};

// ---------------------------------------------------------------------------------------------------------------

void Machine::warn(ReaderCode code, const std::string& message, const std::string& classPath)
{
    PickleWarning w;
    w.code = code;
    w.message = message;
    w.classPath = classPath;
    w.offset = m_opt.baseOffset + m_opOffset;
    m_warnings.push_back(std::move(w));
}

/// A hashable rendering of a dict key, so that SETITEM on an existing key replaces it as Python does.
/// Returns false for unhashable or identity-hashed keys (objects), which are simply appended, and for keys whose
/// rendering would exceed kMaxDictKeyRenderingBytes (dict_index.h).
bool hashKey(const PyValue* k, std::string& out, int depth = 0)
{
    if (depth > 16 || out.size() + k->text.size() > kMaxDictKeyRenderingBytes) return false;
    switch (k->kind) {
    case PyKind::Str:
        out += 's';
        out += std::to_string(k->text.size());
        out += ':';
        out.append(k->text);
        return true;
    case PyKind::Int:
        out += 'i' + std::to_string(k->integer) + ';';
        return true;
    case PyKind::Bool:
        out += 'i' + std::to_string(k->boolean ? 1 : 0) + ';';
        return true;
    case PyKind::None:
        out += 'n';
        return true;
    case PyKind::Float:
        if (std::isfinite(k->real) && std::floor(k->real) == k->real && std::fabs(k->real) < 9.0e18)
            out += 'i' + std::to_string(static_cast<int64_t>(k->real)) + ';';
        else
            out += 'f' + pyFloatRepr(k->real) + ';';
        return true;
    case PyKind::BigInt: {
        // the two's complement bytes without redundant sign bytes: equal integers give equal keys in linear time
        // (rendering a 64 KiB integer in decimal for every comparison made dicts with such keys quadratic)
        std::string_view t = k->text;
        const bool negative = !t.empty() && (static_cast<uint8_t>(t.back()) & 0x80) != 0;
        const char fill = negative ? '\xff' : '\0';
        while (t.size() > 1 && t.back() == fill && ((static_cast<uint8_t>(t[t.size() - 2]) & 0x80) != 0) == negative)
            t.remove_suffix(1);
        out += 'b' + std::to_string(t.size()) + ':';
        out.append(t);
        return true;
    }
    case PyKind::Bytes:
        out += 'y' + std::to_string(k->text.size()) + ':';
        out.append(k->text);
        return true;
    case PyKind::Dtype:
        out += 'd' + std::to_string(static_cast<int>(k->dtype)) + ';';
        return true;
    case PyKind::Tuple:
    case PyKind::FrozenSet:
        out += k->kind == PyKind::Tuple ? "t(" : "f(";
        for (const auto* i : k->items())
            if (out.size() > kMaxDictKeyRenderingBytes || !hashKey(i, out, depth + 1)) return false;
        out += ')';
        return true;
    default:
        return false;
    }
}

void Machine::append(PyValue* target, PyValue* value)
{
    if (target->kind == PyKind::List) {
        noteChild(target, value);
        target->container->items.push_back(value);
    } else if (target->kind == PyKind::Object) {
        noteChild(target, value);
        target->object->listItems.push_back(value);
    } else {
        fail(ErrorKind::Format, std::string("APPEND to a ") + pyKindName(target->kind));
    }
}

void Machine::setItem(PyValue* target, PyValue* key, PyValue* value)
{
    if (target->kind == PyKind::Object) {
        noteChild(target, key);
        noteChild(target, value);
        target->object->dictItems.push_back(key);
        target->object->dictItems.push_back(value);
        return;
    }
    if (target->kind != PyKind::Dict) fail(ErrorKind::Format, std::string("SETITEM on a ") + pyKindName(target->kind));
    noteChild(target, key);
    noteChild(target, value);
    auto& c = *target->container;
    std::string h;
    if (hashKey(key, h)) {
        if (!c.index) {
            // small dicts with short keys: a linear scan is cheaper than a map; build the index once they grow (or
            // for a long key, which would be rendered again for every comparison)
            if (c.items.size() < 16 && h.size() <= 64) {
                for (size_t i = 0; i < c.items.size(); i += 2) {
                    std::string other;
                    if (hashKey(c.items[i], other) && other == h) {
                        c.items[i + 1] = value;
                        return;
                    }
                }
                c.items.push_back(key);
                c.items.push_back(value);
                return;
            }
            c.index = std::make_unique<DictIndex>();
            for (size_t i = 0; i < c.items.size(); i += 2) {
                std::string other;
                if (hashKey(c.items[i], other)) c.index->insert(DictIndex::hashOf(other), i);
            }
        }
        // the hash matched: the key there is this one when its rendering is the same (a 64-bit hash rarely lies)
        const uint64_t hash = DictIndex::hashOf(h);
        const size_t found = c.index->find(hash, [&](size_t at) {
            std::string other;
            return hashKey(c.items[at], other) && other == h;
        });
        if (found != DictIndex::npos) {
            c.items[found + 1] = value;
            return;
        }
        c.index->insert(hash, c.items.size());
    }
    c.items.push_back(key);
    c.items.push_back(value);
}

void Machine::addToSet(PyValue* target, PyValue* value)
{
    if (target->kind != PyKind::Set) fail(ErrorKind::Format, std::string("ADDITEMS on a ") + pyKindName(target->kind));
    noteChild(target, value);
    target->container->items.push_back(value);
}

PyValue* Machine::makeInt(std::string_view le)
{
    if (le.size() > m_limits.maxBigIntBytes)
        fail(ErrorKind::Limit, "integer of " + std::to_string(le.size()) + " bytes exceeds the cap");
    if (le.size() <= 8) {
        uint64_t u = 0;
        for (size_t i = 0; i < le.size(); ++i)
            u |= static_cast<uint64_t>(static_cast<uint8_t>(le[i])) << (8 * i);
        if (!le.empty() && le.size() < 8 && (static_cast<uint8_t>(le.back()) & 0x80))
            u |= ~uint64_t(0) << (8 * le.size()); // sign-extend
        return m_arena.makeInt(static_cast<int64_t>(u));
    }
    // Normalise: a longer encoding may still fit in int64 (redundant sign bytes).
    size_t n = le.size();
    const bool negative = (static_cast<uint8_t>(le.back()) & 0x80) != 0;
    const uint8_t fill = negative ? 0xff : 0x00;
    while (
        n > 8 && static_cast<uint8_t>(le[n - 1]) == fill && ((static_cast<uint8_t>(le[n - 2]) & 0x80) != 0) == negative)
        --n;
    if (n <= 8 && (n < 8 || ((static_cast<uint8_t>(le[7]) & 0x80) != 0) == negative)) return makeInt(le.substr(0, n));
    return m_arena.makeBytes(le, false, PyKind::BigInt);
}

PyValue* Machine::parseDecimalInt(std::string_view text)
{
    std::string_view t = text;
    while (!t.empty() && (t.back() == 'L' || t.back() == ' '))
        t.remove_suffix(1);
    while (!t.empty() && t.front() == ' ')
        t.remove_prefix(1);
    if (t.empty()) fail(ErrorKind::Format, "empty integer literal");
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec == std::errc() && p == t.data() + t.size()) return m_arena.makeInt(v);
    // big decimal -> little-endian two's complement
    bool negative = false;
    if (t.front() == '-' || t.front() == '+') {
        negative = t.front() == '-';
        t.remove_prefix(1);
    }
    if (t.empty()) fail(ErrorKind::Format, "bad integer literal");
    // CPython's int() refuses more than 4300 decimal digits (sys.int_info.default_max_str_digits), so pickle's
    // INT/LONG do too; the conversion below is quadratic in the length, and this bound keeps hostile literals cheap.
    constexpr size_t kMaxDecimalDigits = 4300;
    if (t.size() > kMaxDecimalDigits)
        fail(ErrorKind::Limit,
            "integer literal of " + std::to_string(t.size()) + " digits exceeds the limit of "
                + std::to_string(kMaxDecimalDigits) + " digits");
    std::vector<uint8_t> mag; // little-endian magnitude
    for (char c : t) {
        if (c < '0' || c > '9')
            fail(ErrorKind::Format, "bad integer literal '" + std::string(text.substr(0, 40)) + "'");
        unsigned carry = static_cast<unsigned>(c - '0');
        for (auto& b : mag) {
            const unsigned cur = b * 10u + carry;
            b = static_cast<uint8_t>(cur & 0xff);
            carry = cur >> 8;
        }
        while (carry) {
            mag.push_back(static_cast<uint8_t>(carry & 0xff));
            carry >>= 8;
        }
    }
    mag.push_back(0); // room for the sign bit
    if (negative) {
        bool carry = true;
        for (auto& b : mag) {
            b = static_cast<uint8_t>(~b);
            if (carry) {
                b = static_cast<uint8_t>(b + 1);
                carry = b == 0;
            }
        }
    }
    std::string s(mag.begin(), mag.end());
    return makeInt(m_arena.copy(s));
}

bool isValidUtf8(std::string_view s)
{
    size_t i = 0;
    const size_t n = s.size();
    while (i < n) {
        const auto c = static_cast<uint8_t>(s[i]);
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len = 0;
        if ((c & 0xe0) == 0xc0)
            len = 2;
        else if ((c & 0xf0) == 0xe0)
            len = 3;
        else if ((c & 0xf8) == 0xf0)
            len = 4;
        else
            return false;
        if (i + len > n) return false;
        for (size_t k = 1; k < len; ++k)
            if ((static_cast<uint8_t>(s[i + k]) & 0xc0) != 0x80) return false;
        i += len;
    }
    return true;
}

void appendUtf8(std::string& out, uint32_t cp)
{
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

PyValue* Machine::decodeUtf8OrLatin1(std::string_view raw)
{
    // torch.load unpickles with encoding="utf-8"; fall back to latin-1 so that odd py2 strings still show
    if (isValidUtf8(raw)) return m_arena.makeStr(raw, false);
    std::string out;
    for (char c : raw)
        appendUtf8(out, static_cast<uint8_t>(c));
    return m_arena.makeStr(out, true);
}

/// Python 2 'string-escape' literal of the STRING opcode: 'abc' or "abc" with backslash escapes.
std::string decodeStringLiteral(std::string_view s, bool& ok)
{
    ok = false;
    if (s.size() < 2 || (s.front() != '\'' && s.front() != '"') || s.back() != s.front()) return {};
    s = s.substr(1, s.size() - 2);
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\') {
            out += s[i];
            continue;
        }
        if (++i >= s.size()) return {};
        const char c = s[i];
        switch (c) {
        case 'n':
            out += '\n';
            break;
        case 't':
            out += '\t';
            break;
        case 'r':
            out += '\r';
            break;
        case '0':
            out += '\0';
            break;
        case '\\':
            out += '\\';
            break;
        case '\'':
            out += '\'';
            break;
        case '"':
            out += '"';
            break;
        case 'a':
            out += '\a';
            break;
        case 'b':
            out += '\b';
            break;
        case 'f':
            out += '\f';
            break;
        case 'v':
            out += '\v';
            break;
        case 'x': {
            if (i + 2 >= s.size()) return {};
            unsigned v = 0;
            auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + std::min(s.size(), i + 3), v, 16);
            if (ec != std::errc() || p != s.data() + i + 3) return {};
            out += static_cast<char>(v);
            i += 2;
            break;
        }
        default:
            out += '\\';
            out += c;
        }
    }
    ok = true;
    return out;
}

/// 'raw-unicode-escape' of the UNICODE opcode: latin-1 bytes, with \uXXXX and \UXXXXXXXX escapes.
std::string decodeRawUnicodeEscape(std::string_view s, bool& ok)
{
    ok = true;
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'u' || s[i + 1] == 'U')) {
            const size_t digits = s[i + 1] == 'u' ? 4 : 8;
            if (i + 2 + digits > s.size()) {
                ok = false;
                return {};
            }
            uint32_t cp = 0;
            auto [p, ec] = std::from_chars(s.data() + i + 2, s.data() + i + 2 + digits, cp, 16);
            if (ec != std::errc() || p != s.data() + i + 2 + digits || cp > 0x10ffff) {
                ok = false;
                return {};
            }
            appendUtf8(out, cp);
            i += 1 + digits;
        } else {
            appendUtf8(out, static_cast<uint8_t>(s[i]));
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------------------------

PyValue* Machine::findClass(std::string_view module, std::string_view name)
{
    // Python 2 names, as pickle's fix_imports maps them (_compat_pickle's IMPORT_MAPPING and, for the builtins a
    // protocol 2 pickle names, NAME_MAPPING: range(3) is written '__builtin__ xrange', and a copy written back as
    // 'builtins xrange' loads nowhere)
    static const std::pair<std::string_view, std::string_view> renamedBuiltins[]
        = {{"xrange", "range"}, {"unicode", "str"}, {"basestring", "str"}, {"long", "int"}, {"unichr", "chr"}};
    if (module == "__builtin__") {
        module = "builtins";
        for (const auto& [py2, py3] : renamedBuiltins)
            if (name == py2) name = py3;
        if (name == "reduce") module = "functools";
        if (name == "intern") module = "sys";
    } else if (module == "copy_reg") {
        module = "copyreg";
    }
    if (module == "torch") {
        if (auto dt = dtypeFromName(name); dt && name.find('.') == std::string_view::npos) {
            PyValue* v = m_arena.make(PyKind::Dtype);
            v->dtype = *dt;
            return v;
        }
    }
    const bool known = isKnownGlobal(module, name);
    if (!known) {
        std::string path = std::string(module) + "." + std::string(name);
        if (m_warnedGlobals.insert(path).second)
            warn(ReaderCode::UnsafeGlobal,
                "global '" + path + "' is not in the safe set; kept inert (never imported or called)", path);
    }
    return m_arena.makeGlobal(module, name, known);
}

PyValue* Machine::makeObject(PyValue* callable, PyValue* args, PyValue* kwargs, PyObjectHow how)
{
    PyValue* v = m_arena.make(PyKind::Object);
    v->object = m_arena.makeObjectInfo();
    v->object->callable = callable;
    v->object->args = args;
    v->object->kwargs = kwargs;
    v->object->how = how;
    noteChild(v, args);
    noteChild(v, kwargs);
    return v;
}

const PyValue* arg(const PyValue* args, size_t i)
{
    if (!args || !args->isSequence() || i >= args->size()) return nullptr;
    return args->item(i);
}

bool intList(const PyValue* v, std::vector<int64_t>& out)
{
    if (!v || !v->isSequence()) return false;
    out.clear();
    for (const auto* i : v->items()) {
        if (i->kind == PyKind::Int)
            out.push_back(i->integer);
        else if (i->kind == PyKind::Bool)
            out.push_back(i->boolean ? 1 : 0);
        else
            return false;
    }
    return true;
}

bool asBool(const PyValue* v)
{
    if (!v) return false;
    if (v->kind == PyKind::Bool) return v->boolean;
    if (v->kind == PyKind::Int) return v->integer != 0;
    return false;
}

PyValue* Machine::rebuildTensor(const std::string& fn, PyValue* args)
{
    // _rebuild_tensor(storage, storage_offset, size, stride)
    // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    // _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])
    const PyValue* storage = arg(args, 0);
    const PyValue* offset = arg(args, 1);
    std::vector<int64_t> sizes, strides;
    if (!storage || storage->kind != PyKind::Storage || !offset || offset->kind != PyKind::Int
        || !intList(arg(args, 2), sizes) || !intList(arg(args, 3), strides) || sizes.size() != strides.size()) {
        warn(ReaderCode::BadTensor, fn + " with unexpected arguments; kept inert");
        return nullptr;
    }
    for (auto s : sizes)
        if (s < 0) {
            warn(ReaderCode::BadTensor, fn + " with a negative size; kept inert");
            return nullptr;
        }
    for (auto s : strides)
        if (s < 0) {
            warn(ReaderCode::BadTensor, fn + " with a negative stride; kept inert");
            return nullptr;
        }
    if (offset->integer < 0) {
        warn(ReaderCode::BadTensor, fn + " with a negative storage offset; kept inert");
        return nullptr;
    }
    auto* t = m_arena.makeTensorInfo();
    t->storage = const_cast<PyValue*>(storage);
    t->dtype = storage->storage->dtype;
    t->storageOffset = offset->integer;
    t->sizes = std::move(sizes);
    t->strides = std::move(strides);
    const PyValue* metadata = nullptr;
    if (fn == "torch._utils._rebuild_tensor_v2") {
        t->requiresGrad = asBool(arg(args, 4));
        metadata = arg(args, 6);
    } else if (fn == "torch._utils._rebuild_tensor_v3") {
        t->requiresGrad = asBool(arg(args, 4));
        const PyValue* dt = arg(args, 6);
        if (!dt || dt->kind != PyKind::Dtype) {
            warn(ReaderCode::BadTensor, fn + " without a dtype; kept inert");
            return nullptr;
        }
        t->dtype = dt->dtype;
        metadata = arg(args, 7);
    }
    if (metadata && metadata->kind == PyKind::Dict) {
        t->conj = asBool(metadata->get("conj"));
        t->neg = asBool(metadata->get("neg"));
    }
    PyValue* v = m_arena.make(PyKind::Tensor);
    v->tensor = t;
    return v;
}

PyValue* copyTensor(PyArena& arena, const PyValue* src)
{
    PyValue* v = arena.make(PyKind::Tensor);
    v->tensor = arena.makeTensorInfo();
    *v->tensor = *src->tensor;
    if (src->tensor->wrapper) { // a copy of its own: shards are added to one of them later
        v->tensor->wrapper = nullptr;
        arena.wrapperOf(*v->tensor) = *src->tensor->wrapper;
    }
    v->depth = src->depth;
    return v;
}

PyValue* Machine::rebuildWrapperSubclass(const std::string&, PyValue* args)
{
    // _rebuild_wrapper_subclass(cls, dtype, size, stride, storage_offset, layout, device, requires_grad)
    const PyValue* cls = arg(args, 0);
    const PyValue* dt = arg(args, 1);
    std::vector<int64_t> sizes, strides;
    if (!cls || cls->kind != PyKind::Global || !dt || dt->kind != PyKind::Dtype || !intList(arg(args, 2), sizes)) {
        warn(ReaderCode::BadTensor, "_rebuild_wrapper_subclass with unexpected arguments; kept inert");
        return nullptr;
    }
    intList(arg(args, 3), strides);
    auto* t = m_arena.makeTensorInfo();
    t->dtype = dt->dtype;
    t->sizes = std::move(sizes);
    t->strides = std::move(strides);
    t->requiresGrad = asBool(arg(args, 7));
    t->subclass = m_arena.copy(cls->global->path());
    PyValue* v = m_arena.make(PyKind::Tensor);
    v->tensor = t;
    return v;
}

/// Slots state of a NEWOBJ+BUILD object: BUILD (None, {slots}) or BUILD {dict}
const PyValue* objectField(const PyValue* obj, std::string_view field)
{
    if (!obj || obj->kind != PyKind::Object || !obj->object->state) return nullptr;
    const PyValue* st = obj->object->state;
    if (st->kind == PyKind::Dict) return st->get(field);
    if (st->kind == PyKind::Tuple) {
        for (const auto* part : st->items())
            if (part->kind == PyKind::Dict)
                if (const auto* f = part->get(field)) return f;
    }
    return nullptr;
}

void Machine::applyWrapperState(PyValue* tensorValue, PyValue* state)
{
    PyTensorInfo& t = *tensorValue->tensor;
    const std::string_view cls = t.subclass;
    if (endsWith(cls, ".ShardedTensor")) {
        // state = (local_shards, ShardedTensorMetadata, ProcessGroupState, sharding_spec, init_rrefs)
        const PyValue* shards = arg(state, 0);
        if (!shards || shards->kind != PyKind::List) {
            warn(ReaderCode::BadTensor, "ShardedTensor without local shards");
            return;
        }
        const PyValue* pg = arg(state, 2);
        const PyValue* globalRank = objectField(pg, "global_rank");
        for (const auto* s : shards->items()) {
            const PyValue* tensor = objectField(s, "tensor");
            const PyValue* md = objectField(s, "metadata");
            PyTensorShard shard;
            if (!tensor || tensor->kind != PyKind::Tensor) {
                warn(ReaderCode::BadTensor, "ShardedTensor shard without a tensor");
                continue;
            }
            shard.tensor = const_cast<PyValue*>(tensor);
            intList(objectField(md, "shard_offsets"), shard.offsets);
            const PyValue* placement = objectField(md, "placement");
            if (const PyValue* r = objectField(placement, "_rank"); r && r->kind == PyKind::Int)
                shard.rank = static_cast<int>(r->integer);
            else if (globalRank && globalRank->kind == PyKind::Int)
                shard.rank = static_cast<int>(globalRank->integer);
            m_arena.wrapperOf(t).shards.push_back(std::move(shard));
        }
        // the metadata's list of every rank's shard: what a file without a local shard still says of the tensor
        const PyValue* list = objectField(arg(state, 1), "shards_metadata");
        if (list && list->kind == PyKind::List)
            for (const auto* md : list->items()) {
                PyShardBox box;
                if (!intList(objectField(md, "shard_offsets"), box.offsets)
                    || !intList(objectField(md, "shard_sizes"), box.sizes))
                    continue;
                const PyValue* placement = objectField(md, "placement");
                if (const PyValue* r = objectField(placement, "_rank"); r && r->kind == PyKind::Int)
                    box.rank = static_cast<int>(r->integer);
                m_arena.wrapperOf(t).metadataShards.push_back(std::move(box));
            }
        return;
    }
    if (endsWith(cls, ".DTensor")) {
        // state = (__dict__ or None, {'_local_tensor': tensor, '_spec': DTensorSpec})
        const PyValue* slots = nullptr;
        if (state && state->kind == PyKind::Tuple) {
            for (const auto* part : state->items())
                if (part->kind == PyKind::Dict && part->get("_local_tensor")) slots = part;
        } else if (state && state->kind == PyKind::Dict) {
            slots = state;
        }
        const PyValue* local = slots ? slots->get("_local_tensor") : nullptr;
        if (!local || local->kind != PyKind::Tensor) {
            warn(ReaderCode::BadTensor, "DTensor without a local tensor");
            return;
        }
        PyTensorShard shard;
        shard.tensor = const_cast<PyValue*>(local);
        const PyValue* spec = slots->get("_spec");
        const PyValue* mesh = objectField(spec, "mesh");
        const PyValue* placements = objectField(spec, "placements");
        std::vector<int64_t> coordinate;
        intList(objectField(mesh, "_coordinate_on_dim"), coordinate);
        const PyValue* meshTensor = objectField(mesh, "mesh");
        std::vector<int64_t> meshShape;
        if (meshTensor && meshTensor->kind == PyKind::Tensor) meshShape = meshTensor->tensor->sizes;
        // Offsets as compute_local_shape_and_global_offset does for Shard(d): torch.chunk semantics per mesh dim.
        bool ok = placements && placements->isSequence() && coordinate.size() == meshShape.size()
            && placements->size() == meshShape.size();
        std::vector<int64_t> localShape = t.sizes;
        std::vector<int64_t> offsets(t.sizes.size(), 0);
        std::string names;
        if (placements && placements->isSequence()) {
            for (size_t i = 0; i < placements->size(); ++i) {
                const PyValue* p = placements->item(i);
                const std::string pcls = p->className();
                const auto shortName = pcls.substr(pcls.rfind('.') + 1);
                const PyValue* dim = objectField(p, "dim");
                if (!names.empty()) names += ",";
                if (shortName == "Shard" && dim && dim->kind == PyKind::Int) {
                    names += "Shard(" + std::to_string(dim->integer) + ")";
                    const int64_t d = dim->integer;
                    if (!ok || d < 0 || d >= static_cast<int64_t>(localShape.size())) {
                        ok = false;
                        continue;
                    }
                    const int64_t n = meshShape[i];
                    const int64_t c = coordinate[i];
                    const int64_t size = localShape[static_cast<size_t>(d)];
                    const int64_t full = n > 0 ? (size + n - 1) / n : size;
                    const int64_t start = std::min(size, full * c);
                    const int64_t len = std::max<int64_t>(0, std::min(size, start + full) - start);
                    offsets[static_cast<size_t>(d)] += start;
                    localShape[static_cast<size_t>(d)] = len;
                } else if (shortName == "Replicate") {
                    names += "Replicate()";
                } else {
                    names += shortName;
                    ok = false; // Partial, _StridedShard: not a plain slice
                }
            }
        }
        m_arena.wrapperOf(t).placements = m_arena.copy(names);
        if (ok && localShape == local->tensor->sizes)
            shard.offsets = offsets;
        else
            warn(ReaderCode::DtensorLayout,
                "DTensor placements (" + names + ") do not give a plain slice; its global offsets are unknown");
        m_arena.wrapperOf(t).shards.push_back(std::move(shard));
        return;
    }
}

PyValue* Machine::rebuildFromTypeV2(const std::string&, PyValue* args)
{
    // _rebuild_from_type_v2(func, new_type, args, state): ret = func(*args); ret = ret.as_subclass(new_type) if
    // needed; then the state is applied (attributes, or the wrapper's slots).
    PyValue* func = const_cast<PyValue*>(arg(args, 0));
    const PyValue* newType = arg(args, 1);
    PyValue* funcArgs = const_cast<PyValue*>(arg(args, 2));
    PyValue* state = pin(arg(args, 3));
    pin(funcArgs);
    if (!func || !funcArgs) return nullptr;
    PyValue* inner = callReduce(func, funcArgs);
    if (!inner || inner->kind != PyKind::Tensor) return nullptr;
    if (newType && newType->kind == PyKind::Global) {
        const std::string path = newType->global->path();
        if (path == "torch.nn.parameter.Parameter") {
            inner = copyTensor(m_arena, inner);
            inner->tensor->isParameter = true;
        } else if (path != "torch.Tensor" && inner->tensor->subclass.empty()) {
            inner = copyTensor(m_arena, inner);
            inner->tensor->subclass = m_arena.copy(path);
        }
    }
    if (!inner->tensor->subclass.empty() && !inner->tensor->storage) applyWrapperState(inner, state);
    noteChild(inner, state);
    return inner;
}

/// dict(), OrderedDict(), Counter(), defaultdict(factory, items): a dict of the items
PyValue* Machine::reduceDict(const std::string& fn, PyValue* args)
{
    PyValue* result = m_arena.makeContainer(PyKind::Dict);
    const PyValue* init = fn == "collections.defaultdict" ? arg(args, 1) : arg(args, 0);
    pinItems(init);
    if (init && init->isSequence())
        for (const auto* pair : init->items())
            pinItems(pair);
    if (init && init->kind == PyKind::Dict) {
        for (size_t i = 0; i < init->size(); ++i)
            setItem(result, const_cast<PyValue*>(init->dictKey(i)), const_cast<PyValue*>(init->dictValue(i)));
    } else if (init && init->isSequence()) {
        for (const auto* pair : init->items())
            if (pair->isSequence() && pair->size() == 2)
                setItem(result, const_cast<PyValue*>(pair->item(0)), const_cast<PyValue*>(pair->item(1)));
    }
    return result;
}

/// set(), frozenset(), list(), tuple() of a sequence
PyValue* Machine::reduceSequence(const std::string& fn, PyValue* args)
{
    const PyKind kind = fn == "builtins.set" ? PyKind::Set
        : fn == "builtins.frozenset"         ? PyKind::FrozenSet
        : fn == "builtins.list"              ? PyKind::List
                                             : PyKind::Tuple;
    std::vector<PyValue*> items;
    if (const PyValue* init = arg(args, 0); init && init->hasContainer()) {
        items = init->kind == PyKind::Dict ? std::vector<PyValue*>() : init->container->items;
        pinItems(init);
    }
    return makeSequence(kind, std::move(items));
}

/// bytes(), bytearray() and _codecs.encode(text, 'latin1'), protocol 2's spelling of bytes
PyValue* Machine::reduceBytes(const std::string& fn, PyValue* args)
{
    PyValue* result = nullptr;
    const PyValue* a0 = arg(args, 0);
    const PyValue* enc = arg(args, 1);
    const PyKind kind = fn == "builtins.bytearray" ? PyKind::ByteArray : PyKind::Bytes;
    if (!a0) {
        result = m_arena.makeBytes({}, false, kind);
    } else if (a0->kind == PyKind::Bytes || a0->kind == PyKind::ByteArray) {
        result = m_arena.makeBytes(a0->text, false, kind);
    } else if (a0->kind == PyKind::Str) {
        std::string e = enc && enc->kind == PyKind::Str ? std::string(enc->text) : "utf-8";
        std::transform(e.begin(), e.end(), e.begin(), ::tolower);
        if (e == "latin1" || e == "latin-1" || e == "iso-8859-1" || e == "iso8859-1") {
            // the protocol-2 bytes encoding: each code point < 256 is one byte
            std::string out;
            const std::string_view s = a0->text;
            bool ok = true;
            for (size_t i = 0; i < s.size() && ok;) {
                const auto c = static_cast<uint8_t>(s[i]);
                uint32_t cp = c;
                size_t len = 1;
                if (c >= 0xc0 && c < 0xe0 && i + 1 < s.size()) {
                    cp = ((c & 0x1fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3fu);
                    len = 2;
                } else if (c >= 0x80) {
                    ok = false;
                }
                if (cp > 0xff) ok = false;
                out += static_cast<char>(cp);
                i += len;
            }
            result = ok ? m_arena.makeBytes(out, true, kind) : nullptr;
        } else if (e == "utf-8" || e == "utf8") {
            result = m_arena.makeBytes(a0->text, false, kind);
        }
    }
    return result;
}

/// complex(re, im)
PyValue* Machine::reduceComplex(const std::string&, PyValue* args)
{
    PyValue* result = m_arena.make(PyKind::Complex);
    const PyValue* re = arg(args, 0);
    const PyValue* im = arg(args, 1);
    auto num = [](const PyValue* v) {
        return !v ? 0.0 : v->kind == PyKind::Float ? v->real : v->kind == PyKind::Int ? double(v->integer) : 0.0;
    };
    result->real = num(re);
    result->imag = num(im);
    return result;
}

/// int(), float(), str(), bool() of a value of that type, or of nothing
PyValue* Machine::reduceScalar(const std::string& fn, PyValue* args)
{
    PyValue* result = nullptr;
    const PyValue* a0 = arg(args, 0);
    if (!a0)
        result = fn == "builtins.str" ? m_arena.makeStr({}, false)
            : fn == "builtins.float"  ? m_arena.makeFloat(0)
            : fn == "builtins.bool"   ? m_arena.makeBool(false)
                                      : m_arena.makeInt(0);
    else if ((fn == "builtins.int" && a0->kind == PyKind::Int) || (fn == "builtins.float" && a0->kind == PyKind::Float)
        || (fn == "builtins.str" && a0->kind == PyKind::Str) || (fn == "builtins.bool" && a0->kind == PyKind::Bool))
        result = pin(a0);
    return result;
}

/// getattr(cls, "name")
PyValue* Machine::reduceGetattr(const std::string&, PyValue* args)
{
    PyValue* result = nullptr;
    // getattr(cls, "name"): nested classes (protocol < 4) and enum members on some CPython 3.11 builds
    const PyValue* obj = arg(args, 0);
    const PyValue* attr = arg(args, 1);
    if (obj && obj->kind == PyKind::Global && attr && attr->kind == PyKind::Str) {
        const std::string name = std::string(obj->global->name) + "." + std::string(attr->text);
        const bool known = obj->global->known || isKnownGlobal(obj->global->module, name);
        result = m_arena.makeGlobal(obj->global->module, m_arena.copy(name), known);
    }
    return result;
}

/// copyreg._reconstructor(cls, base, state)
PyValue* Machine::reduceReconstructor(const std::string&, PyValue* args)
{
    PyValue* result = nullptr;
    // _reconstructor(cls, base, state): object.__new__(cls) (+ base.__init__(obj, state))
    PyValue* cls = const_cast<PyValue*>(arg(args, 0));
    if (cls) {
        PyValue* rest = makeSequence(PyKind::Tuple, {});
        if (const PyValue* st = arg(args, 2); st && st->kind != PyKind::None)
            rest = makeSequence(PyKind::Tuple, {pin(st)});
        result = makeObject(cls, rest, nullptr, PyObjectHow::NewObj);
    }
    return result;
}

/// copyreg.__newobj__(cls, *args)
PyValue* Machine::reduceNewobj(const std::string&, PyValue* args)
{
    PyValue* result = nullptr;
    PyValue* cls = const_cast<PyValue*>(arg(args, 0));
    if (cls) {
        pinItems(args);
        std::vector<PyValue*> rest(args->items().begin() + 1, args->items().end());
        result = makeObject(cls, makeSequence(PyKind::Tuple, std::move(rest)), nullptr, PyObjectHow::NewObj);
    }
    return result;
}

/// torch.Size(ints)
PyValue* Machine::reduceSize(const std::string&, PyValue* args)
{
    PyValue* result = nullptr;
    // a Size of ints, as torch.Size.__reduce__ gives it; anything else stays the inert call it is (a writer
    // leaves it out, saying why), never a Size that torch.load would refuse
    const PyValue* a0 = arg(args, 0);
    if (a0 && a0->isSequence() && args->size() == 1 // (arg() found a0: args is a sequence)
        && std::all_of(
            a0->items().begin(), a0->items().end(), [](const PyValue* i) { return i->kind == PyKind::Int; })) {
        pinItems(a0);
        result = makeSequence(PyKind::Tuple, a0->container->items);
        result->torchType = PyTorchType::Size;
    }
    return result;
}

/// torch.device(type[, index])
PyValue* Machine::reduceDevice(const std::string&, PyValue* args)
{
    PyValue* result = nullptr;
    // torch.device(type[, index]) as its __reduce__ gives it: a device type torch knows, an index it takes
    // (c10::DeviceIndex: 0..127); anything else stays the inert call it is
    static const std::set<std::string, std::less<>> kDeviceTypes {"cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl",
        "opencl", "ideep", "hip", "ve", "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia",
        "privateuseone"};
    const PyValue* type = arg(args, 0);
    const PyValue* index = arg(args, 1);
    const size_t nargs = args && args->isSequence() ? args->size() : 0;
    const bool indexOk = nargs == 1
        || (nargs == 2
            && (index->kind == PyKind::None
                || (index->kind == PyKind::Int && index->integer >= 0 && index->integer <= 127)));
    if (type && type->kind == PyKind::Str && kDeviceTypes.count(type->text) && indexOk) {
        std::string d(type->text);
        if (index && index->kind == PyKind::Int) d += ":" + std::to_string(index->integer);
        result = m_arena.makeStr(d, true);
        result->torchType = PyTorchType::Device;
    }
    return result;
}

/// torch.serialization._get_layout(name): the layout by name
PyValue* Machine::reduceLayout(const std::string&, PyValue* args)
{
    PyValue* result = nullptr;
    const PyValue* name = arg(args, 0);
    if (name && name->kind == PyKind::Str) {
        result = m_arena.makeStr(name->text, false);
        result->torchType = PyTorchType::Layout; // written back as the call (a sparse tensor's rebuild compares it)
    }
    return result;
}

/// torch._utils._rebuild_parameter(data, requires_grad, ...)
PyValue* Machine::rebuildParameter(const std::string&, PyValue* args)
{
    PyValue* result = nullptr;
    const PyValue* data = arg(args, 0);
    if (data && data->kind == PyKind::Tensor) {
        result = copyTensor(m_arena, data);
        result->tensor->isParameter = true;
        result->tensor->requiresGrad = asBool(arg(args, 1));
    }
    return result;
}

/// torch._utils._rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad)
PyValue* Machine::rebuildMetaTensor(const std::string&, PyValue* args)
{
    PyValue* result = nullptr;
    // (dtype, size, stride, requires_grad): a tensor with no data
    const PyValue* dt = arg(args, 0);
    std::vector<int64_t> sizes, strides;
    if (dt && dt->kind == PyKind::Dtype && intList(arg(args, 1), sizes)) {
        intList(arg(args, 2), strides);
        auto* t = m_arena.makeTensorInfo();
        t->dtype = dt->dtype;
        t->sizes = std::move(sizes);
        t->strides = std::move(strides);
        t->subclass = "meta";
        result = m_arena.make(PyKind::Tensor);
        result->tensor = t;
    }
    return result;
}

/// pathlib.*Path(parts...): the path as a string
PyValue* Machine::reducePath(const std::string&, PyValue* args)
{
    std::string p;
    for (const auto* part : args ? args->items() : std::vector<PyValue*>()) {
        if (part->kind != PyKind::Str) continue;
        if (!p.empty() && p.back() != '/') p += '/';
        p.append(part->text);
    }
    return m_arena.makeStr(p, true);
}

/// The calls a REDUCE is interpreted for, one rule each, by the callable's path; every other call stays an inert
/// object (what torch.load's weights_only unpickler allows, and the classes DCP's metadata and optimizers use)
const std::unordered_map<std::string_view, Machine::ReduceRule>& Machine::reduceRules()
{
    static const std::pair<std::string_view, ReduceRule> kRules[]
        = {{"collections.OrderedDict", &Machine::reduceDict}, {"collections.Counter", &Machine::reduceDict},
            {"collections.defaultdict", &Machine::reduceDict}, {"builtins.dict", &Machine::reduceDict},
            {"builtins.set", &Machine::reduceSequence}, {"builtins.frozenset", &Machine::reduceSequence},
            {"builtins.list", &Machine::reduceSequence}, {"builtins.tuple", &Machine::reduceSequence},
            {"builtins.bytearray", &Machine::reduceBytes}, {"_codecs.encode", &Machine::reduceBytes},
            {"builtins.bytes", &Machine::reduceBytes}, {"builtins.complex", &Machine::reduceComplex},
            {"builtins.int", &Machine::reduceScalar}, {"builtins.float", &Machine::reduceScalar},
            {"builtins.str", &Machine::reduceScalar}, {"builtins.bool", &Machine::reduceScalar},
            {"builtins.getattr", &Machine::reduceGetattr}, {"copyreg._reconstructor", &Machine::reduceReconstructor},
            {"copyreg.__newobj__", &Machine::reduceNewobj}, {"torch.Size", &Machine::reduceSize},
            {"torch.device", &Machine::reduceDevice}, {"torch.serialization._get_layout", &Machine::reduceLayout},
            {"torch._utils._rebuild_tensor", &Machine::rebuildTensor},
            {"torch._utils._rebuild_tensor_v2", &Machine::rebuildTensor},
            {"torch._utils._rebuild_tensor_v3", &Machine::rebuildTensor},
            {"torch._utils._rebuild_parameter", &Machine::rebuildParameter},
            {"torch._utils._rebuild_parameter_with_state", &Machine::rebuildParameter},
            {"torch._tensor._rebuild_from_type_v2", &Machine::rebuildFromTypeV2},
            {"torch._utils._rebuild_wrapper_subclass", &Machine::rebuildWrapperSubclass},
            {"torch._utils._rebuild_meta_tensor_no_storage", &Machine::rebuildMetaTensor}};
    static const std::unordered_map<std::string_view, ReduceRule> rules(std::begin(kRules), std::end(kRules));
    return rules;
}

PyValue* Machine::callReduce(PyValue* callable, PyValue* args)
{
    if (callable->kind != PyKind::Global || !callable->global->known)
        return makeObject(callable, args, nullptr, PyObjectHow::Reduce);
    const std::string fn = callable->global->path();
    PyValue* result = nullptr;
    if (const auto rule = reduceRules().find(fn); rule != reduceRules().end()) {
        result = (this->*rule->second)(fn, args);
    } else if (startsWith(fn, "pathlib.")) {
        result = reducePath(fn, args);
    } else if (startsWith(fn, "torch._utils._rebuild_")) {
        warn(
            ReaderCode::UnsupportedTensor, fn + ": this tensor kind (quantized, sparse, nested, device) is kept inert");
    }
    if (result) {
        noteChild(result, args);
        return result;
    }
    return makeObject(callable, args, nullptr, PyObjectHow::Reduce);
}

void Machine::build(PyValue* inst, PyValue* state)
{
    switch (inst->kind) {
    case PyKind::Object: {
        auto& o = *inst->object;
        if (!o.state) {
            o.state = state;
        } else if (o.state->kind == PyKind::Dict && state->kind == PyKind::Dict) {
            pinItems(state);
            for (size_t i = 0; i < state->size(); ++i)
                setItem(o.state, const_cast<PyValue*>(state->dictKey(i)), const_cast<PyValue*>(state->dictValue(i)));
        } else {
            o.state = state;
        }
        noteChild(inst, state);
        return;
    }
    case PyKind::Dict:
        // OrderedDict.__dict__.update(state): state_dict() results carry _metadata this way
        inst->container->attrs = state;
        noteChild(inst, state);
        return;
    case PyKind::Tensor:
        // legacy tensor BUILD (set_ state) or Parameter attributes: nothing a reader needs
        return;
    default:
        warn(ReaderCode::BuildIgnored, std::string("BUILD on a ") + pyKindName(inst->kind) + " ignored");
    }
}

PyValue* Machine::persistentLoad(PyValue* pid)
{
    if (!m_opt.persistentLoad)
        fail(ErrorKind::Format, "persistent id " + pyRepr(pid, 80) + " in a pickle that allows none");
    PyValue* v = m_opt.persistentLoad(m_arena, pid, m_opt.baseOffset + m_opOffset);
    if (!v) fail(ErrorKind::Format, "unresolvable persistent id " + pyRepr(pid, 80));
    return v;
}

/// the stack and framing: MARK, POP, DUP, the protocol and frame headers, buffers
void Machine::stackOp()
{
    switch (m_op) {
    case MARK:
        if (m_marks.size() >= m_limits.maxMarks)
            fail(ErrorKind::Limit, "more than " + std::to_string(m_limits.maxMarks) + " open MARKs");
        m_marks.push_back(m_stack.size());
        break;
    case POP:
        if (m_stack.size() > frameBase())
            m_stack.pop_back();
        else
            popMark();
        break;
    case POP_MARK:
        popMark();
        break;
    case DUP:
        top()->pinned = true;
        push(top());
        break;
    case NEXT_BUFFER:
        fail(ErrorKind::Unsupported, "out-of-band buffers (NEXT_BUFFER) are not supported");
    case READONLY_BUFFER:
        top();
        break;
    case PROTO: {
        const uint8_t v = u8();
        if (v > 5) fail(ErrorKind::Unsupported, "pickle protocol " + std::to_string(v) + " (supported: 0-5)");
        m_protocol = v;
        break;
    }
    case FRAME: {
        const uint64_t n = u64();
        if (n > m_size - m_pos)
            fail(ErrorKind::Truncated, "FRAME of " + std::to_string(n) + " bytes past the end of the input");
        break;
    }
    }
}

/// numbers and constants: the value the opcode (and its argument) spells, pushed
void Machine::pushNumber()
{
    switch (m_op) {
    case FLOAT: {
        const std::string s(line());
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size())
            fail(ErrorKind::Format, "bad float literal '" + s.substr(0, 40) + "'");
        push(m_arena.makeFloat(d));
        break;
    }
    case INT: {
        const std::string_view s = line();
        if (s == "00" || s == "01")
            push(m_arena.makeBool(s == "01"));
        else
            push(parseDecimalInt(s));
        break;
    }
    case BININT:
        push(m_arena.makeInt(i32()));
        break;
    case BININT1:
        push(m_arena.makeInt(u8()));
        break;
    case BININT2:
        push(m_arena.makeInt(u16()));
        break;
    case LONG:
        push(parseDecimalInt(line()));
        break;
    case LONG1: {
        const uint8_t n = u8();
        push(makeInt(bytes(n)));
        break;
    }
    case LONG4: {
        const int32_t n = i32();
        if (n < 0) fail(ErrorKind::Format, "LONG4 with negative length");
        push(makeInt(bytes(static_cast<uint64_t>(n))));
        break;
    }
    case NONE:
        push(m_arena.makeNone());
        break;
    case NEWTRUE:
        push(m_arena.makeBool(true));
        break;
    case NEWFALSE:
        push(m_arena.makeBool(false));
        break;
    case BINFLOAT: {
        const uint8_t* p = take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i)
            bits = (bits << 8) | p[i]; // big-endian
        double d;
        std::memcpy(&d, &bits, sizeof d);
        push(m_arena.makeFloat(d));
        break;
    }
    }
}

/// str, bytes and bytearray: the argument decoded, pushed
void Machine::pushText()
{
    switch (m_op) {
    case STRING: {
        bool ok = false;
        const std::string s = decodeStringLiteral(line(), ok);
        if (!ok) fail(ErrorKind::Format, "bad STRING literal");
        push(decodeUtf8OrLatin1(m_arena.copy(s)));
        break;
    }
    case BINSTRING: {
        const int32_t n = i32();
        if (n < 0) fail(ErrorKind::Format, "BINSTRING with negative length");
        push(decodeUtf8OrLatin1(bytes(static_cast<uint64_t>(n))));
        break;
    }
    case SHORT_BINSTRING:
        push(decodeUtf8OrLatin1(bytes(u8())));
        break;
    case UNICODE: {
        bool ok = false;
        const std::string s = decodeRawUnicodeEscape(line(), ok);
        if (!ok) fail(ErrorKind::Format, "bad UNICODE escape");
        push(m_arena.makeStr(s, true));
        break;
    }
    case BINUNICODE:
        push(m_arena.makeStr(bytes(u32()), false));
        break;
    case SHORT_BINUNICODE:
        push(m_arena.makeStr(bytes(u8()), false));
        break;
    case BINUNICODE8:
        push(m_arena.makeStr(bytes(u64()), false));
        break;
    case BINBYTES:
        push(m_arena.makeBytes(bytes(u32()), false));
        break;
    case SHORT_BINBYTES:
        push(m_arena.makeBytes(bytes(u8()), false));
        break;
    case BINBYTES8:
        push(m_arena.makeBytes(bytes(u64()), false));
        break;
    case BYTEARRAY8:
        push(m_arena.makeBytes(bytes(u64()), false, PyKind::ByteArray));
        break;
    }
}

/// lists, dicts, tuples and sets: made from the stack (or since the MARK), or items added to the one on top
void Machine::buildContainer()
{
    switch (m_op) {
    case APPEND: {
        PyValue* v = pop();
        append(top(), v);
        break;
    }
    case APPENDS: {
        auto items = popMark();
        PyValue* target = top();
        for (auto* v : items)
            append(target, v);
        break;
    }
    case DICT: {
        auto items = popMark();
        if (items.size() % 2) fail(ErrorKind::Format, "DICT with an odd number of items");
        PyValue* d = m_arena.makeContainer(PyKind::Dict);
        for (size_t i = 0; i < items.size(); i += 2)
            setItem(d, items[i], items[i + 1]);
        push(d);
        break;
    }
    case EMPTY_DICT:
        push(m_arena.makeContainer(PyKind::Dict));
        break;
    case LIST:
        push(makeSequence(PyKind::List, popMark()));
        break;
    case EMPTY_LIST:
        push(m_arena.makeContainer(PyKind::List));
        break;
    case SETITEM: {
        PyValue* value = pop();
        PyValue* key = pop();
        setItem(top(), key, value);
        break;
    }
    case SETITEMS: {
        auto items = popMark();
        if (items.size() % 2) fail(ErrorKind::Format, "SETITEMS with an odd number of items");
        PyValue* target = top();
        for (size_t i = 0; i < items.size(); i += 2)
            setItem(target, items[i], items[i + 1]);
        break;
    }
    case TUPLE:
        push(makeSequence(PyKind::Tuple, popMark()));
        break;
    case EMPTY_TUPLE:
        push(makeSequence(PyKind::Tuple, {}));
        break;
    case TUPLE1: {
        PyValue* a = pop();
        push(makeSequence(PyKind::Tuple, {a}));
        break;
    }
    case TUPLE2: {
        PyValue* b = pop();
        PyValue* a = pop();
        push(makeSequence(PyKind::Tuple, {a, b}));
        break;
    }
    case TUPLE3: {
        PyValue* c = pop();
        PyValue* b = pop();
        PyValue* a = pop();
        push(makeSequence(PyKind::Tuple, {a, b, c}));
        break;
    }
    case EMPTY_SET:
        push(m_arena.makeContainer(PyKind::Set));
        break;
    case ADDITEMS: {
        auto items = popMark();
        PyValue* target = top();
        for (auto* v : items)
            addToSet(target, v);
        break;
    }
    case FROZENSET:
        push(makeSequence(PyKind::FrozenSet, popMark()));
        break;
    }
}

/// the memo: the top of the stack stored at an index, or the value at an index pushed
void Machine::memoOp()
{
    switch (m_op) {
    case GET: {
        const std::string_view s = line();
        uint64_t idx = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), idx);
        if (ec != std::errc() || p != s.data() + s.size()) fail(ErrorKind::Format, "bad GET index");
        push(memoGet(idx));
        break;
    }
    case BINGET:
        push(memoGet(u8()));
        break;
    case LONG_BINGET:
        push(memoGet(u32()));
        break;
    case PUT: {
        const std::string_view s = line();
        uint64_t idx = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), idx);
        if (ec != std::errc() || p != s.data() + s.size()) fail(ErrorKind::Format, "bad PUT index");
        memoPut(idx, top());
        break;
    }
    case BINPUT:
        memoPut(u8(), top());
        break;
    case LONG_BINPUT:
        memoPut(u32(), top());
        break;
    case MEMOIZE:
        memoPut(m_memoCount, top());
        break;
    }
}

/// globals, calls and objects: GLOBAL names a class (kept inert: nothing is imported), REDUCE/NEWOBJ/INST/OBJ call
/// it (the torch rebuild rules, or an inert object), BUILD sets state, PERSID loads a storage
void Machine::objectOp()
{
    switch (m_op) {
    case PERSID:
        push(persistentLoad(m_arena.makeStr(line(), false)));
        break;
    case BINPERSID: {
        PyValue* pid = pop();
        PyValue* v = persistentLoad(pid);
        push(v);
        if (v != pid) m_arena.release(pid); // ('storage', cls, key, location, numel) per storage
        break;
    }
    case REDUCE: {
        PyValue* args = pop();
        PyValue* callable = pop();
        PyValue* v = callReduce(callable, args);
        push(v);
        // An interpreted call keeps nothing of its arguments (a tensor copies sizes and strides; what a result
        // shares with them is pinned) and they were only on the stack: give them back. Not an Object, which holds
        // its arguments, and not in callReduce, which also runs on tuples that stay reachable.
        if (v->kind != PyKind::Object && v != args) m_arena.release(args);
        break;
    }
    case BUILD: {
        PyValue* state = pop();
        build(top(), state);
        break;
    }
    case GLOBAL: {
        const std::string_view module = line();
        const std::string_view name = line();
        push(findClass(module, name));
        break;
    }
    case STACK_GLOBAL: {
        PyValue* name = pop();
        PyValue* module = pop();
        if (name->kind != PyKind::Str || module->kind != PyKind::Str)
            fail(ErrorKind::Format, "STACK_GLOBAL needs two strings");
        push(findClass(module->text, name->text));
        break;
    }
    case INST: {
        const std::string_view module = line();
        const std::string_view name = line();
        auto args = popMark();
        PyValue* cls = findClass(module, name);
        push(makeObject(cls, makeSequence(PyKind::Tuple, std::move(args)), nullptr, PyObjectHow::Inst));
        break;
    }
    case OBJ: {
        auto items = popMark();
        if (items.empty()) fail(ErrorKind::Format, "OBJ without a class");
        PyValue* cls = items.front();
        items.erase(items.begin());
        push(makeObject(cls, makeSequence(PyKind::Tuple, std::move(items)), nullptr, PyObjectHow::Inst));
        break;
    }
    case NEWOBJ: {
        PyValue* args = pop();
        PyValue* cls = pop();
        push(makeObject(cls, args, nullptr, PyObjectHow::NewObj));
        break;
    }
    case NEWOBJ_EX: {
        PyValue* kwargs = pop();
        PyValue* args = pop();
        PyValue* cls = pop();
        push(makeObject(cls, args, kwargs, PyObjectHow::NewObj));
        break;
    }
    case EXT1:
    case EXT2:
    case EXT4: {
        const uint32_t code = m_op == EXT1 ? u8() : m_op == EXT2 ? u16() : u32();
        const std::string path = "copyreg._extension_registry[" + std::to_string(code) + "]";
        if (m_warnedGlobals.insert(path).second)
            warn(ReaderCode::UnsafeGlobal,
                "extension code " + std::to_string(code) + " refers to a registered global; kept inert", path);
        push(m_arena.makeGlobal("copyreg", m_arena.copy("_extension_registry[" + std::to_string(code) + "]"), false));
        break;
    }
    }
}

PickleResult Machine::run()
{
    while (true) {
        if (m_pos >= m_size) {
            m_opOffset = m_pos;
            fail(ErrorKind::Truncated, "pickle ends without STOP");
        }
        m_opOffset = m_pos;
        m_op = m_data[m_pos++];
        switch (groupOf(m_op)) {
        case OpGroup::Stack:
            stackOp();
            break;
        case OpGroup::Number:
            pushNumber();
            break;
        case OpGroup::Text:
            pushText();
            break;
        case OpGroup::Container:
            buildContainer();
            break;
        case OpGroup::Memo:
            memoOp();
            break;
        case OpGroup::Object:
            objectOp();
            break;
        case OpGroup::Stop: {
            PickleResult result;
            result.root = pop();
            result.protocol = m_protocol;
            result.bytesConsumed = m_pos;
            result.warnings = std::move(m_warnings);
            return result;
        }
        case OpGroup::Unknown:
            fail(ErrorKind::Format, "unknown opcode " + hex2(m_op));
        }
    }
}

} // namespace

PickleResult unpickle(const uint8_t* data, uint64_t size, PyArena& arena, const PickleOptions& options)
{
    Machine m(data, size, arena, options);
    return m.run();
}

} // namespace optscope
