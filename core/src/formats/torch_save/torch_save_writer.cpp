// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/base/error.h"
#include "optscope/base/look_ahead.h"
#include "optscope/io/job.h"
#include "optscope/io/output_file.h"
#include "optscope/io/remote_object.h"
#include "optscope/io/storage.h"
#include "optscope/io/zip_writer.h"
#include "optscope/pickle/pickle_emitter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

namespace optscope {

// ------------------------------------------------------------------------------------------------ pickling

namespace {

/// the typed storage class _rebuild_tensor_v2 names, for the dtypes PyTorch still saves so; empty: the dtype is saved
/// as PyTorch saves it, _rebuild_tensor_v3 over an UntypedStorage (complex32 too: torch has no ComplexHalfStorage, and
/// a file naming it loads nowhere)
std::string storageClassName(DType d)
{
    return d == DType::Complex32 ? std::string() : std::string(dtypeStorageClass(d));
}

/// whether this writer writes tensors of @p d (quantized ones need their scales, which it does not write)
bool writableDtype(DType d)
{
    return d != DType::Unknown && !dtypeIsQuantized(d);
}

class TreePickler
{
public:
    /// @p objects: write inert objects back as they were pickled (callable, arguments, state): for a DCP value,
    /// which DCP's loader unpickles with weights_only=False; a torch.save for weights_only=True loading refuses them
    /// @p probe: only to see whether it can be written (unwritableReason): a tensor inside a value needs no record
    TreePickler(const StateTree& tree, const std::string& where, bool objects = false, bool probe = false)
        : m_tree(tree)
        , m_where(where)
        , m_objects(objects)
        , m_probe(probe)
    { }

    std::string run()
    {
        node(m_tree.root(), 0);
        e.op(pickle_op::STOP);
        return std::move(e.out);
    }

    /// what the last unsupported() could not write ("a value of type complex"), for unwritableReason
    const std::string& unwritable() const { return m_unwritable; }

private:
    [[noreturn]] void unsupported(const std::string& what)
    {
        m_unwritable = what;
        throw Error(ErrorKind::Unsupported, m_where,
            "cannot write " + what
                + (m_objects ? " into a DCP value item" : " into a file that torch.load(weights_only=True) accepts"));
    }

    /// an inert object that a weights-only file cannot hold as it is: tensors torch rebuilds that this writer does
    /// not write yet, or a class outside what a weights-only load accepts
    static std::string unwritableObject(const PyValue& v)
    {
        const std::string cls = v.className();
        if (cls == "torch._utils._rebuild_sparse_tensor" || cls == "torch._utils._rebuild_sparse_csr_tensor")
            return "a sparse tensor of a form this writer does not write (torch.save calls "
                   "_rebuild_sparse_tensor(layout, (tensors..., size, ...)))";
        if (cls == "torch._utils._rebuild_qtensor")
            return "a quantized tensor of a form this writer does not write (torch.save calls "
                   "_rebuild_qtensor(storage, offset, size, stride, quantizer_params, ...))";
        if (cls == "torch._utils._rebuild_nested_tensor")
            return "a nested tensor (this writer does not write nested tensors yet)";
        if (cls == "torch.device" || cls == "torch.Size") // (well-formed ones are read as such: PyTorchType)
            return "a " + cls + " of arguments torch does not take (loading it raises)";
        return "an object of class '" + cls + "' (a weights-only load refuses classes outside its safe set)";
    }

    /// The torch rebuild calls a weights-only load makes (torch/_weights_only_unpickler.py): a sparse tensor is
    /// _rebuild_sparse_tensor(layout, (indices, values, size, ...)) over tensors of its own, a quantized one
    /// _rebuild_qtensor(storage, offset, size, stride, (qscheme, scale(s), zero point(s)[, axis]), ...) over its
    /// storage; written back as read, with those tensors and storages over their records (StateTree::addStorage)
    static bool isWeightsOnlyRebuild(const PyValue& v)
    {
        if (v.kind != PyKind::Object || !v.object->callable || v.object->how != PyObjectHow::Reduce || !v.object->args
            || v.object->args->kind != PyKind::Tuple || v.object->state || !v.object->listItems.empty()
            || !v.object->dictItems.empty())
            return false;
        const std::string cls = v.className();
        return cls == "torch._utils._rebuild_sparse_tensor" || cls == "torch._utils._rebuild_sparse_csr_tensor"
            || cls == "torch._utils._rebuild_qtensor";
    }

    /// the globals such a call names: the call itself and a tensor layout
    static bool isWeightsOnlyRebuildGlobal(const PyGlobalInfo& g)
    {
        static const std::set<std::string> names {"torch._utils._rebuild_sparse_tensor",
            "torch._utils._rebuild_sparse_csr_tensor", "torch._utils._rebuild_qtensor", "torch.sparse_coo",
            "torch.sparse_csr", "torch.sparse_csc", "torch.sparse_bsr", "torch.sparse_bsc", "torch.strided",
            "torch.per_tensor_affine", "torch.per_channel_affine", "torch.per_channel_affine_float_qparams",
            "torch.per_tensor_symmetric", "torch.per_channel_symmetric"};
        return names.count(g.path()) > 0;
    }

