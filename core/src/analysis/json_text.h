// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: JSON reports written part by part, as nlohmann's dump with indent 2 writes the whole: a report of a
// million rows is not first built as one document (about 650 bytes a row).

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace optscope {

/// the text every --json output is: indent 2, invalid UTF-8 replaced
std::string dumpedJson(const nlohmann::ordered_json& j);

/// @p text (a dumpedJson) placed @p spaces deeper, as it is inside an object or array: every line after the first
/// moved right
void writeIndented(std::ostream& out, const std::string& text, size_t spaces);

} // namespace optscope
