// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/base/display_text.h"

#include <cstring>

#include <cstdint>
#include <cstdio>

namespace optscope {

namespace {

/// length of the valid UTF-8 sequence at @p i (1-4) and its code point, or 0 when the bytes there are not one
size_t decodeUtf8(std::string_view s, size_t i, uint32_t& cp)
{
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
    const uint8_t c = b(0);
    if (c < 0x80) {
        cp = c;
        return 1;
    }
    size_t n = 0;
    uint32_t min = 0;
    if ((c & 0xE0) == 0xC0) {
        n = 2;
        cp = c & 0x1F;
        min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3;
        cp = c & 0x0F;
        min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if ((b(k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b(k) & 0x3F);
    }
    // overlong forms, UTF-16 surrogates (a Python lone surrogate pickled with surrogatepass) and past U+10FFFF
    if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
    return n;
}

/// bidi marks (a key that reads backwards), zero-width characters (two keys that read the same) and the Unicode line
/// and paragraph separators (a line break to some terminals and editors)
bool isDirectionOrInvisibleMark(uint32_t cp)
{
    return cp == 0x061C || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E)
        || (cp >= 0x2060 && cp <= 0x2069)
        || cp == 0xFEFF
        // blank or invisible letters and marks: soft hyphen, Mongolian vowel separator, the Hangul fillers,
        // variation selectors and the tag characters (a key that reads as another)
        || cp == 0x00AD || cp == 0x180E || cp == 0x115F || cp == 0x1160 || cp == 0x3164 || cp == 0xFFA0
        || (cp >= 0xFE00 && cp <= 0xFE0F) || (cp >= 0xE0000 && cp <= 0xE007F);
}

/// appends the escape for the sequence at @p i (length @p n, code point @p cp; n == 0: one invalid byte); false when
/// it needs none
bool escapeOne(std::string_view s, size_t i, size_t n, uint32_t cp, bool keepNewlines, std::string* out)
{
    char buf[16];
    if (n == 0) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(static_cast<uint8_t>(s[i])));
    } else if (n == 1 && cp < 0x20) {
        if ((cp == '\n' || cp == '\t') && keepNewlines) return false;
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
    } else if (cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || isDirectionOrInvisibleMark(cp)) {
        // (as \u, a JSON escape too: --json output passes through this, and JSON writers leave these raw)
        if (cp > 0xFFFF) // as a UTF-16 surrogate pair: a JSON escape too
            std::snprintf(
                buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF));
        else
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
    } else {
        return false;
    }
    if (out) out->append(buf);
    return true;
}

} // namespace

bool isUtf8(std::string_view text)
{
    for (size_t i = 0; i < text.size();) {
        uint32_t cp = 0;
        const size_t n = decodeUtf8(text, i, cp);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string hexBytes(std::string_view bytes)
{
    static const char* digits = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) {
        const auto b = static_cast<uint8_t>(c);
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    return out;
}

bool needsDisplayEscape(std::string_view text, bool keepNewlines)
{
    // printable ASCII needs nothing and is most of what passes (a 200 MB inspect --json, 1.5M table lines): skip it
    // eight bytes at a time while none is below ' ' or above '~' (the word tests of "Bit Twiddling Hacks": hasless,
    // hasmore), then a byte at a time
    constexpr uint64_t kOnes = ~uint64_t(0) / 255, kHighs = kOnes * 0x80;
    size_t start = 0;
    for (uint64_t w = 0; start + 8 <= text.size(); start += 8) {
        std::memcpy(&w, text.data() + start, 8);
        if (((w - kOnes * 0x20) & ~w & kHighs) || ((w + kOnes * (127 - 0x7e)) | w) & kHighs) break;
    }
    while (start < text.size()) {
        const auto c = static_cast<unsigned char>(text[start]);
        if ((c < 0x20 || c > 0x7e) && !((c == '\n' || c == '\t') && keepNewlines)) break;
        ++start;
    }
    for (size_t i = start; i < text.size();) {
        uint32_t cp = 0;
        const size_t n = decodeUtf8(text, i, cp);
        if (escapeOne(text, i, n, cp, keepNewlines, nullptr)) return true;
        i += n ? n : 1;
    }
    return false;
}

std::string displayText(std::string_view text, bool keepNewlines)
{
    if (!needsDisplayEscape(text, keepNewlines)) return std::string(text);
    std::string out;
    out.reserve(text.size() + 16);
    for (size_t i = 0; i < text.size();) {
        uint32_t cp = 0;
        const size_t n = decodeUtf8(text, i, cp);
        if (!escapeOne(text, i, n, cp, keepNewlines, &out)) out.append(text.substr(i, n));
        i += n ? n : 1;
    }
    return out;
}

} // namespace optscope