    void node(size_t i, int depth)
    {
        if (depth > 400) unsupported("a structure nested deeper than 400 levels");
        const StateTree::Node& n = m_tree.node(i);
        size_t k = 0; // the child's place among n's
        switch (n.kind) {
        case StateTree::Kind::None:
            e.op(pickle_op::NONE);
            return;
        case StateTree::Kind::Value:
            value(n.value, depth);
            return;
        case StateTree::Kind::Tensor:
            tensor(m_tree.tensors()[n.tensor], n.tensor);
            return;
        case StateTree::Kind::Dict:
            e.op(pickle_op::EMPTY_DICT);
            m_tree.forEachChild(n, [&](size_t c, const StateTree::Node& child) {
                if (k % 1000 == 0) e.mark();
                if (child.keyValue)
                    value(child.keyValue, depth + 1);
                else
                    e.str(child.key.view());
                node(c, depth + 1);
                if (k % 1000 == 999 || k + 1 == n.size) e.op(pickle_op::SETITEMS);
                ++k;
            });
            return;
        case StateTree::Kind::List:
            e.op(pickle_op::EMPTY_LIST);
            m_tree.forEachChild(n, [&](size_t c, const StateTree::Node&) {
                if (k % 1000 == 0) e.mark();
                node(c, depth + 1);
                if (k % 1000 == 999 || k + 1 == n.size) e.op(pickle_op::APPENDS);
                ++k;
            });
            return;
        case StateTree::Kind::Tuple:
            if (n.size > 3) e.mark();
            m_tree.forEachChild(n, [&](size_t c, const StateTree::Node&) { node(c, depth + 1); });
            e.tuple(n.size);
            return;
        }
    }

    /// values that a pickle memoises: containers, objects and strings; one reached again is a GET of the first
    static bool memoised(const PyValue* v)
    {
        switch (v->kind) {
        case PyKind::Str:
        case PyKind::Bytes:
            return v->text.size() >= 8; // shorter ones cost less written again than a memo entry
        case PyKind::Tuple:
        case PyKind::List:
        case PyKind::Set:
        case PyKind::FrozenSet:
        case PyKind::Dict:
        case PyKind::Object:
        case PyKind::Tensor: // (one tensor reached twice stays one tensor, as pickle keeps it)
            return true;
        default:
            return false;
        }
    }

    void value(const PyValue* v, int depth)
    {
        if (depth > 400) unsupported("a value nested deeper than 400 levels");
        const bool memo = memoised(v);
        if (memo) {
            if (const int64_t at = e.memoOf(v); at >= 0) {
                e.get(static_cast<uint32_t>(at));
                return;
            }
        }
        // a list or dict is memoised as soon as it exists (before its items, as pickle does: it may hold itself);
        // everything else once it is complete
        const bool early = v->kind == PyKind::List || v->kind == PyKind::Dict;
        valueUnmemoised(v, depth, memo && early);
        if (memo && !early && e.memoOf(v) < 0) e.putObject(v);
    }

    /// a str; torch's layouts and devices (kept as str by the reader) as torch pickles them
    void strValue(const PyValue& v)
    {
        if (v.torchType == PyTorchType::Layout) { // torch.serialization._get_layout(name)
            e.global("torch.serialization", "_get_layout");
            e.str(v.text);
            e.tuple(1);
            e.op(pickle_op::REDUCE);
            return;
        }
        if (v.torchType == PyTorchType::Device) { // torch.device(type[, index]), as its __reduce__ gives it
            // the reader made it "type" or "type:index" (index from an int); anything else goes back whole
            const std::string_view d = v.text;
            const size_t colon = d.rfind(':');
            const std::string_view digits = colon == std::string_view::npos ? "" : d.substr(colon + 1);
            const bool indexed = !digits.empty() && digits.size() <= 18
                && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
            e.global("torch", "device");
            e.str(indexed ? d.substr(0, colon) : d);
            if (indexed) e.integer(std::stoll(std::string(digits)));
            e.tuple(indexed ? 2 : 1);
            e.op(pickle_op::REDUCE);
            return;
        }
        e.str(v.text);
    }

    /// a tuple; torch.Size((2, 3)) as torch pickles it
    void tupleValue(const PyValue& v, int depth)
    {
        const bool size = v.torchType == PyTorchType::Size;
        if (size) e.global("torch", "Size");
        if (v.size() > 3) e.mark();
        for (const auto* c : v.items())
            value(c, depth + 1);
        e.tuple(v.size());
        if (size) {
            e.tuple(1);
            e.op(pickle_op::REDUCE);
        }
    }

    /// a list's (or a set's list's) items after its EMPTY_LIST: MARK, the items, APPENDS
    void appendedItems(const PyValue& v, int depth)
    {
        if (!v.size()) return;
        e.mark();
        for (const auto* c : v.items())
            value(c, depth + 1);
        e.op(pickle_op::APPENDS);
    }

