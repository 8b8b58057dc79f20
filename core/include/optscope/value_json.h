// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/py_value.h"

#include <nlohmann/json.hpp>

namespace optscope {

/// JSON rendering of an inert Python value, as `inspect --json` prints values:
/// None/bool/int/float/str as themselves (NaN and infinities as the strings "nan", "inf", "-inf"; integers beyond
/// 64 bits as decimal strings), tuples/lists/sets as arrays, dicts as objects with str(key) keys, dtypes as "float32",
/// bytes as {"__bytes__": hex}, tensors as {"__tensor__": {"dtype", "shape"}}, inert objects as
/// {"__class__": path, "args": [...], "state": ...}. Cycles and nesting beyond @p maxDepth render as "<...>".
nlohmann::ordered_json valueToJson(const PyValue* value, int maxDepth = 64);

} // namespace optscope
