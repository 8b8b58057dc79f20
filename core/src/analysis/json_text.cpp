// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/json_text.h"

namespace optscope {

std::string dumpedJson(const nlohmann::ordered_json& j)
{
    return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void writeIndented(std::ostream& out, const std::string& text, size_t spaces)
{
    const std::string pad(spaces, ' ');
    size_t from = 0;
    for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', from)) {
        out.write(text.data() + from, static_cast<std::streamsize>(nl + 1 - from));
        out << pad;
        from = nl + 1;
    }
    out.write(text.data() + from, static_cast<std::streamsize>(text.size() - from));
}

} // namespace optscope