    void valueUnmemoised(const PyValue* v, int depth, bool memoEarly)
    {
        switch (v->kind) {
        case PyKind::None:
            e.op(pickle_op::NONE);
            return;
        case PyKind::Bool:
            e.op(v->boolean ? pickle_op::NEWTRUE : pickle_op::NEWFALSE);
            return;
        case PyKind::Int:
            e.integer(v->integer);
            return;
        case PyKind::BigInt:
            e.longBytes(v->text);
            return;
        case PyKind::Float:
            e.floating(v->real);
            return;
        case PyKind::Str:
            strValue(*v);
            return;
        case PyKind::Complex: // as pickle's protocol 2: complex(real, imag)
            e.global("builtins", "complex");
            e.floating(v->real);
            e.floating(v->imag);
            e.tuple(2);
            e.op(pickle_op::REDUCE);
            return;
        case PyKind::Bytes:
            latin1Bytes(v->text);
            return;
        case PyKind::ByteArray: // as pickle's protocol 2: bytearray(bytes)
            e.global("builtins", "bytearray");
            latin1Bytes(v->text);
            e.tuple(1);
            e.op(pickle_op::REDUCE);
            return;
        case PyKind::Dtype:
            e.global("torch", std::string(dtypeName(v->dtype)));
            return;
        case PyKind::Tuple:
            tupleValue(*v, depth);
            return;
        case PyKind::List:
            e.op(pickle_op::EMPTY_LIST);
            if (memoEarly) e.putObject(v);
            appendedItems(*v, depth);
            return;
        case PyKind::FrozenSet: // (outside the weights-only set: a DCP value only, which loads with objects)
            if (!m_objects) unsupported("a value of type frozenset");
            [[fallthrough]];
        case PyKind::Set: // builtins.set([items]), as pickle's protocol 2 writes it
            e.global("builtins", v->kind == PyKind::Set ? "set" : "frozenset");
            e.op(pickle_op::EMPTY_LIST);
            appendedItems(*v, depth);
            e.tuple(1);
            e.op(pickle_op::REDUCE);
            return;
        case PyKind::Dict:
            e.op(pickle_op::EMPTY_DICT);
            if (memoEarly) e.putObject(v);
            if (v->size()) {
                e.mark();
                for (size_t k = 0; k < v->size(); ++k) {
                    value(v->dictKey(k), depth + 1);
                    value(v->dictValue(k), depth + 1);
                }
                e.op(pickle_op::SETITEMS);
            }
            return;
        case PyKind::Object: {
            const bool rebuild = isWeightsOnlyRebuild(*v);
            if (!m_objects && !rebuild) unsupported(unwritableObject(*v));
            m_insideRebuild += rebuild;
            object(*v, depth);
            m_insideRebuild -= rebuild;
            return;
        }
        case PyKind::Global:
            if (!m_objects && !(m_insideRebuild > 0 && isWeightsOnlyRebuildGlobal(*v->global)))
                unsupported("the class or function '" + v->global->path() + "'");
            e.global(std::string(v->global->module), std::string(v->global->name));
            return;
        case PyKind::Tensor:
            nestedTensor(*v);
            return;
        case PyKind::Storage:
            bareStorage(*v);
            return;
        default:
            unsupported(std::string("a value of type ") + pyKindName(v->kind));
        }
    }

    /// bytes as protocol 2 pickles them: _codecs.encode(their latin-1 text, "latin1")
    void latin1Bytes(std::string_view bytes)
    {
        std::string latin;
        for (char c : bytes) {
            const auto b = static_cast<uint8_t>(c);
            if (b < 0x80) {
                latin += c;
            } else {
                latin += static_cast<char>(0xc0 | (b >> 6));
                latin += static_cast<char>(0x80 | (b & 0x3f));
            }
        }
        e.global("_codecs", "encode");
        e.str(latin);
        e.str("latin1");
        e.tuple(2);
        e.op(pickle_op::REDUCE);
    }

    /// an inert object as the pickle that made it: callable and arguments (REDUCE, or NEWOBJ / NEWOBJ_EX for a class
    /// called through __new__), then the items appended or set on it and its BUILD state, as pickle's save_reduce
    /// writes them
    void object(const PyValue& v, int depth)
    {
        const PyObjectInfo& o = *v.object;
        if (!o.callable) unsupported("an object without the class that made it");
        value(o.callable, depth + 1);
        if (o.args && o.args->kind != PyKind::Tuple) unsupported("an object whose arguments are not a tuple");
        if (o.args)
            value(o.args, depth + 1);
        else
            e.tuple(0);
        if (o.how == PyObjectHow::NewObj && o.kwargs) {
            value(o.kwargs, depth + 1);
            e.op(pickle_op::NEWOBJ_EX); // NEWOBJ_EX
        } else {
            e.op(o.how == PyObjectHow::NewObj
                    ? pickle_op::NEWOBJ
                    : pickle_op::REDUCE); // INST calls the class with its arguments as REDUCE does
        }
        if (!o.listItems.empty()) {
            e.mark();
            for (const auto* item : o.listItems)
                value(item, depth + 1);
            e.op(pickle_op::APPENDS);
        }
        if (!o.dictItems.empty()) {
            e.mark();
            for (const auto* item : o.dictItems)
                value(item, depth + 1);
            e.op(pickle_op::SETITEMS);
        }
        if (o.state) {
            value(o.state, depth + 1);
            e.op(pickle_op::BUILD);
        }
    }

