// SPDX-License-Identifier: GPL-3.0-or-later
#include "csv.h"

namespace optscope {

std::string CsvWriter::field(const std::string& value)
{
    if (value.find_first_of(",\"\n\r") == std::string::npos) return value;
    std::string out = "\"";
    for (char c : value) {
        if (c == '"') out += '"';
        out += c;
    }
    return out + "\"";
}

void CsvWriter::row(const std::vector<std::string>& fields)
{
    for (size_t i = 0; i < fields.size(); ++i)
        m_text += (i ? "," : "") + field(fields[i]);
    m_text += '\n';
}

} // namespace optscope
