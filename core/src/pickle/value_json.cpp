// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/pickle/value_json.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace optscope {

namespace {

std::string hexOf(std::string_view bytes, size_t max = 4096)
{
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < bytes.size() && i < max; ++i) {
        const auto b = static_cast<uint8_t>(bytes[i]);
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    if (bytes.size() > max) out += "...";
    return out;
}

/// What rendering one value costs: one unit, plus one per 64 bytes of text it copies (per byte for big integers:
/// their decimal conversion is quadratic, up to 4300 digits).
size_t cost(const PyValue* v)
{
    switch (v->kind) {
    case PyKind::Str:
    case PyKind::Bytes:
    case PyKind::ByteArray:
        return 1 + v->text.size() / 64;
    case PyKind::BigInt:
        return 1 + v->text.size();
    default:
        return 1;
    }
}

/// The budget of a rendering: twice what rendering every object reachable from @p roots once costs (a one-unit value
/// with nothing inside: at each reference), plus 65536.
/// Objects shared through the pickle memo render at each reference, so a few bytes can describe a rendering of
/// exponential (or, over many entries, quadratic) size; a graph without sharing always fits.
size_t renderBudget(const std::vector<const PyValue*>& roots)
{
    // a value of one unit with nothing inside (a number, None, a short string) is counted at each reference, as it
    // renders: looking it up would cost more than it saves (a million plain values' entries kept 25 MB of set), and
    // references are bounded by the file's size; anything larger or with contents is counted once
    auto leaf = [](const PyValue* v) { return cost(v) == 1 && v->kind != PyKind::Object && !v->hasContainer(); };
    std::unordered_set<const PyValue*> seen;
    std::vector<const PyValue*> stack;
    size_t total = 0;
    auto visit = [&](const PyValue* v) {
        if (leaf(v))
            ++total;
        else if (seen.insert(v).second)
            stack.push_back(v);
    };
    for (const auto* r : roots)
        if (r) visit(r);
    while (!stack.empty()) {
        const PyValue* v = stack.back();
        stack.pop_back();
        total += cost(v);
        forEachChild(v, visit);
    }
    return 2 * total + (size_t(1) << 16);
}

/// Adds key: value to a JSON object in constant time. nlohmann's ordered_map looks keys up linearly, which made
/// rendering a dict quadratic in its size; str(key) can repeat (1 and '1'), and then the last value wins, as before.
class ObjectBuilder
{
public:
    explicit ObjectBuilder(nlohmann::ordered_json& object)
        : m_items(object.get_ref<nlohmann::ordered_json::object_t&>())
    { }
    void set(std::string key, nlohmann::ordered_json value)
    {
        auto [it, inserted] = m_index.emplace(key, m_items.size());
        if (inserted)
            m_items.Container::emplace_back(std::move(key), std::move(value));
        else
            m_items.Container::operator[](it->second).second = std::move(value);
    }

private:
    nlohmann::ordered_json::object_t& m_items;
    std::unordered_map<std::string, size_t> m_index;
};

} // namespace

struct ValueJsonRenderer::State
{
    std::unordered_set<const PyValue*> active; ///< containers being rendered: a cycle back to one is "<...>"
    size_t budget = 0;
};

