// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// RFC 4180 CSV text: fields with a comma, quote or line break are quoted, quotes doubled; rows end in CRLF-free "\n".
// A field that a spreadsheet would take for a formula (starting with = + - @, tab or CR, unless it is a plain number)
// is written as '"'VALUE"' (OWASP's CSV-injection advice): shown as text, never evaluated.
// The one CSV writer of the core: `map --csv`, `diff --csv`, `verify --csv` and the GUI's exports all use it.

#include <iosfwd>
#include <string>
#include <vector>

namespace optscope {

class CsvWriter
{
public:
    /// rows are kept, for text()
    CsvWriter() = default;
    /// rows go to @p sink as they come (a million-row report is not first built as one string)
    explicit CsvWriter(std::ostream& sink)
        : m_sink(&sink)
    { }
    static std::string field(const std::string& value);
    void row(const std::vector<std::string>& fields);
    const std::string& text() const { return m_text; }

private:
    std::ostream* m_sink = nullptr;
    std::string m_text;
};

} // namespace optscope
