// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/py_value.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <vector>

namespace optscope {

/// JSON rendering of an inert Python value, as `inspect --json` prints values:
/// None/bool/int/float/str as themselves (NaN and infinities as the strings "nan", "inf", "-inf"; integers beyond
/// 64 bits as decimal strings), tuples/lists/sets as arrays, dicts as objects with str(key) keys, dtypes as "float32",
/// bytes as {"__bytes__": hex}, tensors as {"__tensor__": {"dtype", "shape"}}, inert objects as
/// {"__class__": path, "args": [...], "state": ...}. Cycles and nesting beyond @p maxDepth render as "<...>".
/// An object referenced from several places (shared through the pickle memo) renders at each of them, within a
/// budget of twice what rendering every reachable object once costs (a one-unit value with nothing inside, a number
/// or a short string, counted at each reference; plus 65536 values): past it, the rest renders as
/// "<...>". So a graph without sharing renders completely, and a small file cannot describe an exponentially large
/// rendering.
nlohmann::ordered_json valueToJson(const PyValue* value, int maxDepth = 64);

/// valueToJson of many values, one at a time, with one budget for all of them (many entries referencing one large
/// object would otherwise render it once per entry: quadratic in the file's size). One at a time, so that a caller
/// streaming a document holds one rendering, not a million (inspect --json of 1M values held 55 MB of them).
/// render() must be called with @p roots in their order: the budget is spent as the renderings go.
class ValueJsonRenderer
{
public:
    explicit ValueJsonRenderer(const std::vector<const PyValue*>& roots, int maxDepth = 64);
    ~ValueJsonRenderer();
    ValueJsonRenderer(ValueJsonRenderer&&) noexcept;
    ValueJsonRenderer& operator=(ValueJsonRenderer&&) noexcept;
    nlohmann::ordered_json render(const PyValue* value);
    struct State; ///< the budget left and the containers being rendered (value_json.cpp)

private:
    std::unique_ptr<State> m_state;
    int m_maxDepth;
};

} // namespace optscope