    /// a tensor inside a value (a DCP value item: dcp.save pickles a namedtuple whole, tensors and all), written
    /// as torch.save writes it: a view over its storage's record, which the tree holds (StateTree::addStorage)
    void nestedTensor(const PyValue& v)
    {
        if (!m_objects && m_insideRebuild == 0) unsupported("a tensor nested inside a plain value");
        if (const std::string why = TorchSaveWriter::nestedTensorUnwritable(&v); !why.empty()) unsupported(why);
        const PyTensorInfo& t = *v.tensor;
        const PyStorageInfo& storage = *t.storage->storage;
        int64_t record = m_tree.storageRecordOf(&storage);
        if (record < 0 && !m_probe) unsupported("a tensor inside a value whose storage's bytes were not given");
        TensorToWrite view;
        view.dtype = t.dtype;
        view.shape = t.sizes;
        view.strides = t.strides;
        view.storageElements = static_cast<int64_t>(storage.recordLength / dtypeSize(t.dtype));
        view.storageOffset = t.storageOffset;
        view.isParameter = t.isParameter;
        view.requiresGrad = t.requiresGrad;
        tensor(view, static_cast<size_t>(std::max<int64_t>(record, 0)));
    }

    /// a storage as a rebuild call's argument (a quantized tensor's): its persistent id over its record, which the
    /// tree holds (StateTree::addStorage)
    void bareStorage(const PyValue& v)
    {
        if (m_insideRebuild == 0 && !m_objects) unsupported("a value of type storage");
        const PyStorageInfo* storage = v.storage;
        const std::string cls = storage ? storageClassName(storage->dtype) : std::string();
        if (cls.empty() || storage->untyped) unsupported("a storage of a type this writer does not write");
        const int64_t record = m_tree.storageRecordOf(storage);
        if (record < 0 && !m_probe) unsupported("a storage inside a value whose bytes were not given");
        // persistent id ('storage', StorageClass, key, 'cpu', numel)
        e.mark();
        e.str("storage");
        e.global("torch", cls);
        e.str(std::to_string(std::max<int64_t>(record, 0)));
        e.str("cpu");
        e.integer(storage->numel);
        e.op(pickle_op::TUPLE);
        e.op(pickle_op::BINPERSID);
    }

