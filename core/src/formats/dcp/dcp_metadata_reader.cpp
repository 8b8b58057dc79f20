// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/dcp/dcp_metadata_reader.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/state_flattener.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/io/byte_source.h"
#include "optscope/pickle/pickle_machine.h"
#include "optscope/pickle/pickle_opcodes.h"

#include <unordered_map>

#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_map>

namespace optscope {

namespace {

using namespace pickle_op;

/// thrown inside the reader when the pickle holds something it does not handle; caught in read()
struct Unsupported
{
    int line;
};

enum class Cls : uint8_t {
    Metadata,
    TensorStorageMetadata,
    BytesStorageMetadata,
    ChunkStorageMetadata,
    TensorProperties,
    MetadataIndex,
    StorageInfo,
    Size,
    Dtype,
    OtherKnown, ///< a safe global whose value is never needed here (layouts, memory formats, paths, StorageMeta)
};

enum class T : uint8_t {
    None,
    Bool,
    Int,
    Float,
    Str, ///< i = offset in the input, a = length
    Tuple, ///< i = first item in m_tuples, a = count
    List, ///< a = container
    Dict, ///< a = container
    Global, ///< a = Cls, i = dtype for Cls::Dtype
    Object, ///< a = Cls, not yet built (NEWOBJ)
    Size, ///< i = first in m_ints, a = ndim
    Chunk, ///< i = index into out.chunks
    Tensor, ///< i = index into m_tensors
    Bytes, ///< a BytesStorageMetadata
    Props, ///< i = dtype, or -1
    Index, ///< i = index into m_indexes
    Info, ///< i = index into m_infos
    Meta, ///< the Metadata object, built
    Opaque,
};

struct V
{
    T t = T::None;
    bool pinned = false; ///< kept in the memo: never reuse its storage
    uint32_t a = 0;
    int64_t i = 0;
};

struct Container
{
    std::vector<V> items; ///< Dict: key, value, key, value, ...
    bool storageDict = false; ///< pairs went to out.storage instead
    uint64_t storagePairs = 0;
};

struct TensorRec
{
    int64_t dtype = -1;
    bool hasShape = false;
    uint64_t shapeAt = 0;
    uint32_t ndim = 0;
    uint64_t firstChunk = 0;
    uint64_t chunkCount = 0;
};
struct IndexRec
{
    V fqn;
    bool pinned = false; ///< memoized and read back: a later GET may still use it
    bool hasOffset = false;
    uint64_t offsetsAt = 0; ///< into out.dims
    uint32_t ndim = 0;
};
struct InfoRec
{
    uint32_t file = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    bool transforms = false;
    bool pinned = false;
};

class Machine
{
public:
    Machine(const ByteSource& file, const Progress& progress)
        : m_file(file)
        , m_data(file.bytes(0, 0))
        , m_size(file.size())
        , m_arrived(file.isRemote() ? 0 : file.size())
        , m_progress(progress)
    { }

    DcpMetadata run()
    {
        // a remote .metadata streams in with one GET while the scan reads it (arrive); a local one is read ahead
        if (m_arrived < m_size)
            m_file.stream(0, m_size);
        else
            m_file.adviseSequential(0, m_size);
        scanMemoReads();
        arrive(m_size);
        m_file.release(0, m_size);
        execute();
        m_file.release(0, m_size);
        return std::move(m_out);
    }

private:
// ---- input
#define unsupported()                                                                                                  \
    throw Unsupported                                                                                                  \
    {                                                                                                                  \
        __LINE__                                                                                                       \
    }
    /// the bytes before @p end (and up to a step more) have arrived: readable at m_data
    void arrive(uint64_t end)
    {
        constexpr uint64_t kStep = uint64_t(1) << 20;
        if (end <= m_arrived) return;
        end = std::min(m_size, std::max(end, m_arrived + kStep));
        m_file.bytes(m_arrived, end - m_arrived);
        m_arrived = end;
    }
    void need(uint64_t n) const
    {
        if (n > m_size - m_pos) unsupported();
    }
    uint64_t readUInt(unsigned bytes)
    {
        need(bytes);
        uint64_t v = 0;
        for (unsigned b = 0; b < bytes; ++b)
            v |= static_cast<uint64_t>(m_data[m_pos + b]) << (8 * b);
        m_pos += bytes;
        return v;
    }
    std::string_view str(const V& v) const
    {
        return {reinterpret_cast<const char*>(m_data) + v.i, v.a};
    }

