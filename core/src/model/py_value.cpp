// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/py_value.h"

#include "optscope/model/dict_index.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace optscope {

// A torch.save of 100k tensors makes about 300k values: the 100 MiB target for it (bench/results/limits.md) rests on
// these sizes, so growing one is a decision, not an accident
static_assert(sizeof(void*) != 8 || sizeof(PyValue) <= 40, "PyValue grew past 40 bytes");
static_assert(sizeof(void*) != 8 || sizeof(PyTensorInfo) <= 96, "PyTensorInfo grew past 96 bytes");
static_assert(sizeof(void*) != 8 || sizeof(PyStorageInfo) <= 64, "PyStorageInfo grew past 64 bytes");

const char* pyKindName(PyKind kind)
{
    switch (kind) {
    case PyKind::None:
        return "None";
    case PyKind::Bool:
        return "bool";
    case PyKind::Int:
        return "int";
    case PyKind::BigInt:
        return "int";
    case PyKind::Float:
        return "float";
    case PyKind::Complex:
        return "complex";
    case PyKind::Str:
        return "str";
    case PyKind::Bytes:
        return "bytes";
    case PyKind::ByteArray:
        return "bytearray";
    case PyKind::Tuple:
        return "tuple";
    case PyKind::List:
        return "list";
    case PyKind::Dict:
        return "dict";
    case PyKind::Set:
        return "set";
    case PyKind::FrozenSet:
        return "frozenset";
    case PyKind::Global:
        return "global";
    case PyKind::Object:
        return "object";
    case PyKind::Storage:
        return "storage";
    case PyKind::Tensor:
        return "tensor";
    case PyKind::Dtype:
        return "dtype";
    }
    return "?";
}

namespace {
const std::vector<PyValue*> kNoItems;
}

const std::vector<PyValue*>& PyValue::items() const
{
    return hasContainer() ? container->items : kNoItems;
}

size_t PyValue::size() const
{
    if (!hasContainer()) return 0;
    return kind == PyKind::Dict ? container->items.size() / 2 : container->items.size();
}

const PyValue* PyValue::get(std::string_view key) const
{
    if (kind != PyKind::Dict || !container) return nullptr;
    const auto& it = container->items;
    if (container->index && key.size() + 16 <= kMaxDictKeyRenderingBytes) {
        // an indexed dict (one the pickle machine grew past 16 items) has every str key of this length in its index,
        // rendered as 's' <length> ':' <text> (a linear scan made DCP's planner_data lookups quadratic)
        std::string h = "s" + std::to_string(key.size()) + ":";
        h.append(key);
        const size_t found = container->index->find(
            DictIndex::hashOf(h), [&](size_t at) { return it[at]->kind == PyKind::Str && it[at]->text == key; });
        return found == DictIndex::npos ? nullptr : it[found + 1];
    }
    for (size_t i = 0; i + 1 < it.size(); i += 2) {
        if (it[i]->kind == PyKind::Str && it[i]->text == key) return it[i + 1];
    }
    return nullptr;
}