namespace {

using Render = ValueJsonRenderer::State;

nlohmann::ordered_json toJson(const PyValue* v, int depth, Render& r)
{
    using json = nlohmann::ordered_json;
    if (!v) return nullptr;
    if (depth <= 0 || r.active.count(v) || r.budget < cost(v)) return "<...>";
    r.budget -= cost(v);
    switch (v->kind) {
    case PyKind::None:
        return nullptr;
    case PyKind::Bool:
        return v->boolean;
    case PyKind::Int:
        return v->integer;
    case PyKind::BigInt:
        return bigIntToDecimal(v->text);
    case PyKind::Float:
        if (!std::isfinite(v->real)) return pyFloatRepr(v->real);
        return v->real;
    case PyKind::Complex: { // a part that is not finite as a float's is ("nan", "inf"): JSON has no such number
        const auto part = [](double x) { return std::isfinite(x) ? json(x) : json(pyFloatRepr(x)); };
        return json {{"real", part(v->real)}, {"imag", part(v->imag)}};
    }
    case PyKind::Str:
        return std::string(v->text);
    case PyKind::Bytes:
        return json {{"__bytes__", hexOf(v->text)}};
    case PyKind::ByteArray:
        return json {{"__bytearray__", hexOf(v->text)}};
    case PyKind::Dtype:
        return std::string(dtypeName(v->dtype));
    case PyKind::Global:
        return json {{"__global__", v->global->path()}};
    case PyKind::Storage:
        return json {{"__storage__", std::string(v->storage->key)}};
    case PyKind::Tensor: {
        json t {{"dtype", std::string(dtypeName(v->tensor->dtype))}, {"shape", v->tensor->sizes}};
        return json {{"__tensor__", t}};
    }
    default:
        break;
    }
    // dict keys render through str(key), which copies their text: long ones are charged for it (short ones are free:
    // the same interned key string, 'step' or 'exp_avg', is shared by every state dict of a checkpoint)
    auto key = [&](const PyValue* k) {
        const size_t c = cost(k) - 1;
        r.budget -= std::min(r.budget, c);
        return pyStr(k);
    };
    r.active.insert(v);
    json out;
    if (v->kind == PyKind::Dict) {
        out = json::object();
        ObjectBuilder members(out);
        for (size_t i = 0; i < v->size(); ++i)
            members.set(key(v->dictKey(i)), toJson(v->dictValue(i), depth - 1, r));
    } else if (v->kind == PyKind::Object) {
        const auto& o = *v->object;
        out = json::object();
        const std::string cls = v->className();
        out["__class__"] = cls.empty() ? toJson(o.callable, depth - 1, r) : json(cls);
        if (o.args && o.args->size()) out["args"] = toJson(o.args, depth - 1, r);
        if (o.kwargs && o.kwargs->size()) out["kwargs"] = toJson(o.kwargs, depth - 1, r);
        if (o.state) out["state"] = toJson(o.state, depth - 1, r);
        if (!o.listItems.empty()) {
            json items = json::array();
            for (const auto* i : o.listItems)
                items.push_back(toJson(i, depth - 1, r));
            out["items"] = std::move(items);
        }
        if (!o.dictItems.empty()) {
            json items = json::object();
            ObjectBuilder members(items);
            for (size_t i = 0; i + 1 < o.dictItems.size(); i += 2)
                members.set(key(o.dictItems[i]), toJson(o.dictItems[i + 1], depth - 1, r));
            out["dict"] = std::move(items);
        }
    } else {
        out = json::array();
        for (const auto* i : v->items())
            out.push_back(toJson(i, depth - 1, r));
    }
    r.active.erase(v);
    return out;
}

} // namespace

nlohmann::ordered_json valueToJson(const PyValue* value, int maxDepth)
{
    Render r;
    r.budget = renderBudget({value});
    return toJson(value, maxDepth, r);
}

ValueJsonRenderer::ValueJsonRenderer(const std::vector<const PyValue*>& roots, int maxDepth)
    : m_state(std::make_unique<State>())
    , m_maxDepth(maxDepth)
{
    m_state->budget = renderBudget(roots);
}

ValueJsonRenderer::~ValueJsonRenderer() = default;
ValueJsonRenderer::ValueJsonRenderer(ValueJsonRenderer&&) noexcept = default;
ValueJsonRenderer& ValueJsonRenderer::operator=(ValueJsonRenderer&&) noexcept = default;

nlohmann::ordered_json ValueJsonRenderer::render(const PyValue* value)
{
    return toJson(value, m_maxDepth, *m_state);
}

} // namespace optscope