    /// pass 1: which memo entries are ever read back (GET); everything else need not be kept
    void scanMemoReads()
    {
        uint64_t pos = 0;
        uint64_t memoized = 0;
        bool puts = false;
        // marked as read here, not listed: a 1,024-rank file reads back ~20 million entries, a list of 150 MB that
        // grew by doublings; the bitmap is one bit per entry. A GET of an entry not yet written is no valid pickle.
        auto get = [&](uint64_t g) {
            // reading an entry never written: the general reader says so; no input of n bytes writes n entries
            if (g >= memoized || g >= m_size) unsupported();
            if (g >= m_memoRead.size()) m_memoRead.resize(std::max<uint64_t>(g + 1, 2 * m_memoRead.size()), false);
            m_memoRead[g] = true;
        };
        uint64_t ints = 0, builds = 0; // upper bounds of the dims and chunks to come, to size them once
        auto uint = [&](unsigned bytes) {
            if (bytes > m_size - pos) unsupported();
            uint64_t v = 0;
            for (unsigned b = 0; b < bytes; ++b)
                v |= static_cast<uint64_t>(m_data[pos + b]) << (8 * b);
            pos += bytes;
            return v;
        };
        // steps over an argument laid out as @p arg says (the one opcode table, argumentOf): called with a constant,
        // so the scan costs what a hand-written skip did
        auto stepBy = [&](const Arg arg) {
            pos = argumentEnd(m_data, m_size, pos, arg);
            if (pos == kPastTheEnd) unsupported();
        };
        static_assert(argumentOf(MARK).kind == ArgKind::None && argumentOf(EMPTY_DICT).kind == ArgKind::None
                && argumentOf(EMPTY_LIST).kind == ArgKind::None && argumentOf(EMPTY_TUPLE).kind == ArgKind::None
                && argumentOf(TUPLE).kind == ArgKind::None && argumentOf(TUPLE1).kind == ArgKind::None
                && argumentOf(TUPLE2).kind == ArgKind::None && argumentOf(TUPLE3).kind == ArgKind::None
                && argumentOf(SETITEM).kind == ArgKind::None && argumentOf(SETITEMS).kind == ArgKind::None
                && argumentOf(APPEND).kind == ArgKind::None && argumentOf(APPENDS).kind == ArgKind::None
                && argumentOf(NONE).kind == ArgKind::None && argumentOf(NEWTRUE).kind == ArgKind::None
                && argumentOf(NEWFALSE).kind == ArgKind::None && argumentOf(STACK_GLOBAL).kind == ArgKind::None
                && argumentOf(NEWOBJ).kind == ArgKind::None && argumentOf(REDUCE).kind == ArgKind::None
                && argumentOf(BUILD).kind == ArgKind::None && argumentOf(MEMOIZE).kind == ArgKind::None,
            "the opcodes stepped over without an argument have none");
        while (pos < m_size) {
            arrive(pos + 16); // an opcode and its argument's length (a string's bytes are stepped over)
            const uint8_t op = m_data[pos++];
            // the opcodes DCP's pickles hold; any other is for the general reader
            switch (op) {
            case STOP:
                pos = m_size;
                break;
            case MARK:
            case EMPTY_DICT:
            case EMPTY_LIST:
            case EMPTY_TUPLE:
            case TUPLE:
            case TUPLE1:
            case TUPLE2:
            case TUPLE3:
            case SETITEM:
            case SETITEMS:
            case APPEND:
            case APPENDS:
            case NONE:
            case NEWTRUE:
            case NEWFALSE:
            case STACK_GLOBAL:
            case NEWOBJ:
            case REDUCE:
                break;
            case PROTO:
                stepBy(argumentOf(PROTO));
                break;
            case FRAME:
                stepBy(argumentOf(FRAME));
                break;
            case BINFLOAT:
                stepBy(argumentOf(BINFLOAT));
                break;
            case SHORT_BINUNICODE:
                stepBy(argumentOf(SHORT_BINUNICODE));
                break;
            case BINUNICODE:
                stepBy(argumentOf(BINUNICODE));
                break;
            case BINUNICODE8:
                stepBy(argumentOf(BINUNICODE8));
                break;
            case GLOBAL:
                arrive(m_size); // lines of any length: rare (protocol 2), so read whole
                stepBy(argumentOf(GLOBAL));
                break;
            case BUILD:
                ++builds;
                break;
            case BININT:
                ++ints;
                stepBy(argumentOf(BININT));
                break;
            case BININT1:
                ++ints;
                stepBy(argumentOf(BININT1));
                break;
            case BININT2:
                ++ints;
                stepBy(argumentOf(BININT2));
                break;
            case LONG1:
                ++ints;
                stepBy(argumentOf(LONG1));
                break;
            case MEMOIZE:
                ++memoized;
                break;
            case BINPUT:
                puts = true;
                memoized = std::max<uint64_t>(memoized, uint(argumentOf(BINPUT).n) + 1);
                break;
            case LONG_BINPUT:
                puts = true;
                memoized = std::max<uint64_t>(memoized, uint(argumentOf(LONG_BINPUT).n) + 1);
                break;
            case BINGET:
                get(uint(argumentOf(BINGET).n));
                break;
            case LONG_BINGET:
                get(uint(argumentOf(LONG_BINGET).n));
                break;
            default:
                unsupported(); // an opcode DCP's pickles never hold
            }
        }
        if (puts && memoized > m_size) unsupported();
        m_memoRead.resize(memoized, false);
        // every dim kept is an int of the pickle (ints are never memoized), every chunk a BUILD: reserved once, the
        // tables are not copied at each doubling (a quarter of the time at 2.2M chunks); capacity never touched costs
        // no memory. Both counts are bounded by the input's length.
        m_out.dims.reserve(ints);
        m_out.chunks.reserve(builds);
    }

    // ---- values
    V pop()
    {
        if (m_stack.size() <= m_markFloor()) unsupported();
        V v = m_stack.back();
        m_stack.pop_back();
        return v;
    }
    size_t m_markFloor() const
    {
        return m_marks.empty() ? 0 : m_marks.back();
    }
    V& top()
    {
        if (m_stack.size() <= m_markFloor()) unsupported();
        return m_stack.back();
    }
    size_t popMark()
    {
        if (m_marks.empty()) unsupported();
        const size_t at = m_marks.back();
        m_marks.pop_back();
        return at;
    }
    uint32_t newContainer()
    {
        if (!m_freeContainers.empty()) {
            const uint32_t id = m_freeContainers.back();
            m_freeContainers.pop_back();
            return id;
        }
        m_containers.emplace_back();
        return static_cast<uint32_t>(m_containers.size() - 1);
    }
    void releaseContainer(const V& v)
    {
        if (v.pinned || (v.t != T::Dict && v.t != T::List)) return;
        Container& c = m_containers[v.a];
        c.items.clear();
        c.storageDict = false;
        c.storagePairs = 0;
        m_freeContainers.push_back(v.a);
    }
    /// tuples are immutable and built in order: the last one made is at the end of m_tuples and can go
    void releaseTuple(V v)
    {
        while (v.t == T::Tuple && !v.pinned && v.i + v.a == static_cast<int64_t>(m_tuples.size())) {
            const V inner = v.a == 1 ? m_tuples[static_cast<size_t>(v.i)] : V {};
            m_tuples.resize(static_cast<size_t>(v.i));
            v = inner; // torch.Size((d0, d1)): the inner tuple was made just before
        }
    }
    void releaseSize(const V& v)
    {
        if (v.t == T::Size && !v.pinned && v.i + v.a == static_cast<int64_t>(m_ints.size()))
            m_ints.resize(static_cast<size_t>(v.i));
    }
    const V* tupleItems(const V& v) const
    {
        return m_tuples.data() + v.i;
    }

