// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/value_json.h"

#include <cmath>
#include <unordered_set>

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
    if (bytes.size() > max)
        out += "...";
    return out;
}

nlohmann::ordered_json toJson(const PyValue* v, int depth, std::unordered_set<const PyValue*>& active)
{
    using json = nlohmann::ordered_json;
    if (!v)
        return nullptr;
    if (depth <= 0 || active.count(v))
        return "<...>";
    switch (v->kind) {
    case PyKind::None: return nullptr;
    case PyKind::Bool: return v->boolean;
    case PyKind::Int: return v->integer;
    case PyKind::BigInt: return bigIntToDecimal(v->text);
    case PyKind::Float:
        if (!std::isfinite(v->real))
            return pyFloatRepr(v->real);
        return v->real;
    case PyKind::Complex: return json {{"real", v->real}, {"imag", v->imag}};
    case PyKind::Str: return std::string(v->text);
    case PyKind::Bytes: return json {{"__bytes__", hexOf(v->text)}};
    case PyKind::ByteArray: return json {{"__bytearray__", hexOf(v->text)}};
    case PyKind::Dtype: return std::string(dtypeName(v->dtype));
    case PyKind::Global: return json {{"__global__", v->global->path()}};
    case PyKind::Storage: return json {{"__storage__", std::string(v->storage->key)}};
    case PyKind::Tensor: {
        json t {{"dtype", std::string(dtypeName(v->tensor->dtype))}, {"shape", v->tensor->sizes}};
        return json {{"__tensor__", t}};
    }
    default: break;
    }
    active.insert(v);
    json out;
    if (v->kind == PyKind::Dict) {
        out = json::object();
        for (size_t i = 0; i < v->size(); ++i)
            out[pyStr(v->dictKey(i))] = toJson(v->dictValue(i), depth - 1, active);
    } else if (v->kind == PyKind::Object) {
        const auto& o = *v->object;
        out = json::object();
        const std::string cls = v->className();
        out["__class__"] = cls.empty() ? toJson(o.callable, depth - 1, active) : json(cls);
        if (o.args && o.args->size())
            out["args"] = toJson(o.args, depth - 1, active);
        if (o.kwargs && o.kwargs->size())
            out["kwargs"] = toJson(o.kwargs, depth - 1, active);
        if (o.state)
            out["state"] = toJson(o.state, depth - 1, active);
        if (!o.listItems.empty()) {
            json items = json::array();
            for (const auto* i : o.listItems)
                items.push_back(toJson(i, depth - 1, active));
            out["items"] = std::move(items);
        }
        if (!o.dictItems.empty()) {
            json items = json::object();
            for (size_t i = 0; i + 1 < o.dictItems.size(); i += 2)
                items[pyStr(o.dictItems[i])] = toJson(o.dictItems[i + 1], depth - 1, active);
            out["dict"] = std::move(items);
        }
    } else {
        out = json::array();
        for (const auto* i : v->items())
            out.push_back(toJson(i, depth - 1, active));
    }
    active.erase(v);
    return out;
}

} // namespace

nlohmann::ordered_json valueToJson(const PyValue* value, int maxDepth)
{
    std::unordered_set<const PyValue*> active;
    return toJson(value, maxDepth, active);
}

} // namespace optscope
