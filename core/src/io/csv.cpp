// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/csv.h"

#include <cerrno>
#include <cstdlib>
#include <ostream>
#include <string_view>

namespace optscope {

namespace {

/// a cell a spreadsheet would run as a formula: it starts with = + - @, a tab or a carriage return (OWASP's list)
/// and is not simply a number ("-0.5", "+1e-3" stay numbers)
bool looksLikeFormula(const std::string& value)
{
    if (value.empty() || std::string_view("=+-@\t\r").find(value.front()) == std::string_view::npos) return false;
    char* end = nullptr;
    errno = 0;
    std::strtod(value.c_str(), &end);
    const bool number = end == value.c_str() + value.size() && end != value.c_str();
    return !number || value.front() == '=' || value.front() == '@';
}

} // namespace

std::string CsvWriter::field(const std::string& value)
{
    // OWASP's advice against CSV injection: such a cell is prefixed with a single quote and quoted, so that
    // spreadsheets show it as text (key names and values come from the checkpoint, which anyone may have written)
    const bool formula = looksLikeFormula(value);
    if (!formula && value.find_first_of(",\"\n\r") == std::string::npos) return value;
    std::string out = formula ? "\"'" : "\"";
    for (char c : value) {
        if (c == '"') out += '"';
        out += c;
    }
    return out + "\"";
}

void CsvWriter::row(const std::vector<std::string>& fields)
{
    std::string line;
    for (size_t i = 0; i < fields.size(); ++i)
        line += (i ? "," : "") + field(fields[i]);
    line += '\n';
    if (m_sink)
        m_sink->write(line.data(), static_cast<std::streamsize>(line.size()));
    else
        m_text += line;
}

} // namespace optscope