    /// value of @p key in a Dict state, or null
    const V* dictGet(const V& dict, std::string_view key) const
    {
        const auto& items = m_containers[dict.a].items;
        for (size_t k = 0; k + 1 < items.size(); k += 2)
            if (items[k].t == T::Str && str(items[k]) == key) return &items[k + 1];
        return nullptr;
    }
    /// the dataclass state as a Dict, each key one of @p allowed (anything else: not what DCP writes)
    void expectFields(const V& state, std::initializer_list<std::string_view> allowed) const
    {
        if (state.t != T::Dict) unsupported();
        const auto& items = m_containers[state.a].items;
        for (size_t k = 0; k < items.size(); k += 2) {
            if (items[k].t != T::Str) unsupported();
            bool ok = false;
            for (auto a : allowed)
                ok = ok || str(items[k]) == a;
            if (!ok) unsupported();
        }
    }
    int64_t intField(const V& state, std::string_view key) const
    {
        const V* v = dictGet(state, key);
        if (!v || v->t != T::Int) unsupported();
        return v->i;
    }

    Cls classOf(std::string_view module, std::string_view name, int64_t& dtype)
    {
        const bool metadata = module == "torch.distributed.checkpoint.metadata"
            || module == "torch.distributed._shard.checkpoint.metadata";
        const bool filesystem = module == "torch.distributed.checkpoint.filesystem"
            || module == "torch.distributed._shard.checkpoint.filesystem";
        if (metadata) {
            if (name == "Metadata") return Cls::Metadata;
            if (name == "TensorStorageMetadata") return Cls::TensorStorageMetadata;
            if (name == "BytesStorageMetadata") return Cls::BytesStorageMetadata;
            if (name == "ChunkStorageMetadata") return Cls::ChunkStorageMetadata;
            if (name == "TensorProperties") return Cls::TensorProperties;
            if (name == "MetadataIndex") return Cls::MetadataIndex;
        }
        if (filesystem && name == "_StorageInfo") return Cls::StorageInfo;
        if (module == "torch" && name == "Size") return Cls::Size;
        if (module == "torch" && name.find('.') == std::string_view::npos)
            if (auto dt = dtypeFromName(name)) {
                dtype = static_cast<int64_t>(*dt);
                return Cls::Dtype;
            }
        if (isKnownGlobal(module, name)) return Cls::OtherKnown;
        unsupported(); // unknown classes: the general reader reports them
    }

    void pushGlobal(std::string_view module, std::string_view name)
    {
        V g;
        g.t = T::Global;
        int64_t dtype = -1;
        g.a = static_cast<uint32_t>(classOf(module, name, dtype));
        g.i = dtype;
        m_stack.push_back(g);
    }

    void newObject(const V& cls, const V& args)
    {
        if (cls.t != T::Global) unsupported();
        const auto c = static_cast<Cls>(cls.a);
        if (args.t != T::Tuple || args.a != 0) unsupported(); // dataclasses: cls.__new__(cls)
        releaseTuple(args);
        V o;
        switch (c) {
        case Cls::BytesStorageMetadata:
            o.t = T::Bytes;
            break; // no fields: no BUILD follows
        case Cls::OtherKnown:
            o.t = T::Opaque;
            break;
        case Cls::Size:
        case Cls::Dtype:
            unsupported();
        default:
            o.t = T::Object;
            o.a = cls.a;
        }
        m_stack.push_back(o);
    }

    void reduce(const V& callable, const V& args)
    {
        if (callable.t != T::Global || args.t != T::Tuple) unsupported();
        const auto c = static_cast<Cls>(callable.a);
        V r;
        if (c == Cls::Size) {
            // torch.Size((d0, d1, ...))
            if (args.a != 1) unsupported();
            const V dims = tupleItems(args)[0];
            if (dims.t != T::Tuple) unsupported();
            r.t = T::Size;
            r.a = dims.a;
            const V* items = tupleItems(dims);
            r.i = static_cast<int64_t>(m_ints.size());
            for (uint32_t d = 0; d < dims.a; ++d) {
                if (items[d].t != T::Int) unsupported();
                m_ints.push_back(items[d].i);
            }
            releaseTuple(args);
        } else if (c == Cls::OtherKnown) {
            releaseTuple(args);
            r.t = T::Opaque;
        } else {
            unsupported();
        }
        m_stack.push_back(r);
    }

    /// copies a Size into out.dims; returns where
    uint64_t keepSize(const V& s)
    {
        const uint64_t at = m_out.dims.size();
        m_out.dims.insert(m_out.dims.end(), m_ints.begin() + s.i, m_ints.begin() + s.i + s.a);
        return at;
    }

    /// BUILD: the object on the stack made from its state, by its class (one of DCP's metadata classes)
    void build()
    {
        const V state = pop();
        V& obj = top();
        if (obj.t == T::Opaque) {
            releaseContainer(state);
            releaseTuple(state);
            return;
        }
        if (obj.t != T::Object) unsupported();
        V built;
        switch (static_cast<Cls>(obj.a)) {
        case Cls::ChunkStorageMetadata:
            built = buildChunk(state);
            break;
        case Cls::TensorProperties:
            built = buildProperties(state);
            break;
        case Cls::TensorStorageMetadata:
            built = buildTensor(state);
            break;
        case Cls::MetadataIndex:
            built = buildIndex(state, obj.pinned);
            break;
        case Cls::StorageInfo:
            built = buildStorageInfo(state, obj.pinned);
            break;
        case Cls::Metadata:
            expectFields(state, {"state_dict_metadata", "planner_data", "storage_data", "storage_meta", "version"});
            m_meta = state;
            m_meta.pinned = true; // its dicts are read at the end
            built.t = T::Meta;
            break;
        default:
            unsupported();
        }
        if (static_cast<Cls>(obj.a) != Cls::Metadata) {
            releaseContainer(state);
            releaseTuple(state);
        }
        // shared objects (one TensorProperties for many tensors) are memoized at NEWOBJ: later reads get the built one
        built.pinned = obj.pinned;
        if (obj.pinned) m_memo[static_cast<uint64_t>(obj.i)] = built;
        obj = built;
    }

