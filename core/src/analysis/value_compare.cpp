// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/value_compare.h"
#include "optscope/io/byte_source.h"
#include "optscope/pickle/value_json.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace optscope {

namespace {

bool isNumber(const PyValue* v)
{
    return v->kind == PyKind::Int || v->kind == PyKind::BigInt || v->kind == PyKind::Float;
}

/// a pickled int of more than 64 bits (little-endian two's complement), as a long double: exact to 64 bits
long double bigIntValue(const PyValue* v)
{
    const std::string_view t = v->text;
    if (t.empty()) return 0;
    const bool negative = static_cast<unsigned char>(t.back()) & 0x80;
    long double x = 0;
    for (size_t i = t.size(); i-- > 0;) {
        const unsigned char byte = static_cast<unsigned char>(t[i]);
        x = x * 256 + (negative ? 255 - byte : byte);
    }
    return negative ? -(x + 1) : x;
}

long double numberValue(const PyValue* v)
{
    if (v->kind == PyKind::Int) return static_cast<long double>(v->integer);
    if (v->kind == PyKind::BigInt) return bigIntValue(v);
    return v->real;
}

class ValueComparer
{
public:
    ValueComparer(double rtol, double atol)
        : m_rtol(rtol)
        , m_atol(atol)
    { }

    /// the values' structure and numbers; their storages' bytes are left in storagePairs. Walked with a stack of its
    /// own, depth first in order, at any depth (a value nested 300 levels compared the data of tensors inside too)
    bool equal(const PyValue* a, const PyValue* b)
    {
        std::vector<Pair> todo {{a, b}};
        while (!todo.empty()) {
            const Pair p = todo.back();
            todo.pop_back();
            m_children.clear();
            if (!visit(p.first, p.second)) return false;
            todo.insert(todo.end(), m_children.rbegin(), m_children.rend());
        }
        return true;
    }

    /// compares @p a and @p b themselves; the pairs of values inside them to compare go to m_children, in order
    bool visit(const PyValue* a, const PyValue* b)
    {
        if (!a && !b) return true;
        if (!a || !b) return differ("values differ");
        if (!m_inProgress.insert({a, b}).second) return true; // a cycle (or a shared part) met again
        if (isNumber(a) && isNumber(b)) return numbersEqual(a, b) || differ("values differ");
        if (a->kind != b->kind || a->torchType != b->torchType)
            return differ(std::string("type ") + pyTypeName(a) + " -> " + pyTypeName(b));
        switch (a->kind) {
        case PyKind::None:
            return true;
        case PyKind::Bool:
            return a->boolean == b->boolean || differ("values differ");
        case PyKind::Complex:
            return (floatsEqual(a->real, b->real) && floatsEqual(a->imag, b->imag)) || differ("values differ");
        case PyKind::Str:
        case PyKind::Bytes:
        case PyKind::ByteArray:
            return a->text == b->text || differ("values differ");
        case PyKind::Dtype:
            return a->dtype == b->dtype || differ("values differ");
        case PyKind::Global:
            return a->className() == b->className() || differ("values differ");
        case PyKind::Tuple:
        case PyKind::List:
            if (a->size() != b->size()) return differ("lengths differ");
            for (size_t i = 0; i < a->size(); ++i)
                m_children.push_back({a->item(i), b->item(i)});
            return true;
        case PyKind::Dict:
            return dictsEqual(a, b);
        case PyKind::Set:
        case PyKind::FrozenSet:
            return itemTexts(a) == itemTexts(b) || differ("values differ");
        case PyKind::Object:
            return objectsEqual(a, b);
        case PyKind::Storage:
            if (!a->storage || !b->storage) return (!a->storage && !b->storage) || differ("values differ");
            if (a->storage->dtype != b->storage->dtype || a->storage->numel != b->storage->numel)
                return differ("a storage inside differs in dtype or size");
            storagePairs.push_back({a->storage, b->storage});
            return true;
        case PyKind::Tensor:
            return tensorsEqual(a, b);
        case PyKind::Int:
        case PyKind::BigInt:
        case PyKind::Float:
            break; // numbers: above
        }
        return valueToJson(a) == valueToJson(b) || differ("values differ");
    }

    std::string reason;
    bool partly = false; ///< tensors inside whose data could not be compared
    std::vector<std::pair<const PyStorageInfo*, const PyStorageInfo*>> storagePairs;
    /// tensors inside: the elements their views look at (the same layout on both sides), not their whole storages
    struct ViewPair
    {
        const PyStorageInfo* a;
        const PyStorageInfo* b;
        const PyTensorInfo* view;
    };
    std::vector<ViewPair> viewPairs;

private:
    bool differ(std::string why)
    {
        if (reason.empty()) reason = std::move(why);
        return false;
    }

    bool tolerant() const { return m_rtol > 0 || m_atol > 0; }

