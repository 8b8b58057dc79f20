// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Text from a checkpoint (key names, values, a `latest` tag, record names) is anyone's: shown raw, an ESC sequence
// sets the terminal's title or clears it, a CR or a newline forges a line, and a bidi override shows
// "evil\u202egpj.exe" as "evilexe.jpg". Every text output escapes it through displayText (the CLI filters all it
// prints; the GUI marks what it escaped).

#include <string>
#include <string_view>

namespace optscope {

/// @p text with what a terminal or a reader could be fooled by written as visible escapes: C0 controls as \xNN (\n
/// and \t too unless @p keepNewlines: a multi-line message keeps its layout, as PyTorch's "\n\tMissing key(s)"),
/// DEL, C1 controls, the bidi and zero-width marks and the Unicode line separators (U+061C, U+200B-U+200F,
/// U+2028-U+202E, U+2060-U+2069, U+FEFF) as \uXXXX (a JSON escape too), bytes that are not UTF-8 as \xNN. Everything
/// else, backslashes included, is kept: the escapes are for reading, the JSON output is the exact form.
std::string displayText(std::string_view text, bool keepNewlines = false);
/// whether @p text is valid UTF-8 (no surrogates: a Python str with a lone surrogate, pickled with surrogatepass, is
/// not). JSON output writes such a text with U+FFFD in place of each bad byte, and beside it the exact bytes in hex
/// ("key_hex"): bytes.fromhex(key_hex).decode("utf-8", "surrogatepass") gives the Python str back.
bool isUtf8(std::string_view text);
/// @p bytes as lowercase hex, two digits a byte
std::string hexBytes(std::string_view bytes);
/// whether displayText would change @p text
bool needsDisplayEscape(std::string_view text, bool keepNewlines = false);

} // namespace optscope