    /// what a builder made: the record at @p index of its kind's table
    static V made(T kind, size_t index)
    {
        V built;
        built.t = kind;
        built.i = static_cast<int64_t>(index);
        return built;
    }

    /// ChunkStorageMetadata(offsets, sizes): a chunk, its dims kept in out.dims
    V buildChunk(const V& state)
    {
        expectFields(state, {"offsets", "sizes"});
        const V* offsets = dictGet(state, "offsets");
        const V* sizes = dictGet(state, "sizes");
        if (!offsets || !sizes || offsets->t != T::Size || sizes->t != T::Size || offsets->a != sizes->a) unsupported();
        DcpMetadata::Chunk ch;
        ch.ndim = offsets->a;
        ch.dimsAt = keepSize(*offsets);
        keepSize(*sizes);
        const V o = *offsets, s = *sizes;
        releaseSize(s);
        releaseSize(o);
        m_out.chunks.push_back(ch);
        return made(T::Chunk, m_out.chunks.size() - 1);
    }

    /// TensorProperties: only its dtype is kept, from __getstate__'s tuple (dtype, layout, requires_grad, ...) or a
    /// dict
    V buildProperties(const V& state)
    {
        const V* dt = nullptr;
        if (state.t == T::Tuple && state.a >= 1)
            dt = tupleItems(state);
        else if (state.t == T::Dict)
            dt = dictGet(state, "dtype");
        else
            unsupported();
        if (!dt || dt->t != T::Global || static_cast<Cls>(dt->a) != Cls::Dtype) unsupported();
        return made(T::Props, static_cast<size_t>(dt->i));
    }

    /// TensorStorageMetadata(properties, size, chunks): a tensor over a run of consecutive chunks (chunks shared
    /// between tensors are not DCP's)
    V buildTensor(const V& state)
    {
        expectFields(state, {"properties", "size", "chunks"});
        const V* props = dictGet(state, "properties");
        const V* size = dictGet(state, "size");
        const V* chunks = dictGet(state, "chunks");
        if (!props || props->t != T::Props || !size || size->t != T::Size || !chunks || chunks->t != T::List)
            unsupported();
        TensorRec t;
        t.dtype = props->i;
        t.hasShape = true;
        t.ndim = size->a;
        t.shapeAt = keepSize(*size);
        const auto& items = m_containers[chunks->a].items;
        for (size_t k = 0; k < items.size(); ++k) {
            if (items[k].t != T::Chunk) unsupported();
            const auto idx = static_cast<uint64_t>(items[k].i);
            if (k == 0) t.firstChunk = idx;
            if (idx != t.firstChunk + k) unsupported();
        }
        t.chunkCount = items.size();
        releaseContainer(*chunks);
        m_tensors.push_back(t);
        return made(T::Tensor, m_tensors.size() - 1);
    }

    /// MetadataIndex(fqn, offset, index): a storage_data key
    V buildIndex(const V& state, bool pinned)
    {
        expectFields(state, {"fqn", "offset", "index"});
        const V* fqn = dictGet(state, "fqn");
        const V* offset = dictGet(state, "offset");
        const V* index = dictGet(state, "index");
        if (!fqn || fqn->t != T::Str || (offset && offset->t != T::Size && offset->t != T::None)
            || (index && index->t != T::Int && index->t != T::None))
            unsupported();
        IndexRec r;
        r.pinned = pinned;
        r.fqn = *fqn;
        if (offset && offset->t == T::Size) {
            r.hasOffset = true;
            r.ndim = offset->a;
            r.offsetsAt = keepSize(*offset);
            releaseSize(*offset);
        }
        m_indexes.push_back(r);
        return made(T::Index, m_indexes.size() - 1);
    }

    /// _StorageInfo(relative_path, offset, length, transform_descriptors): where an item's bytes are
    V buildStorageInfo(const V& state, bool pinned)
    {
        expectFields(state, {"relative_path", "offset", "length", "transform_descriptors"});
        const V* rel = dictGet(state, "relative_path");
        const V* td = dictGet(state, "transform_descriptors");
        if (!rel || rel->t != T::Str) unsupported();
        InfoRec r;
        r.pinned = pinned;
        const int64_t off = intField(state, "offset");
        const int64_t len = intField(state, "length");
        if (off < 0 || len < 0) unsupported();
        r.offset = static_cast<uint64_t>(off);
        r.length = static_cast<uint64_t>(len);
        if (td && td->t != T::None) {
            if (td->t == T::List)
                r.transforms = !m_containers[td->a].items.empty();
            else if (td->t == T::Tuple)
                r.transforms = td->a > 0;
            else
                unsupported();
        }
        r.file = fileId(*rel);
        m_infos.push_back(r);
        return made(T::Info, m_infos.size() - 1);
    }

    uint32_t fileId(const V& s)
    {
        const std::string_view name = str(s);
        auto it = m_fileIds.find(name);
        if (it != m_fileIds.end()) return it->second;
        const uint32_t id = m_out.files->intern(std::string(name));
        m_fileIds.emplace(name, id);
        return id;
    }
    uint32_t fqnId(const V& s)
    {
        const std::string_view name = str(s);
        auto it = m_fqnIds.find(name);
        if (it != m_fqnIds.end()) return it->second;
        const auto id = static_cast<uint32_t>(m_out.storageFqns.size());
        m_out.storageFqns.emplace_back(name);
        m_fqnIds.emplace(name, id);
        return id;
    }

    void setItem(Container& c, const V& key, const V& value)
    {
        if (key.t == T::Index && value.t == T::Info) {
            // a storage_data entry: straight into the index
            if (!c.items.empty()) unsupported();
            const IndexRec& ix = m_indexes[static_cast<size_t>(key.i)];
            const InfoRec& in = m_infos[static_cast<size_t>(value.i)];
            DcpMetadata::Storage s;
            s.fqn = fqnId(ix.fqn);
            s.file = in.file;
            s.hasOffset = ix.hasOffset;
            s.hasTransforms = in.transforms;
            s.ndim = ix.ndim;
            s.offsetsAt = ix.offsetsAt;
            s.offset = in.offset;
            s.length = in.length;
            // one storage entry per chunk (and per bytes item): reserving spares 2.2M-entry tables their doublings
            if (m_out.storage.empty()) m_out.storage.reserve(m_out.chunks.size() + 1024);
            m_out.storage.push_back(s);
            c.storageDict = true;
            ++c.storagePairs;
            if (!key.pinned && key.i + 1 == static_cast<int64_t>(m_indexes.size())) m_indexes.pop_back();
            if (!value.pinned && value.i + 1 == static_cast<int64_t>(m_infos.size())) m_infos.pop_back();
            return;
        }
        if (c.storageDict) unsupported();
        if (m_progress.entriesFound && key.t == T::Str && value.t == T::Tensor) notePreview(key, value);
        c.items.push_back(key);
        c.items.push_back(value);
    }