bool LocatedStorageReach::holds(const PyValue* value)
{
    if (!value) return false;
    // a leaf (a number, a string, a storage) is answered on its own, not remembered: a dict of a million numbers
    // made a million memo nodes (80 bytes each; 160 MB in a diff of two such files)
    const auto leafHolds
        = [](const PyValue* v) { return v->kind == PyKind::Storage && v->storage && v->storage->located; };
    if (!mayHaveChildren(value)) return leafHolds(value);
    if (auto known = m_nodes.find(value); known != m_nodes.end()) return known->second.result;
    struct Frame
    {
        const PyValue* value;
        Node* node;
        size_t nextChild, childrenStart;
    };
    std::vector<Frame> frames;
    std::vector<const PyValue*> children; ///< the children of every open frame, each frame's after its parent's
    std::vector<Node*> component; ///< Tarjan's stack
    auto enter = [&](const PyValue* v) {
        Node& n = m_nodes[v];
        n.index = n.low = m_next++;
        n.onStack = true;
        n.result = v->kind == PyKind::Storage && v->storage && v->storage->located;
        component.push_back(&n);
        const size_t start = children.size();
        forEachChild(v, [&](const PyValue* c) {
            if (c) children.push_back(c);
        });
        frames.push_back({v, &n, start, start});
    };
    enter(value);
    while (!frames.empty()) {
        Frame& f = frames.back();
        if (f.nextChild < children.size()) { // the top frame's children end the vector
            const PyValue* c = children[f.nextChild++];
            if (!mayHaveChildren(c)) {
                f.node->result = f.node->result || leafHolds(c);
                continue;
            }
            auto known = m_nodes.find(c);
            if (known == m_nodes.end()) {
                enter(c);
                continue;
            }
            const Node& cn = known->second;
            if (cn.onStack) f.node->low = std::min(f.node->low, cn.index);
            f.node->result = f.node->result || cn.result;
            continue;
        }
        Node* n = f.node;
        children.resize(f.childrenStart);
        frames.pop_back();
        if (n->low == n->index) {
            // n roots a component: all of it reaches what any of it reaches
            size_t first = component.size();
            bool result = false;
            do {
                --first;
                result = result || component[first]->result;
            } while (component[first] != n);
            for (size_t i = first; i < component.size(); ++i) {
                component[i]->result = result;
                component[i]->onStack = false;
            }
            component.resize(first);
        }
        if (!frames.empty()) {
            Node* parent = frames.back().node;
            parent->low = std::min(parent->low, n->low);
            parent->result = parent->result || n->result;
        }
    }
    return m_nodes[value].result;
}

std::string PyValue::className() const
{
    const PyValue* c = nullptr;
    if (kind == PyKind::Object && object)
        c = object->callable;
    else if (kind == PyKind::Global)
        c = this;
    if (c && c->kind == PyKind::Global && c->global) return c->global->path();
    return {};
}

bool PyValue::isClass(std::string_view path) const
{
    const PyValue* c = nullptr;
    if (kind == PyKind::Object && object)
        c = object->callable;
    else if (kind == PyKind::Global)
        c = this;
    if (!c || c->kind != PyKind::Global || !c->global) return false;
    const auto& g = *c->global;
    return path.size() == g.module.size() + 1 + g.name.size() && path.substr(0, g.module.size()) == g.module
        && path[g.module.size()] == '.' && path.substr(g.module.size() + 1) == g.name;
}

PyValue* PyArena::make(PyKind kind)
{
    PyValue* v = nullptr;
    if (!m_freeValues.empty()) {
        v = m_freeValues.back();
        m_freeValues.pop_back();
    } else {
        v = &m_values.emplace_back();
    }
    v->kind = kind;
    return v;
}

const char* pyTypeName(const PyValue* v)
{
    if (v->torchType == PyTorchType::Size) return "torch.Size";
    if (v->torchType == PyTorchType::Device) return "torch.device";
    if (v->torchType == PyTorchType::Layout) return "torch.layout";
    return pyKindName(v->kind);
}

PyValue* PyArena::makeContainer(PyKind kind)
{
    PyValue* v = make(kind);
    if (!m_freeContainers.empty()) {
        v->container = m_freeContainers.back();
        m_freeContainers.pop_back();
    } else {
        v->container = &m_containers.emplace_back();
    }
    return v;
}

void PyArena::release(PyValue* v, int depth)
{
    if (!v || v->pinned) return;
    switch (v->kind) {
    case PyKind::Tuple:
    case PyKind::List:
    case PyKind::Dict:
    case PyKind::Set:
    case PyKind::FrozenSet: {
        if (depth >= 32) return; // deeper parts stay allocated: bounded recursion on hostile nesting
        PyContainer* c = v->container;
        for (PyValue* item : c->items)
            release(item, depth + 1);
        release(c->attrs, depth + 1);
        c->items.clear(); // keeps the capacity for the next tuple
        c->attrs = nullptr;
        c->index.reset();
        m_freeContainers.push_back(c);
        break;
    }
    case PyKind::Int:
    case PyKind::BigInt:
    case PyKind::Float:
    case PyKind::Complex:
    case PyKind::Str:
    case PyKind::Bytes:
    case PyKind::ByteArray:
        break; // text points into the input or into m_strings, which stay
    default:
        return; // None and bools are interned (pinned); the other kinds are pointed at by records
    }
    *v = PyValue {};
    m_freeValues.push_back(v);
}