    bool floatsEqual(double a, double b) const
    {
        if (!tolerant()) return std::memcmp(&a, &b, sizeof a) == 0; // bits: -0.0 is not 0.0, a NaN only itself
        if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
        if (std::isinf(a) || std::isinf(b)) return a == b;
        return std::fabs(a - b) <= m_atol + m_rtol * std::fabs(b);
    }

    bool numbersEqual(const PyValue* a, const PyValue* b) const
    {
        if (a->kind == PyKind::Float && b->kind == PyKind::Float) return floatsEqual(a->real, b->real);
        if (a->kind == PyKind::Int && b->kind == PyKind::Int) {
            if (!tolerant()) return a->integer == b->integer;
            return floatsEqual(static_cast<double>(a->integer), static_cast<double>(b->integer));
        }
        const long double x = numberValue(a), y = numberValue(b);
        if (tolerant()) return floatsEqual(static_cast<double>(x), static_cast<double>(y));
        // ints past 64 bits are pickled in their one shortest form (and only those: an Int fits 64 bits)
        if (a->kind == PyKind::BigInt || b->kind == PyKind::BigInt)
            if (a->kind != PyKind::Float && b->kind != PyKind::Float) return a->kind == b->kind && a->text == b->text;
        // an int and a float: Python compares them exactly (a float that is no integer equals no int)
        return x == y && std::trunc(x) == x;
    }

    std::vector<std::string> itemTexts(const PyValue* v) const
    {
        std::vector<std::string> texts;
        for (const PyValue* i : v->items())
            texts.push_back(valueToJson(i).dump());
        std::sort(texts.begin(), texts.end());
        return texts;
    }

    bool dictsEqual(const PyValue* a, const PyValue* b)
    {
        if (a->size() != b->size()) return differ("keys differ");
        std::map<std::string, size_t> keysOfB;
        for (size_t i = 0; i < b->size(); ++i)
            keysOfB.emplace(valueToJson(b->dictKey(i)).dump(), i);
        for (size_t i = 0; i < a->size(); ++i) {
            const auto it = keysOfB.find(valueToJson(a->dictKey(i)).dump());
            if (it == keysOfB.end()) return differ("keys differ");
            m_children.push_back({a->dictValue(i), b->dictValue(it->second)});
        }
        return true;
    }

    bool objectsEqual(const PyValue* a, const PyValue* b)
    {
        if (!a->object || !b->object) return (!a->object && !b->object) || differ("values differ");
        const PyObjectInfo &x = *a->object, &y = *b->object;
        if (a->className() != b->className()) return differ("class " + a->className() + " -> " + b->className());
        if (x.listItems.size() != y.listItems.size() || x.dictItems.size() != y.dictItems.size())
            return differ("values differ");
        for (auto [p, q] :
            {std::pair {x.callable, y.callable}, {x.args, y.args}, {x.kwargs, y.kwargs}, {x.state, y.state}})
            m_children.push_back({p, q});
        for (size_t i = 0; i < x.listItems.size(); ++i)
            m_children.push_back({x.listItems[i], y.listItems[i]});
        for (size_t i = 0; i < x.dictItems.size(); ++i)
            m_children.push_back({x.dictItems[i], y.dictItems[i]});
        return true;
    }

    bool tensorsEqual(const PyValue* a, const PyValue* b)
    {
        if (!a->tensor || !b->tensor) return (!a->tensor && !b->tensor) || differ("values differ");
        const PyTensorInfo &x = *a->tensor, &y = *b->tensor;
        if (x.dtype != y.dtype) return differ("a tensor inside changes dtype");
        if (x.sizes != y.sizes) return differ("a tensor inside changes shape");
        if (x.strides != y.strides || x.storageOffset != y.storageOffset || x.subclass != y.subclass || x.conj != y.conj
            || x.neg != y.neg)
            return differ("a tensor inside is laid out differently");
        const PyValue *sx = x.storage, *sy = y.storage;
        if (sx && sy && sx->kind == PyKind::Storage && sy->kind == PyKind::Storage && sx->storage && sy->storage
            && sx->storage->dtype == sy->storage->dtype && dtypeSize(x.dtype) > 0) {
            // Python compares the tensors: what the views look at, whatever else their storages hold
            viewPairs.push_back({sx->storage, sy->storage, &x});
        } else {
            m_children.push_back({sx, sy});
        }
        const size_t shards = x.wrapper ? x.wrapper->shards.size() : 0;
        if (shards != (y.wrapper ? y.wrapper->shards.size() : 0))
            return differ("a tensor inside is sharded differently");
        for (size_t i = 0; i < shards; ++i)
            m_children.push_back({x.wrapper->shards[i].tensor, y.wrapper->shards[i].tensor});
        return true;
    }