    /// a state_dict_metadata key with its tensor's dtype and shape, for Progress::entriesFound
    void notePreview(const V& key, const V& value)
    {
        const TensorRec& t = m_tensors[static_cast<size_t>(value.i)];
        Entry e;
        e.key = std::string(str(key));
        e.path = {KeyPathElem::fromKey(e.key)};
        e.kind = EntryKind::Tensor;
        if (t.dtype >= 0) e.tensor->dtype = static_cast<DType>(t.dtype);
        if (t.hasShape)
            e.tensor->shape.assign(m_out.dims.begin() + static_cast<std::ptrdiff_t>(t.shapeAt),
                m_out.dims.begin() + static_cast<std::ptrdiff_t>(t.shapeAt + t.ndim));
        // a view sums numel and bytes over the keys: a hostile shape must not overflow there (the finished
        // checkpoint reports it as bad-shape)
        if (!shapeIsRepresentable(e.tensor->shape, dtypeSize(e.tensor->dtype))) e.tensor->shape.clear();
        m_preview.push_back(std::move(e));
    }
    void flushPreview()
    {
        if (m_preview.empty()) return;
        m_progress.entriesFound(std::move(m_preview));
        m_preview.clear();
    }

    void execute()
    {
        m_pos = 0;
        m_memoNext = 0;
        uint64_t nextProgress = 0;
        while (true) {
            if (m_pos >= nextProgress) {
                m_progress.checkCancelled();
                m_progress(0.9 * static_cast<double>(m_pos) / static_cast<double>(m_size), "reading metadata");
                flushPreview();
                // what lies behind is parsed: only the few strings kept (file names, fqns) are read again
                if (m_pos > (64u << 20)) m_file.release(0, m_pos - (1u << 20));
                nextProgress = m_pos + (8u << 20);
            }
            need(1);
            const uint8_t op = m_data[m_pos++];
            switch (groupOf(op)) {
            case OpGroup::Stack:
                stackOp(op);
                break;
            case OpGroup::Number:
                pushNumber(op);
                break;
            case OpGroup::Text:
                pushText(op);
                break;
            case OpGroup::Container:
                buildContainer(op);
                break;
            case OpGroup::Memo:
                memoOp(op);
                break;
            case OpGroup::Object:
                objectOp(op);
                break;
            case OpGroup::Stop: {
                if (m_stack.size() != 1 || m_stack[0].t != T::Meta || !m_marks.empty()) unsupported();
                flushPreview();
                finish();
                return;
            }
            case OpGroup::Unknown:
                unsupported();
            }
        }
    }

    /// the protocol and frame headers, MARK
    void stackOp(uint8_t op)
    {
        switch (op) {
        case PROTO:
            m_out.protocol = static_cast<int>(readUInt(1));
            break;
        case FRAME: // FRAME: only a hint, but one past the end means a cut file
            if (readUInt(8) > m_size - m_pos) unsupported();
            break;
        case MARK:
            m_marks.push_back(m_stack.size());
            break;
        default:
            unsupported(); // an opcode DCP's pickles never hold
        }
    }

    /// ints, booleans, None and floats (a float is never kept: DCP metadata holds none that matters)
    void pushNumber(uint8_t op)
    {
        switch (op) {
        case BININT: {
            V v;
            v.t = T::Int;
            v.i = static_cast<int32_t>(static_cast<uint32_t>(readUInt(4)));
            m_stack.push_back(v);
            break;
        }
        case BININT1:
        case BININT2: {
            V v;
            v.t = T::Int;
            v.i = static_cast<int64_t>(readUInt(op == 'K' ? 1 : 2));
            m_stack.push_back(v);
            break;
        }
        case LONG1: {
            const auto n = static_cast<unsigned>(readUInt(1));
            if (n > 8) unsupported();
            need(n);
            uint64_t u = 0;
            for (unsigned b = 0; b < n; ++b)
                u |= static_cast<uint64_t>(m_data[m_pos + b]) << (8 * b);
            if (n > 0 && n < 8 && (m_data[m_pos + n - 1] & 0x80)) u |= ~uint64_t(0) << (8 * n); // sign
            m_pos += n;
            V v;
            v.t = T::Int;
            v.i = static_cast<int64_t>(u);
            m_stack.push_back(v);
            break;
        }
        case NONE:
            m_stack.push_back(V {});
            break;
        case NEWTRUE:
        case NEWFALSE: {
            V v;
            v.t = T::Bool;
            v.i = op == NEWTRUE;
            m_stack.push_back(v);
            break;
        }
        case BINFLOAT: {
            readUInt(8);
            V v;
            v.t = T::Float;
            m_stack.push_back(v);
            break;
        }
        default:
            unsupported(); // an opcode DCP's pickles never hold
        }
    }

    /// str: kept as a position and length in the input
    void pushText(uint8_t op)
    {
        switch (op) {
        case SHORT_BINUNICODE:
        case BINUNICODE:
        case BINUNICODE8: {
            const uint64_t n = readUInt(op == SHORT_BINUNICODE ? 1 : op == 'X' ? 4 : 8);
            need(n);
            if (n > std::numeric_limits<uint32_t>::max()) unsupported();
            V v;
            v.t = T::Str;
            v.i = static_cast<int64_t>(m_pos);
            v.a = static_cast<uint32_t>(n);
            m_pos += n;
            m_stack.push_back(v);
            break;
        }
        default:
            unsupported(); // an opcode DCP's pickles never hold
        }
    }