    void tensor(const TensorToWrite& t, size_t index)
    {
        // storage k holds tensor k: records are written in tensor order, whatever order the pickle meets them in
        const std::string key = std::to_string(index);
        const std::string cls = storageClassName(t.dtype);
        const bool v3 = cls.empty();
        if (t.isParameter) e.global("torch._utils", "_rebuild_parameter");
        e.global("torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
        e.mark();
        // persistent id ('storage', StorageClass, key, 'cpu', numel)
        e.mark();
        e.str("storage");
        if (v3)
            e.global("torch.storage", "UntypedStorage");
        else
            e.global("torch", cls);
        e.str(key);
        e.str("cpu");
        const int64_t numel = t.storedNumel();
        e.integer(v3 ? numel * static_cast<int64_t>(dtypeSize(t.dtype)) : numel);
        e.op(pickle_op::TUPLE);
        e.op(pickle_op::BINPERSID);
        e.integer(t.storageOffset);
        if (t.shape.size() > 3) e.mark();
        for (auto s : t.shape)
            e.integer(s);
        e.tuple(t.shape.size());
        // a view's own strides, else contiguous strides as torch computes them (sizes of 0 count as 1)
        std::vector<int64_t> strides(t.shape.size(), 1);
        for (size_t d = t.shape.size(); d-- > 1;)
            strides[d - 1] = strides[d] * std::max<int64_t>(t.shape[d], 1);
        if (!t.strides.empty()) strides = t.strides;
        if (strides.size() > 3) e.mark();
        for (auto s : strides)
            e.integer(s);
        e.tuple(strides.size());
        e.op(t.requiresGrad && !t.isParameter ? pickle_op::NEWTRUE : pickle_op::NEWFALSE);
        e.global("collections", "OrderedDict");
        e.tuple(0);
        e.op(pickle_op::REDUCE);
        if (v3) e.global("torch", std::string(dtypeName(t.dtype)));
        e.op(pickle_op::TUPLE);
        e.op(pickle_op::REDUCE);
        if (t.isParameter) {
            e.op(t.requiresGrad ? pickle_op::NEWTRUE : pickle_op::NEWFALSE);
            e.global("collections", "OrderedDict");
            e.tuple(0);
            e.op(pickle_op::REDUCE);
            e.tuple(3);
            e.op(pickle_op::REDUCE);
        }
    }

    const StateTree& m_tree;
    std::string m_where;
    bool m_objects = false;
    bool m_probe = false;
    int m_insideRebuild = 0; ///< torch rebuild calls (isWeightsOnlyRebuild) being written
    std::string m_unwritable;
    PickleEmitter e;
};

bool isAscii(const std::string& s)
{
    for (char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    return true;
}

} // namespace

std::string TorchSaveWriter::nestedTensorUnwritable(const PyValue* value)
{
    const PyTensorInfo* t = value->tensor;
    if (!t) return "a tensor without its description";
    if (t->wrapper || !t->subclass.empty())
        return "a " + std::string(t->subclass.empty() ? "tensor subclass" : t->subclass)
            + " inside a value (this writer does not write sharded tensors inside values yet)";
    const PyValue* s = t->storage;
    if (!s || s->kind != PyKind::Storage || !s->storage || !s->storage->located)
        return "a tensor inside a value whose bytes the file does not hold";
    if (t->conj || t->neg) return "a tensor inside a value with a lazy conj or neg bit";
    if (!writableDtype(t->dtype)) return "a tensor of dtype " + std::string(dtypeName(t->dtype)) + " inside a value";
    const uint64_t elem = dtypeSize(t->dtype);
    if (elem == 0 || s->storage->recordLength % elem != 0)
        return "a tensor inside a value whose storage is not a whole number of its elements";
    // the view must lie inside its storage, as torch.load's set_ checks
    const auto held = static_cast<int64_t>(s->storage->recordLength / elem);
    if (t->sizes.size() != t->strides.size() || t->storageOffset < 0)
        return "a tensor inside a value laid out outside its storage";
    int64_t last = t->storageOffset;
    for (size_t d = 0; d < t->sizes.size(); ++d) {
        if (t->sizes[d] == 0) return {};
        int64_t step = 0;
        if (t->sizes[d] < 0 || t->strides[d] < 0 || __builtin_mul_overflow(t->sizes[d] - 1, t->strides[d], &step)
            || __builtin_add_overflow(last, step, &last))
            return "a tensor inside a value laid out outside its storage";
    }
    if (last >= held) return "a tensor inside a value laid out outside its storage";
    return {};
}

std::string TorchSaveWriter::unwritableReason(const PyValue* value, bool objects)
{
    StateTree tree;
    tree.setValue({KeyPathElem::fromKey("value")}, value);
    TreePickler pickler(tree, {}, objects, true);
    try {
        pickler.run();
        return {};
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::Unsupported) throw;
        return pickler.unwritable().empty() ? e.detail() : pickler.unwritable();
    }
}

std::string TorchSaveWriter::archivePrefix(const std::string& path)
{
    std::string stem = std::filesystem::path(path).filename().string();
    const auto dot = stem.rfind('.');
    if (dot != std::string::npos && dot > 0) stem = stem.substr(0, dot);
    if (stem.empty() || !isAscii(stem)) return "archive";
    return stem;
}

namespace {

void checkWritableDtypes(const StateTree& tree, const std::string& path)
{
    // tensor types must be representable before anything is written
    for (const auto& t : tree.tensors())
        if (!writableDtype(t.dtype))
            throw Error(ErrorKind::Unsupported, path,
                std::string("cannot write a tensor of dtype ") + std::string(dtypeName(t.dtype)));
}

uint64_t tensorBytes(const TensorToWrite& t)
{
    return static_cast<uint64_t>(t.storedNumel()) * dtypeSize(t.dtype);
}

/// asks for the tensors after the one being written (TensorToWrite::prefetch): those @p mine says this process writes
LookAhead lookAhead(const StateTree& tree, const std::function<bool(size_t)>& mine)
{
    return LookAhead(
        tree.tensors().size(),
        [&tree, mine](size_t k) { return mine(k) && tree.tensors()[k].prefetch ? tensorBytes(tree.tensors()[k]) : 0; },
        [&tree](size_t k) { tree.tensors()[k].prefetch(); });
}

/// tensor @p k's storage record: its bytes as its producer streams them, checked against its size; @p written is told
/// each block's size
void writeTensorRecord(ZipWriter& zip, const OutputFile& out, const std::string& prefix, size_t k,
    const TensorToWrite& t, const std::function<void(uint64_t)>& written)
{
    const uint64_t want = tensorBytes(t);
    zip.beginRecord(prefix + "/data/" + std::to_string(k));
    uint64_t got = 0;
    if (want > 0) {
        if (!t.produce)
            throw Error(ErrorKind::Usage, out.path(), "tensor " + std::to_string(k) + " has no data producer");
        const auto take = [&](uint64_t n) {
            if (got + n > want)
                throw Error(ErrorKind::Format, out.path(), "tensor " + std::to_string(k) + " produced too many bytes");
            got += n;
        };
        ByteSink sink;
        sink.bytes = [&](const uint8_t* p, size_t n) {
            take(n);
            zip.write(p, n);
            written(n);
        };
        sink.region = [&](const ByteSource& file, uint64_t offset, uint64_t length) {
            take(length);
            zip.writeFromFile(file, offset, length);
            written(length);
        };
        t.produce(sink);
    }
    if (got != want)
        throw Error(ErrorKind::Format, out.path(),
            "tensor " + std::to_string(k) + " produced " + std::to_string(got) + " of " + std::to_string(want)
                + " bytes");
    zip.endRecord();
}

} // namespace

WriteStats TorchSaveWriter::writeArchive(
    const StateTree& tree, OutputFile& out, const std::string& prefix, const Progress& progress, bool objects)
{
    checkWritableDtypes(tree, out.path());
    const std::string pickle = TreePickler(tree, out.path(), objects).run();

    uint64_t total = 0;
    for (const auto& t : tree.tensors())
        total += tensorBytes(t);

    ZipWriter zip(out, 64, out.position());
    zip.addRecord(prefix + "/data.pkl", pickle.data(), pickle.size());
    zip.addRecord(prefix + "/byteorder", "little", 6);
    WriteStats stats;
    uint64_t done = 0;
    LookAhead ahead = lookAhead(tree, [](size_t) { return true; });
    for (size_t k = 0; k < tree.tensors().size(); ++k) {
        progress.checkCancelled();
        ahead.before(k);
        writeTensorRecord(zip, out, prefix, k, tree.tensors()[k], [&](uint64_t n) {
            done += n;
            progress(total ? double(done) / double(total) : 1.0, "writing");
        });
        stats.tensorBytes += tensorBytes(tree.tensors()[k]);
    }
    stats.tensors = tree.tensors().size() - tree.storageRecords();
    zip.addRecord(prefix + "/version", "3\n", 2);
    zip.finish();
    stats.fileBytes = zip.size();
    return stats;
}

namespace {

/// An object written by a job is uploaded in shares, one run of records per process (OutputFile::beginShare), and
/// every share but the last must be OutputFile::kMinShareBytes long. A run shorter than that joins the run before
/// it (rank 0's run holds the archive's head, the pickle and byteorder records of @p headBytes); a short last run
/// joins the one before it, too. @p owner: tensor -> process, runs in order; @p span: tensor -> its record's bytes.
std::vector<int> joinShortRuns(
    const std::vector<int>& owner, const std::function<uint64_t(size_t)>& span, uint64_t headBytes, uint64_t minBytes)
{
    std::vector<int> joined(owner.size());
    int current = 0, previous = -1;
    uint64_t bytes = headBytes;
    size_t currentFirst = 0;
    for (size_t k = 0; k < owner.size(); ++k) {
        if (owner[k] != current && bytes >= minBytes) {
            previous = current;
            current = owner[k];
            currentFirst = k;
            bytes = 0;
        }
        joined[k] = current;
        bytes += span(k);
    }
    if (bytes < minBytes && previous >= 0)
        std::fill(joined.begin() + static_cast<std::ptrdiff_t>(currentFirst), joined.end(), previous);
    return joined;
}

/// one process's run of the archive's records [first, end) in the file's order
struct ArchiveShare
{
    int rank;
    size_t first;
    size_t end;
};

} // namespace

namespace {

/// The archive a job writes, as every process plans it alike: its records in the one-process order (pickle,
/// byteorder, tensors, version), where each lies, and which process writes which run of them
struct JobArchivePlan
{
    std::string path; ///< the output, as errors name it
    std::string prefix;
    std::string pickle;
    std::vector<std::string> names;
    std::vector<uint64_t> sizes;
    std::vector<uint64_t> offsets; ///< of each record, and the end of the last
    std::vector<int> owner; ///< tensor k's process
    std::vector<ArchiveShare> shares; ///< the runs in the file's order
    std::string fingerprint; ///< what every process must have planned alike
    bool upload = false;
    WriteStats stats;
};

JobArchivePlan planJobArchive(const StateTree& tree, const std::string& path, const Job& job)
{
    JobArchivePlan a;
    a.path = path;
    a.prefix = TorchSaveWriter::archivePrefix(path);
    a.pickle = TreePickler(tree, path).run();
    const size_t nTensors = tree.tensors().size();
    a.names = {a.prefix + "/data.pkl", a.prefix + "/byteorder"};
    a.sizes = {a.pickle.size(), 6};
    std::vector<uint64_t> weights;
    for (size_t k = 0; k < nTensors; ++k) {
        a.names.push_back(a.prefix + "/data/" + std::to_string(k));
        a.sizes.push_back(tensorBytes(tree.tensors()[k]));
        weights.push_back(a.sizes.back());
        a.stats.tensorBytes += a.sizes.back();
    }
    a.stats.tensors = nTensors - tree.storageRecords();
    a.names.push_back(a.prefix + "/version");
    a.sizes.push_back(2);
    a.offsets = {0};
    for (size_t i = 0; i < a.names.size(); ++i)
        a.offsets.push_back(a.offsets[i] + ZipWriter::recordSpan(a.names[i], a.offsets[i], a.sizes[i]));
    a.owner = splitContiguous(weights, job.size());
    a.upload = isUrl(path);
    if (a.upload)
        a.owner = joinShortRuns(
            a.owner, [&](size_t k) { return a.offsets[k + 3] - a.offsets[k + 2]; }, a.offsets[2],
            OutputFile::kMinShareBytes);
    // the last record (version) and the central directory are rank 0's, after the last run: with it when that is
    // rank 0's, else a share of their own
    const auto ownerOf = [&](size_t i) { return i < 2 || i + 1 == a.names.size() ? 0 : a.owner[i - 2]; };
    for (size_t i = 0; i < a.names.size(); ++i)
        if (a.shares.empty() || a.shares.back().rank != ownerOf(i))
            a.shares.push_back({ownerOf(i), i, i + 1});
        else
            a.shares.back().end = i + 1;
    a.fingerprint = std::to_string(a.names.size()) + " records, " + std::to_string(a.offsets.back()) + " bytes, pickle "
        + std::to_string(std::hash<std::string> {}(a.pickle));
    return a;
}

/// rank 0 starts the output (a temporary, an upload) once every process is here, where a failure is cleaned up:
/// rank 0 killed after it started the upload, the others find it and abort it (a process still reading the
/// checkpoint when rank 0 died left it open for ever); the others join it, having planned the same
std::unique_ptr<OutputFile> startJobOutput(
    Job& job, const std::string& path, const std::string& fingerprint, const WriteOptions& options)
{
    job.gather("torch-save-ready", {});
    if (job.isRoot()) {
        auto out = std::make_unique<OutputFile>(path, options);
        job.broadcast("torch-save-start", out->shareWithJob() + "\n" + fingerprint);
        return out;
    }
    const std::string start = job.broadcast("torch-save-start", {});
    const size_t nl = start.find('\n');
    if (nl == std::string::npos || start.substr(nl + 1) != fingerprint)
        throw Error(ErrorKind::Usage, path,
            "this process planned " + fingerprint + ", rank 0 "
                + (nl == std::string::npos ? std::string("nothing") : start.substr(nl + 1))
                + ": every process of the job must read the same checkpoint with the same options");
    return std::make_unique<OutputFile>(path, start.substr(0, nl), options);
}

/// this process's runs of records, each at its planned offset; returns the records it wrote, as zip.records()
/// lists them
std::vector<size_t> writeOwnShares(const JobArchivePlan& a, const StateTree& tree, ZipWriter& zip, OutputFile& out,
    const Job& job, const Progress& progress, const std::function<bool()>& cancelled, JobProgress& written)
{
    std::vector<size_t> mine;
    const auto writeRecord = [&](size_t i, const std::function<void()>& body) {
        progress.checkCancelled();
        if (cancelled()) throw Error(ErrorKind::Cancelled, a.path, "cancelled");
        out.seek(a.offsets[i]);
        body();
        mine.push_back(i);
        if (out.position() != a.offsets[i + 1])
            throw Error(ErrorKind::Format, a.path, "record '" + a.names[i] + "' did not end where it was planned to");
    };
    LookAhead ahead = lookAhead(tree, [&](size_t k) { return a.owner[k] == job.rank(); });
    for (size_t s = 0; s < a.shares.size(); ++s) {
        if (a.shares[s].rank != job.rank()) continue;
        const bool last = s + 1 == a.shares.size();
        out.beginShare(a.offsets[a.shares[s].first], s, a.shares.size(),
            last ? 0 : a.offsets[a.shares[s].end] - a.offsets[a.shares[s].first]);
        for (size_t i = a.shares[s].first; i < a.shares[s].end; ++i) {
            if (i == 0)
                writeRecord(0, [&] { zip.addRecord(a.names[0], a.pickle.data(), a.pickle.size()); });
            else if (i == 1)
                writeRecord(1, [&] { zip.addRecord(a.names[1], "little", 6); });
            else if (i + 1 == a.names.size())
                writeRecord(i, [&] { zip.addRecord(a.names[i], "3\n", 2); });
            else {
                const size_t k = i - 2;
                ahead.before(k);
                writeRecord(i, [&] {
                    writeTensorRecord(zip, out, a.prefix, k, tree.tensors()[k], [&](uint64_t n) { written.add(n); });
                });
            }
        }
    }
    return mine;
}

/// rank 0: every other process's records (index, CRC-32 pairs in @p parts) and upload parts listed with its own,
/// each checked to be the sender's and every record written once; then the central directory, and the file
/// published
void finishJobArchive(const JobArchivePlan& a, ZipWriter& zip, OutputFile& out, const std::vector<size_t>& mine,
    const std::vector<std::string>& parts, const std::vector<std::string>& uploaded, WriteStats& stats)
{
    std::vector<bool> listed(a.names.size(), false);
    for (const size_t i : mine)
        listed[i] = true;
    for (size_t p = 1; p < parts.size(); ++p) {
        const std::vector<uint64_t> w = wordsFromPayload(parts[p]);
        std::vector<ZipWriter::Record> theirs;
        for (size_t at = 0; at + 1 < w.size(); at += 2) {
            const uint64_t i = w[at];
            if (i < 2 || i + 1 >= a.names.size() || a.owner[i - 2] != static_cast<int>(p) || listed[i])
                throw Error(
                    ErrorKind::Format, a.path, "rank " + std::to_string(p) + " reported a record it does not own");
            listed[i] = true;
            theirs.push_back({a.names[i], a.offsets[i], a.sizes[i], static_cast<uint32_t>(w[at + 1])});
        }
        zip.addWrittenRecords(theirs);
        if (a.upload) out.addPartsWritten(uploaded[p]);
    }
    if (std::find(listed.begin(), listed.end(), false) != listed.end())
        throw Error(ErrorKind::Format, a.path, "a record of the archive was written by no process");
    out.seek(a.offsets.back());
    zip.finish();
    stats.fileBytes = zip.size();
    out.commit();
}

} // namespace

/// The archive written by the processes of a job into one output, byte-identical to one process's: every record's
/// offset follows from the names and sizes (ZipWriter::recordSpan), so each process writes its run of records at
/// their offsets, then says what it wrote (the CRCs). Rank 0 writes the pickle and the small records with its run
/// and, once every process is done, the central directory, and publishes the output. A file: every process writes
/// into rank 0's temporary (a shared file system), which rank 0 renames. An object: every process streams its run
/// as its share of rank 0's multipart upload (its own parts), which rank 0 completes with every process's parts.
static WriteStats writeArchiveAsJob(
    const StateTree& tree, const std::string& path, const Progress& progress, const WriteOptions& options)
{
    Job& job = Job::current();
    checkWritableDtypes(tree, path);
    JobArchivePlan a = planJobArchive(tree, path, job);
    WriteOptions inner = options;
    inner.beforeCommit = nullptr; // asked once, below, by every process for what it read
    inner.cancelled = [&] { return progress.isCancelled() || job.failed(); };
    const CancelScope cancelScope(inner.cancelled); // a read stalled on a server ends too
    std::unique_ptr<OutputFile> out;
    try {
        out = startJobOutput(job, path, a.fingerprint, inner);
        ZipWriter zip(*out, 64, 0);
        JobProgress written(job, "torch-save-bytes", a.stats.tensorBytes, progress, "writing");
        const std::vector<size_t> mine = writeOwnShares(a, tree, zip, *out, job, progress, inner.cancelled, written);
        written.flush();
        if (!job.isRoot()) out->commit(); // flushed and synced: rank 0 publishes the file
        if (options.beforeCommit) options.beforeCommit(); // what this process read did not change meanwhile

        // rank 0 learns every record's CRC-32, lists them all and publishes the file
        std::vector<uint64_t> part;
        for (size_t j = 0; j < mine.size(); ++j) {
            part.push_back(mine[j]);
            part.push_back(zip.records()[j].crc);
        }
        const std::vector<std::string> parts
            = job.gather("torch-save-records", wordsToPayload(part), [&] { written.showTotal(); });
        // an object: the parts of the upload each process sent
        const std::vector<std::string> uploaded
            = a.upload ? job.gather("torch-save-parts", out->partsWritten()) : std::vector<std::string>();
        if (!job.isRoot()) {
            job.broadcast("torch-save-commit", {}); // throws unless rank 0 published the file
            return a.stats;
        }
        finishJobArchive(a, zip, *out, mine, parts, uploaded, a.stats);
        job.broadcast("torch-save-commit", {});
        progress(1.0, "writing");
        return a.stats;
    } catch (const Error& e) {
        job.reportFailure(e.what()); // the other processes stop now, not at the next gather
        // rank 0 gone (killed): the temporary it made is left to us
        if (out && job.rootLost()) out->abandonJoined();
        // rank 0 gone before it said which upload it started: the object's open uploads are found by listing
        if (!out && a.upload && job.rootLost()) abortUploadsUnder(path);
        // a process stopped because another failed says so, naming that process
        if (job.failed() && e.kind() == ErrorKind::Cancelled && !progress.isCancelled())
            throw Error(ErrorKind::Io, path, "stopped: " + job.failure());
        throw;
    }
}

WriteStats TorchSaveWriter::write(
    const StateTree& tree, const std::string& path, const Progress& progress, WriteOptions options)
{
    if (!options.cancelled) options.cancelled = progress.cancelled; // asked again just before the rename
    if (Job::current().distributed()) return writeArchiveAsJob(tree, path, progress, options);
    OutputFile out(path, options);
    WriteStats stats = writeArchive(tree, out, archivePrefix(path), progress);
    out.commit();
    progress(1.0, "writing");
    return stats;
}

} // namespace optscope