PyValue* PyArena::makeInt(int64_t i)
{
    const bool small = i >= kSmallIntMin && i <= kSmallIntMax;
    if (small) {
        if (m_smallInts.empty()) m_smallInts.resize(static_cast<size_t>(kSmallIntMax - kSmallIntMin + 1), nullptr);
        if (PyValue* shared = m_smallInts[static_cast<size_t>(i - kSmallIntMin)]) return shared;
    }
    PyValue* v = make(PyKind::Int);
    if (small) {
        m_smallInts[static_cast<size_t>(i - kSmallIntMin)] = v;
        v->pinned = true;
    }
    v->integer = i;
    return v;
}

PyValue* PyArena::makeFloat(double d)
{
    PyValue* v = make(PyKind::Float);
    v->real = d;
    return v;
}

PyValue* PyArena::makeBool(bool b)
{
    PyValue*& shared = m_bools[b ? 1 : 0];
    if (!shared) {
        shared = make(PyKind::Bool);
        shared->boolean = b;
        shared->pinned = true;
    }
    return shared;
}

PyValue* PyArena::makeNone()
{
    if (!m_none) {
        m_none = make(PyKind::None);
        m_none->pinned = true;
    }
    return m_none;
}

std::string_view PyArena::copy(std::string_view s)
{
    return m_strings.emplace_back(s);
}

PyValue* PyArena::makeStr(std::string_view s, bool copyText)
{
    PyValue* v = make(PyKind::Str);
    v->text = copyText ? copy(s) : s;
    return v;
}

PyValue* PyArena::makeBytes(std::string_view s, bool copyText, PyKind kind)
{
    PyValue* v = make(kind);
    v->text = copyText ? copy(s) : s;
    return v;
}

PyValue* PyArena::makeGlobal(std::string_view module, std::string_view name, bool known)
{
    PyValue* v = make(PyKind::Global);
    PyGlobalInfo& g = m_globals.emplace_back();
    g.module = module;
    g.name = name;
    g.known = known;
    v->global = &g;
    return v;
}

PyObjectInfo* PyArena::makeObjectInfo()
{
    return &m_objects.emplace_back();
}

PyStorageInfo* PyArena::makeStorageInfo()
{
    return &m_storages.emplace_back();
}

PyTensorWrapperInfo& PyArena::wrapperOf(PyTensorInfo& t)
{
    if (!t.wrapper) t.wrapper = &m_tensorWrappers.emplace_back();
    return *t.wrapper;
}

PyTensorInfo* PyArena::makeTensorInfo()
{
    return &m_tensors.emplace_back();
}

std::string pyFloatRepr(double v)
{
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    // Python's repr: the shortest digits that round-trip (std::to_chars gives exactly those), written positionally
    // for 1e-4 <= |v| < 1e16, else as d.ddde+XX (at least two exponent digits). Before: %.*g tried precision 1 to
    // 17 with a strtod each (40x slower: half of inspecting a long trainer_state log), and 17-digit values at or above
    // 1e16 came out positional ("13787319205155662.0"; Python: "1.3787319205155662e+16")
    char sci[48];
    char* const end = std::to_chars(sci, sci + sizeof sci - 1, v, std::chars_format::scientific).ptr;
    *end = '\0';
    const char* p = sci;
    std::string out;
    if (*p == '-') {
        out += '-';
        ++p;
    }
    const char* e = std::find(p, static_cast<const char*>(end), 'e');
    std::string digits;
    for (const char* q = p; q < e; ++q)
        if (*q != '.') digits += *q;
    const int exponent = std::atoi(e + 1);
    if (exponent >= -4 && exponent < 16) {
        if (exponent < 0) {
            out += "0.";
            out.append(static_cast<size_t>(-exponent - 1), '0');
            out += digits;
        } else {
            const size_t whole = static_cast<size_t>(exponent) + 1;
            if (digits.size() <= whole) {
                out += digits;
                out.append(whole - digits.size(), '0');
                out += ".0";
            } else {
                out.append(digits, 0, whole);
                out += '.';
                out.append(digits, whole, std::string::npos);
            }
        }
        return out;
    }
    out += digits[0];
    if (digits.size() > 1) {
        out += '.';
        out.append(digits, 1, std::string::npos);
    }
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
}