    /// dicts, lists and tuples: made, or items added to the one under them (a storage_data batch consumed here)
    void buildContainer(uint8_t op)
    {
        switch (op) {
        case EMPTY_DICT:
        case EMPTY_LIST: {
            V v;
            v.t = op == '}' ? T::Dict : T::List;
            v.a = newContainer();
            m_stack.push_back(v);
            break;
        }
        case EMPTY_TUPLE:
        case TUPLE:
        case TUPLE1:
        case TUPLE2:
        case TUPLE3: {
            size_t n = op == ')' ? 0 : op == TUPLE1 ? 1 : op == TUPLE2 ? 2 : op == TUPLE3 ? 3 : 0;
            size_t from;
            if (op == 't') {
                from = popMark();
                n = m_stack.size() - from;
            } else {
                if (m_stack.size() < m_markFloor() + n) unsupported();
                from = m_stack.size() - n;
            }
            V v;
            v.t = T::Tuple;
            v.a = static_cast<uint32_t>(n);
            v.i = static_cast<int64_t>(m_tuples.size());
            m_tuples.insert(m_tuples.end(), m_stack.begin() + static_cast<std::ptrdiff_t>(from), m_stack.end());
            m_stack.resize(from);
            m_stack.push_back(v);
            break;
        }
        case SETITEM:
        case SETITEMS: {
            const size_t from = op == 'u' ? popMark() : m_stack.size() - 2;
            if (from < 1 || from > m_stack.size() || (m_stack.size() - from) % 2 != 0 || from < m_markFloor() + 1)
                unsupported();
            const V& d = m_stack[from - 1];
            if (d.t != T::Dict) unsupported();
            Container& c = m_containers[d.a];
            // the index and info records of a storage_data batch (pickle writes dicts 1,000 pairs at a time) are
            // consumed here; kept, they were 2.2M records, 140 MB at 1,024 ranks
            size_t firstIndex = m_indexes.size(), firstInfo = m_infos.size();
            for (size_t k = from; k < m_stack.size(); k += 2) {
                const V &key = m_stack[k], &value = m_stack[k + 1];
                if (key.t == T::Index && value.t == T::Info) {
                    firstIndex = std::min(firstIndex, static_cast<size_t>(key.i));
                    firstInfo = std::min(firstInfo, static_cast<size_t>(value.i));
                }
                setItem(c, key, value);
            }
            m_stack.resize(from);
            if (c.storageDict) {
                while (m_indexes.size() > firstIndex && !m_indexes.back().pinned)
                    m_indexes.pop_back();
                while (m_infos.size() > firstInfo && !m_infos.back().pinned)
                    m_infos.pop_back();
            }
            break;
        }
        case APPEND:
        case APPENDS: {
            const size_t from = op == 'e' ? popMark() : m_stack.size() - 1;
            if (from < 1 || from > m_stack.size() || from < m_markFloor() + 1) unsupported();
            const V& l = m_stack[from - 1];
            if (l.t != T::List) unsupported();
            auto& items = m_containers[l.a].items;
            items.insert(items.end(), m_stack.begin() + static_cast<std::ptrdiff_t>(from), m_stack.end());
            m_stack.resize(from);
            break;
        }
        default:
            unsupported(); // an opcode DCP's pickles never hold
        }
    }

    /// the memo: only entries scanMemoReads saw read back are kept
    void memoOp(uint8_t op)
    {
        switch (op) {
        case MEMOIZE:
        case BINPUT:
        case LONG_BINPUT: {
            const uint64_t idx = op == MEMOIZE ? m_memoNext++ : readUInt(op == 'q' ? 1 : 4);
            if (idx >= m_memoRead.size()) unsupported();
            if (m_memoRead[idx]) {
                V& v = top();
                if (v.t == T::Object) {
                    if (v.pinned) unsupported(); // memoized twice
                    v.i = static_cast<int64_t>(idx); // where BUILD puts the built value
                }
                v.pinned = true;
                m_memo[idx] = v;
            }
            break;
        }
        case BINGET:
        case LONG_BINGET: {
            const uint64_t idx = readUInt(op == 'h' ? 1 : 4);
            auto it = m_memo.find(idx);
            if (it == m_memo.end()) unsupported();
            m_stack.push_back(it->second);
            break;
        }
        default:
            unsupported(); // an opcode DCP's pickles never hold
        }
    }

    /// globals (the DCP classes, else the general reader), NEWOBJ and REDUCE of them, BUILD of their state
    void objectOp(uint8_t op)
    {
        switch (op) {
        case STACK_GLOBAL: {
            const V name = pop();
            const V module = pop();
            if (name.t != T::Str || module.t != T::Str) unsupported();
            pushGlobal(str(module), str(name));
            break;
        }
        case GLOBAL: {
            std::string_view lines[2];
            for (auto& line : lines) {
                const void* nl = std::memchr(m_data + m_pos, '\n', m_size - m_pos);
                if (!nl) unsupported();
                const auto end = static_cast<uint64_t>(static_cast<const uint8_t*>(nl) - m_data);
                line = {reinterpret_cast<const char*>(m_data) + m_pos, end - m_pos};
                m_pos = end + 1;
            }
            pushGlobal(lines[0], lines[1]);
            break;
        }
        case NEWOBJ: {
            const V args = pop();
            const V cls = pop();
            newObject(cls, args);
            break;
        }
        case REDUCE: {
            const V args = pop();
            const V callable = pop();
            reduce(callable, args);
            break;
        }
        case BUILD:
            build();
            break;
        default:
            unsupported(); // an opcode DCP's pickles never hold
        }
    }

    KeyPath plannerPath(const V& tuple) const
    {
        KeyPath path;
        if (tuple.t != T::Tuple && tuple.t != T::List) unsupported();
        const V* items = tuple.t == T::Tuple ? tupleItems(tuple) : m_containers[tuple.a].items.data();
        const size_t n = tuple.t == T::Tuple ? tuple.a : m_containers[tuple.a].items.size();
        for (size_t k = 0; k < n; ++k) {
            if (items[k].t == T::Int && items[k].i >= 0 && items[k].i <= KeyPathElem::kMaxIndex)
                path.push_back(KeyPathElem::fromIndex(items[k].i));
            else if (items[k].t == T::Int)
                path.push_back(KeyPathElem::fromKey(std::to_string(items[k].i)));
            else if (items[k].t == T::Str)
                path.push_back(KeyPathElem::fromKey(std::string(str(items[k]))));
            else
                unsupported(); // other key types: the general reader renders them
        }
        return path;
    }

