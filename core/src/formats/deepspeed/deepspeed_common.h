// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: reading the inert values DeepSpeed pickles (ZeroStageEnum, torch.Size, param_shapes), shared by the ZeRO
// and universal checkpoint readers.

#include "optscope/base/error.h"
#include "optscope/model/checkpoint.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace optscope::deepspeed {

// ---- inert values
// ----------------------------------------------------------------------------------------------------

inline const PyValue* getKey(const PyValue* d, std::string_view key)
{
    return d && d->isMapping() ? d->get(key) : nullptr;
}

inline const PyValue* getIntKey(const PyValue* d, int64_t key)
{
    if (!d || !d->isMapping()) return nullptr;
    for (size_t i = 0; i < d->size(); ++i)
        if (d->dictKey(i)->kind == PyKind::Int && d->dictKey(i)->integer == key) return d->dictValue(i);
    return d->get(std::to_string(key));
}

inline std::optional<int64_t> asInt(const PyValue* v)
{
    if (v && v->kind == PyKind::Int) return v->integer;
    return std::nullopt;
}

/// torch.Size / tuple of non-negative ints
inline std::optional<std::vector<int64_t>> asShape(const PyValue* v)
{
    if (v && v->kind == PyKind::Object && v->object->args && v->object->args->size() == 1)
        v = v->object->args->item(0); // an uninterpreted torch.Size((..))
    if (!v || !v->isSequence()) return std::nullopt;
    std::vector<int64_t> s;
    for (const auto* d : v->items()) {
        if (d->kind != PyKind::Int || d->integer < 0) return std::nullopt;
        s.push_back(d->integer);
    }
    return s;
}

/// ZeroStageEnum, pickled by value (REDUCE(cls, (2,))) or by name (getattr(cls, 'gradients')), or a plain int
inline std::optional<int> zeroStageOf(const PyValue* v)
{
    if (!v) return std::nullopt;
    if (v->kind == PyKind::Int) return static_cast<int>(v->integer);
    if (v->kind != PyKind::Object || !v->object->args) return std::nullopt;
    for (const auto* a : v->object->args->items()) {
        if (a->kind == PyKind::Int) return static_cast<int>(a->integer);
        if (a->kind == PyKind::Str) {
            static const std::map<std::string, int> names
                = {{"disabled", 0}, {"optimizer_states", 1}, {"gradients", 2}, {"weights", 3}, {"max_stage", 3}};
            auto it = names.find(std::string(a->text));
            if (it != names.end()) return it->second;
        }
    }
    return std::nullopt;
}

inline int64_t numelOf(const std::vector<int64_t>& shape)
{
    int64_t n = 1;
    for (auto d : shape)
        n *= d;
    return n;
}

/// the element count of @p shape, or nullopt past 2^50 (a hostile shape must not overflow what is computed from it)
inline std::optional<int64_t> boundedNumel(const std::vector<int64_t>& shape)
{
    int64_t n = 1;
    for (auto d : shape) {
        if (d < 0 || (d != 0 && n > (int64_t(1) << 50) / d)) return std::nullopt;
        n *= d;
    }
    return n;
}

inline int64_t ceilDiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/// the parameters of one flat buffer, in flattening order
struct Member
{
    std::string fqn;
    std::vector<int64_t> shape;
    int64_t numel = 0;
};

inline std::vector<std::vector<Member>> readParamShapes(const PyValue* list, const std::string& where)
{
    std::vector<std::vector<Member>> groups;
    if (!list || !list->isSequence())
        throw Error(ErrorKind::Format, where, "has no param_shapes list (not a DeepSpeed model states file?)");
    for (const auto* g : list->items()) {
        if (!g->isMapping()) throw Error(ErrorKind::Format, where, "param_shapes holds " + pyRepr(g, 60));
        std::vector<Member> members;
        for (size_t i = 0; i < g->size(); ++i) {
            const PyValue* k = g->dictKey(i);
            auto shape = asShape(g->dictValue(i));
            if (k->kind != PyKind::Str || !shape)
                throw Error(ErrorKind::Format, where,
                    "param_shapes entry " + pyRepr(k, 60) + " -> " + pyRepr(g->dictValue(i), 60) + " is malformed");
            const auto n = boundedNumel(*shape);
            if (!n)
                throw Error(ErrorKind::Format, where,
                    "param_shapes entry '" + std::string(k->text) + "' has more than 2^50 elements");
            members.push_back({std::string(k->text), *shape, *n});
        }
        groups.push_back(std::move(members));
    }
    return groups;
}

} // namespace optscope::deepspeed