std::string bigIntToDecimal(std::string_view le)
{
    if (le.empty()) return "0";
    std::vector<uint8_t> mag(le.begin(), le.end());
    const bool negative = (mag.back() & 0x80) != 0;
    if (negative) { // two's complement -> magnitude
        bool carry = true;
        for (auto& b : mag) {
            b = static_cast<uint8_t>(~b);
            if (carry) {
                b = static_cast<uint8_t>(b + 1);
                carry = b == 0;
            }
        }
    }
    // Decimal conversion is quadratic in the length: like CPython's str(int) (sys.int_info.default_max_str_digits),
    // stop at 4300 digits (1786 bytes of magnitude cover them all) and write longer integers in hexadecimal, which
    // is linear. Values shared through the pickle memo may be rendered many times.
    constexpr size_t kMaxDecimalBytes = 1786;
    while (mag.size() > 1 && mag.back() == 0)
        mag.pop_back();
    if (mag.size() > kMaxDecimalBytes) {
        static const char* digits = "0123456789abcdef";
        std::string hex = negative ? "-0x" : "0x";
        bool leading = true;
        for (size_t i = mag.size(); i-- > 0;) {
            for (int shift : {4, 0}) {
                const int d = (mag[i] >> shift) & 15;
                if (leading && d == 0) continue;
                leading = false;
                hex += digits[d];
            }
        }
        return hex;
    }
    // Repeated division by 10^9 over little-endian 32-bit limbs: nine digits per pass over the number.
    std::vector<uint32_t> limbs((mag.size() + 3) / 4, 0);
    for (size_t i = 0; i < mag.size(); ++i)
        limbs[i / 4] |= static_cast<uint32_t>(mag[i]) << (8 * (i % 4));
    while (!limbs.empty() && limbs.back() == 0)
        limbs.pop_back();
    std::string digits; // least significant first
    while (!limbs.empty()) {
        uint64_t rem = 0;
        for (size_t i = limbs.size(); i-- > 0;) {
            const uint64_t cur = (rem << 32) | limbs[i];
            limbs[i] = static_cast<uint32_t>(cur / 1000000000u);
            rem = cur % 1000000000u;
        }
        while (!limbs.empty() && limbs.back() == 0)
            limbs.pop_back();
        // nine digits per group, except that the most significant group has no leading zeros
        for (int k = 0; k < 9 && (!limbs.empty() || rem != 0); ++k) {
            digits.push_back(static_cast<char>('0' + rem % 10));
            rem /= 10;
        }
    }
    if (digits.empty()) digits = "0";
    if (negative) digits.push_back('-');
    return std::string(digits.rbegin(), digits.rend());
}