    void finish()
    {
        const V* sdm = dictGet(m_meta, "state_dict_metadata");
        const V* planner = dictGet(m_meta, "planner_data");
        const V* storage = dictGet(m_meta, "storage_data");
        const V* version = dictGet(m_meta, "version");
        if (!sdm || sdm->t != T::Dict) unsupported();
        if (version && version->t == T::Str) m_out.version = std::string(str(*version));
        if (storage && storage->t == T::Dict) {
            const Container& c = m_containers[storage->a];
            if (!c.items.empty() || c.storagePairs != m_out.storage.size()) unsupported();
            m_out.hasStorageData = true;
        } else if (storage && storage->t != T::None) {
            unsupported();
        }
        std::unordered_map<std::string_view, const V*> paths;
        if (planner && planner->t == T::Dict) {
            const auto& items = m_containers[planner->a].items;
            for (size_t k = 0; k + 1 < items.size(); k += 2) {
                if (items[k].t != T::Str) unsupported();
                paths[str(items[k])] = &items[k + 1];
            }
        } else if (planner && planner->t != T::None) {
            unsupported();
        }
        const auto& items = m_containers[sdm->a].items;
        m_out.items.reserve(items.size() / 2);
        for (size_t k = 0; k + 1 < items.size(); k += 2) {
            const V& key = items[k];
            const V& md = items[k + 1];
            if (key.t != T::Str) unsupported();
            DcpMetadata::Item it;
            it.fqn = std::string(str(key));
            auto p = paths.find(str(key));
            if (p != paths.end() && p->second->t != T::None) it.path = plannerPath(*p->second);
            if (md.t == T::Tensor) {
                const TensorRec& t = m_tensors[static_cast<size_t>(md.i)];
                it.kind = DcpMetadata::ItemKind::Tensor;
                if (t.dtype >= 0) it.dtype = static_cast<DType>(t.dtype);
                it.shapeOk = t.hasShape;
                it.shape.assign(m_out.dims.begin() + static_cast<std::ptrdiff_t>(t.shapeAt),
                    m_out.dims.begin() + static_cast<std::ptrdiff_t>(t.shapeAt + t.ndim));
                it.firstChunk = t.firstChunk;
                it.chunkCount = t.chunkCount;
            } else if (md.t == T::Bytes) {
                it.kind = DcpMetadata::ItemKind::Bytes;
            } else {
                unsupported();
            }
            m_out.items.push_back(std::move(it));
        }
    }