    using Pair = std::pair<const PyValue*, const PyValue*>;
    std::vector<Pair> m_children; ///< what visit() found inside the pair it compared
    double m_rtol, m_atol;
    std::set<std::pair<const PyValue*, const PyValue*>> m_inProgress;
};

/// whether the bytes of two storages are the same, read in pieces from the files their values came from
bool sameBytes(const ByteSource& fa, const PyStorageInfo& a, const ByteSource& fb, const PyStorageInfo& b)
{
    if (a.recordLength != b.recordLength) return false;
    constexpr uint64_t kPiece = uint64_t(8) << 20;
    for (uint64_t at = 0; at < a.recordLength; at += kPiece) {
        const uint64_t n = std::min(kPiece, a.recordLength - at);
        if (std::memcmp(fa.bytes(a.recordOffset + at, n), fb.bytes(b.recordOffset + at, n), n) != 0) return false;
    }
    return true;
}

/// whether the elements a view looks at are the same in two storages (the same layout on both sides); nullopt when
/// the view cannot be walked within them (out of bounds, or far more elements than the storage holds: an odd
/// as_strided), where the whole storages are compared instead
std::optional<bool> sameViewBytes(const ByteSource& fa, const PyStorageInfo& a, const ByteSource& fb,
    const PyStorageInfo& b, const PyTensorInfo& view)
{
    const uint64_t elem = dtypeSize(view.dtype);
    if (view.sizes.size() != view.strides.size() || view.storageOffset < 0) return std::nullopt;
    // dimensions of one element, or of stride 0 (the same elements again), add nothing to compare
    std::vector<int64_t> sizes, strides;
    uint64_t count = 1, last = static_cast<uint64_t>(view.storageOffset);
    for (size_t d = 0; d < view.sizes.size(); ++d) {
        if (view.sizes[d] == 0) return true;
        if (view.sizes[d] < 0 || view.strides[d] < 0) return std::nullopt;
        if (view.sizes[d] == 1 || view.strides[d] == 0) continue;
        sizes.push_back(view.sizes[d]);
        strides.push_back(view.strides[d]);
        if (count > (uint64_t(1) << 40) / static_cast<uint64_t>(view.sizes[d])) return std::nullopt;
        count *= static_cast<uint64_t>(view.sizes[d]);
        last += static_cast<uint64_t>(view.sizes[d] - 1) * static_cast<uint64_t>(view.strides[d]);
    }
    const uint64_t held = std::min(a.recordLength, b.recordLength) / elem;
    if (last >= held || count > 4 * held + 1024) return std::nullopt;
    // innermost runs of consecutive elements are compared at once
    const bool contiguousRun = !strides.empty() && strides.back() == 1;
    const uint64_t run = contiguousRun ? static_cast<uint64_t>(sizes.back()) : 1;
    const size_t outer = contiguousRun ? sizes.size() - 1 : sizes.size();
    std::vector<int64_t> index(outer, 0);
    for (uint64_t done = 0; done < count; done += run) {
        uint64_t at = static_cast<uint64_t>(view.storageOffset);
        for (size_t d = 0; d < outer; ++d)
            at += static_cast<uint64_t>(index[d]) * static_cast<uint64_t>(strides[d]);
        if (std::memcmp(fa.bytes(a.recordOffset + at * elem, run * elem),
                fb.bytes(b.recordOffset + at * elem, run * elem), run * elem)
            != 0)
            return false;
        for (size_t d = outer; d-- > 0;) {
            if (++index[d] < sizes[d]) break;
            index[d] = 0;
        }
    }
    return true;
}

} // namespace

ValueComparison compareValueEntries(const Checkpoint& a, const Entry& entryA, const PyValue* valueA,
    const Checkpoint& b, const Entry& entryB, const PyValue* valueB, double rtol, double atol)
{
    ValueComparer c(rtol, atol);
    ValueComparison out;
    out.equal = c.equal(valueA, valueB);
    out.reason = c.reason;
    out.partly = c.partly;
    if (!out.equal || (c.storagePairs.empty() && c.viewPairs.empty())) return out;
    if (entryA.valueFile.empty() || entryB.valueFile.empty()) {
        out.reason = "the data of the tensors inside is not compared (where their bytes are is not known)";
        out.partly = true;
        return out;
    }
    const auto fileA = a.files->open(entryA.valueFile), fileB = b.files->open(entryB.valueFile);
    for (const auto& [sa, sb] : c.storagePairs) {
        if (!sa->located || !sb->located) {
            out.reason = "the data of a tensor inside is not compared (the archive does not hold it)";
            out.partly = true;
            continue;
        }
        if (!sameBytes(*fileA, *sa, *fileB, *sb)) {
            out.equal = false;
            out.reason = "the data of a tensor inside differs";
            return out;
        }
    }
    for (const auto& v : c.viewPairs) {
        if (!v.a->located || !v.b->located) {
            out.reason = "the data of a tensor inside is not compared (the archive does not hold it)";
            out.partly = true;
            continue;
        }
        const std::optional<bool> same = sameViewBytes(*fileA, *v.a, *fileB, *v.b, *v.view);
        if (!(same ? *same : v.a->recordLength == v.b->recordLength && sameBytes(*fileA, *v.a, *fileB, *v.b))) {
            out.equal = false;
            out.reason = "the data of a tensor inside differs";
            return out;
        }
    }
    return out;
}

} // namespace optscope