namespace {

void appendQuoted(std::string& out, std::string_view s)
{
    out += '\'';
    for (char c : s) {
        if (c == '\'' || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    out += '\'';
}

void reprInto(std::string& out, const PyValue* v, size_t maxLength, int depth);

/// a str as Python shows it, torch's layouts and devices (kept as str) as theirs: torch.sparse_coo,
/// device(type='cuda', index=0)
void strReprInto(std::string& out, const PyValue* v)
{
    if (v->torchType == PyTorchType::Layout) {
        out += v->text;
        return;
    }
    if (v->torchType == PyTorchType::Device) {
        const std::string_view d = v->text;
        const size_t colon = d.find(':');
        out += "device(type=";
        appendQuoted(out, d.substr(0, colon));
        if (colon != std::string_view::npos) out += ", index=" + std::string(d.substr(colon + 1));
        out += ")";
        return;
    }
    appendQuoted(out, v->text);
}

/// a tuple, list, set, frozenset or torch.Size([2, 3]), cut with "..." past @p maxLength
void sequenceReprInto(std::string& out, const PyValue* v, size_t maxLength, int depth)
{
    const bool size = v->torchType == PyTorchType::Size;
    const char* open = size ? "[" : v->kind == PyKind::Tuple ? "(" : v->kind == PyKind::List ? "[" : "{";
    const char* close = size ? "]" : v->kind == PyKind::Tuple ? ")" : v->kind == PyKind::List ? "]" : "}";
    if (v->kind == PyKind::FrozenSet) out += "frozenset(";
    if (size) out += "torch.Size(";
    out += open;
    const auto& items = v->items();
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        if (out.size() > maxLength) {
            out += "...";
            break;
        }
        reprInto(out, items[i], maxLength, depth + 1);
    }
    if (v->kind == PyKind::Tuple && items.size() == 1 && !size) out += ",";
    out += close;
    if (v->kind == PyKind::FrozenSet || size) out += ")";
}

void dictReprInto(std::string& out, const PyValue* v, size_t maxLength, int depth)
{
    out += "{";
    for (size_t i = 0; i < v->size(); ++i) {
        if (i) out += ", ";
        if (out.size() > maxLength) {
            out += "...";
            break;
        }
        reprInto(out, v->dictKey(i), maxLength, depth + 1);
        out += ": ";
        reprInto(out, v->dictValue(i), maxLength, depth + 1);
    }
    out += "}";
}

void reprInto(std::string& out, const PyValue* v, size_t maxLength, int depth)
{
    if (out.size() > maxLength) return;
    if (!v) {
        out += "<null>";
        return;
    }
    if (depth > 32) {
        out += "...";
        return;
    }
    switch (v->kind) {
    case PyKind::None:
        out += "None";
        return;
    case PyKind::Bool:
        out += v->boolean ? "True" : "False";
        return;
    case PyKind::Int:
        out += std::to_string(v->integer);
        return;
    case PyKind::BigInt:
        out += bigIntToDecimal(v->text);
        return;
    case PyKind::Float:
        out += pyFloatRepr(v->real);
        return;
    case PyKind::Complex:
        out += "(" + pyFloatRepr(v->real) + "+" + pyFloatRepr(v->imag) + "j)";
        return;
    case PyKind::Str:
        strReprInto(out, v);
        return;
    case PyKind::Bytes:
    case PyKind::ByteArray:
        out += v->kind == PyKind::Bytes ? "b" : "bytearray(b";
        out += "<" + std::to_string(v->text.size()) + " bytes>";
        if (v->kind == PyKind::ByteArray) out += ")";
        return;
    case PyKind::Tuple:
    case PyKind::List:
    case PyKind::Set:
    case PyKind::FrozenSet:
        sequenceReprInto(out, v, maxLength, depth);
        return;
    case PyKind::Dict:
        dictReprInto(out, v, maxLength, depth);
        return;
    case PyKind::Global:
        out += "<" + v->global->path() + ">";
        return;
    case PyKind::Object: {
        std::string cls = v->className();
        out += "<" + (cls.empty() ? std::string("object") : cls);
        if (v->object->args && v->object->args->size()) {
            out += " ";
            reprInto(out, v->object->args, maxLength, depth + 1);
        }
        out += ">";
        return;
    }
    case PyKind::Storage:
        out += "<storage " + std::string(v->storage->key) + ">";
        return;
    case PyKind::Tensor: {
        out += "tensor(";
        out += dtypeName(v->tensor->dtype);
        out += ", [";
        for (size_t i = 0; i < v->tensor->sizes.size(); ++i)
            out += (i ? ", " : "") + std::to_string(v->tensor->sizes[i]);
        out += "])";
        return;
    }
    case PyKind::Dtype:
        out += "torch." + std::string(dtypeName(v->dtype));
        return;
    }
}

} // namespace

std::string pyRepr(const PyValue* v, size_t maxLength)
{
    std::string out;
    reprInto(out, v, maxLength, 0);
    if (out.size() > maxLength + 3) out = out.substr(0, maxLength) + "...";
    return out;
}

std::string pyStr(const PyValue* v)
{
    if (!v) return "None";
    switch (v->kind) {
    case PyKind::Str:
        return std::string(v->text);
    case PyKind::Int:
        return std::to_string(v->integer);
    case PyKind::BigInt:
        return bigIntToDecimal(v->text);
    case PyKind::Bool:
        return v->boolean ? "True" : "False";
    case PyKind::None:
        return "None";
    case PyKind::Float:
        return pyFloatRepr(v->real);
    default:
        return pyRepr(v, 1000);
    }
}

} // namespace optscope