    const ByteSource& m_file;
    const uint8_t* m_data;
    uint64_t m_size;
    uint64_t m_arrived; ///< the bytes before it are readable (a remote file's stream arrives while it is scanned)
    uint64_t m_pos = 0;
    const Progress& m_progress;
    std::vector<Entry> m_preview; ///< entries found since the last Progress::entriesFound
    std::vector<bool> m_memoRead;
    uint64_t m_memoNext = 0; ///< the index MEMOIZE stores at next (execute)
    std::unordered_map<uint64_t, V> m_memo;
    std::vector<V> m_stack;
    std::vector<size_t> m_marks;
    std::vector<V> m_tuples;
    std::vector<int64_t> m_ints;
    std::vector<Container> m_containers;
    std::vector<uint32_t> m_freeContainers;
    std::vector<TensorRec> m_tensors;
    std::vector<IndexRec> m_indexes;
    std::vector<InfoRec> m_infos;
    std::unordered_map<std::string_view, uint32_t> m_fileIds;
    std::unordered_map<std::string_view, uint32_t> m_fqnIds;
    V m_meta;
    DcpMetadata m_out;
};

} // namespace

std::optional<DcpMetadata> DcpMetadataReader::read(const ByteSource& file, const Progress& progress)
{
    try {
        Machine m(file, progress);
        return m.run();
    } catch (const Unsupported& u) {
        if (getenv("OPTSCOPE_TRACE_DCP")) fprintf(stderr, "dcp fast path: unsupported at line %d\n", u.line);
        return std::nullopt;
    }
}

namespace {

/// dataclass fields: BUILD {name: value} (or (dict, slots) for __slots__ classes)
const PyValue* field(const PyValue* obj, std::string_view name)
{
    if (!obj || obj->kind != PyKind::Object || !obj->object->state) return nullptr;
    const PyValue* st = obj->object->state;
    if (st->kind == PyKind::Dict) return st->get(name);
    if (st->kind == PyKind::Tuple)
        for (const auto* part : st->items())
            if (part->kind == PyKind::Dict)
                if (const auto* f = part->get(name)) return f;
    return nullptr;
}

bool classEndsWith(const PyValue* obj, std::string_view name)
{
    const std::string cls = obj ? obj->className() : std::string();
    return cls.size() > name.size() && cls.compare(cls.size() - name.size(), name.size(), name) == 0
        && cls[cls.size() - name.size() - 1] == '.';
}

bool intVector(const PyValue* v, std::vector<int64_t>& out)
{
    out.clear();
    if (!v || !v->isSequence()) return false;
    for (const auto* i : v->items()) {
        if (i->kind != PyKind::Int) return false;
        out.push_back(i->integer);
    }
    return true;
}

std::optional<DType> dtypeOfProperties(const PyValue* props)
{
    if (!props || props->kind != PyKind::Object || !props->object->state) return std::nullopt;
    const PyValue* st = props->object->state;
    const PyValue* dt = nullptr;
    if (st->kind == PyKind::Tuple && st->size() >= 1)
        dt = st->item(0); // __getstate__: (dtype, layout, requires_grad, memory_format, pin_memory)
    else if (st->kind == PyKind::Dict)
        dt = st->get("dtype");
    if (dt && dt->kind == PyKind::Dtype) return dt->dtype;
    return std::nullopt;
}

} // namespace

DcpMetadata DcpMetadataReader::fromGraph(const PyValue* md, const std::string& metaPath, int protocol)
{
    DcpMetadata out;
    out.protocol = protocol;
    if (!classEndsWith(md, "Metadata"))
        throw Error(ErrorKind::Format, metaPath, "does not hold a DCP Metadata object (found " + pyRepr(md, 80) + ")");
    const PyValue* sdm = field(md, "state_dict_metadata");
    const PyValue* planner = field(md, "planner_data");
    const PyValue* storageData = field(md, "storage_data");
    const PyValue* version = field(md, "version");
    if (!sdm || sdm->kind != PyKind::Dict)
        throw Error(ErrorKind::Format, metaPath, "Metadata has no state_dict_metadata dict");
    if (version && version->kind == PyKind::Str) out.version = std::string(version->text);

    std::unordered_map<std::string, uint32_t> fqnIds;
    if (storageData && storageData->kind == PyKind::Dict) {
        out.hasStorageData = true;
        for (size_t i = 0; i < storageData->size(); ++i) {
            const PyValue* index = storageData->dictKey(i);
            const PyValue* info = storageData->dictValue(i);
            const PyValue* fqn = field(index, "fqn");
            const PyValue* offset = field(index, "offset");
            const PyValue* rel = field(info, "relative_path");
            const PyValue* off = field(info, "offset");
            const PyValue* len = field(info, "length");
            if (!fqn || fqn->kind != PyKind::Str || !rel || rel->kind != PyKind::Str || !off || off->kind != PyKind::Int
                || !len || len->kind != PyKind::Int || off->integer < 0 || len->integer < 0) {
                out.storageErrors.push_back("storage_data entry " + std::to_string(i)
                    + " is malformed: " + pyRepr(index, 80) + " -> " + pyRepr(info, 120));
                continue;
            }
            DcpMetadata::Storage s;
            const std::string name(fqn->text);
            auto [it, added] = fqnIds.emplace(name, static_cast<uint32_t>(out.storageFqns.size()));
            if (added) out.storageFqns.push_back(name);
            s.fqn = it->second;
            s.file = out.files->intern(std::string(rel->text));
            s.offset = static_cast<uint64_t>(off->integer);
            s.length = static_cast<uint64_t>(len->integer);
            const PyValue* transforms = field(info, "transform_descriptors");
            s.hasTransforms = transforms && transforms->isSequence() && transforms->size() > 0;
            std::vector<int64_t> offs;
            s.hasOffset = offset && offset->kind != PyKind::None && intVector(offset, offs);
            if (s.hasOffset) {
                s.ndim = static_cast<uint32_t>(offs.size());
                s.offsetsAt = out.dims.size();
                out.dims.insert(out.dims.end(), offs.begin(), offs.end());
            }
            out.storage.push_back(s);
        }
    }

    out.items.reserve(sdm->size());
    for (size_t i = 0; i < sdm->size(); ++i) {
        const PyValue* keyValue = sdm->dictKey(i);
        const PyValue* smd = sdm->dictValue(i);
        DcpMetadata::Item it;
        if (keyValue->kind != PyKind::Str) {
            it.kind = DcpMetadata::ItemKind::Unknown;
            it.unknownText = "state_dict_metadata key is not a string: " + pyRepr(keyValue, 60);
            out.items.push_back(std::move(it));
            continue;
        }
        it.fqn = std::string(keyValue->text);
        const PyValue* p = planner && planner->kind == PyKind::Dict ? planner->get(it.fqn) : nullptr;
        if (p && p->isSequence() && p->size() > 0) {
            // a path repeating one long key string (shared through the memo) could take gigabytes: bound it first
            uint64_t pathBytes = 0;
            for (const auto* el : p->items())
                pathBytes += sizeof(KeyPathElem) + 2 * (2 * el->text.size() + 1024);
            if (pathBytes > kMaxKeyPathBytes)
                throw Error(ErrorKind::Limit, metaPath,
                    "planner_data path of '" + it.fqn.substr(0, 80) + "' would take more than "
                        + std::to_string(kMaxKeyPathBytes >> 20) + " MiB");
            for (const auto* el : p->items()) {
                if (el->kind == PyKind::Int && el->integer >= 0 && el->integer <= KeyPathElem::kMaxIndex)
                    it.path.push_back(KeyPathElem::fromIndex(el->integer));
                else
                    it.path.push_back(KeyPathElem::fromKey(pyStr(el)));
            }
        }
        if (classEndsWith(smd, "TensorStorageMetadata")) {
            it.kind = DcpMetadata::ItemKind::Tensor;
            it.dtype = dtypeOfProperties(field(smd, "properties"));
            it.shapeOk = intVector(field(smd, "size"), it.shape);
            const PyValue* chunks = field(smd, "chunks");
            it.firstChunk = out.chunks.size();
            for (const auto* ch : chunks ? chunks->items() : std::vector<PyValue*>()) {
                std::vector<int64_t> offsets, sizes;
                DcpMetadata::Chunk c;
                if (!intVector(field(ch, "offsets"), offsets) || !intVector(field(ch, "sizes"), sizes)
                    || offsets.size() != sizes.size()) {
                    c.ok = false;
                    out.chunkErrors.emplace_back(
                        out.chunks.size(), "chunk without readable offsets/sizes: " + pyRepr(ch, 80));
                } else {
                    c.ndim = static_cast<uint32_t>(offsets.size());
                    c.dimsAt = out.dims.size();
                    out.dims.insert(out.dims.end(), offsets.begin(), offsets.end());
                    out.dims.insert(out.dims.end(), sizes.begin(), sizes.end());
                }
                out.chunks.push_back(c);
            }
            it.chunkCount = out.chunks.size() - it.firstChunk;
        } else if (classEndsWith(smd, "BytesStorageMetadata")) {
            it.kind = DcpMetadata::ItemKind::Bytes;
        } else {
            it.kind = DcpMetadata::ItemKind::Unknown;
            it.value = smd;
            it.unknownText = "unknown storage metadata " + pyRepr(smd, 80);
        }
        out.items.push_back(std::move(it));
    }
    return out;
}

} // namespace optscope
