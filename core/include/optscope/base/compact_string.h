// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace optscope {

/// An immutable string in 16 bytes rather than std::string's 32, with the same 15-character inline capacity: the text
/// of every key path element and the key of every entry (a 100k-entry checkpoint holds 400k elements). Text of up to
/// 15 bytes lives inline; longer text in one heap block. NUL-terminated either way. A value type (copies copy).
class CompactString
{
public:
    CompactString() { setInline(0); }
    CompactString(std::string_view s) { assign(s); }
    CompactString(const std::string& s)
        : CompactString(std::string_view(s))
    { }
    CompactString(const char* s)
        : CompactString(std::string_view(s))
    { }
    CompactString(const CompactString& o)
        : CompactString(o.view())
    { }
    CompactString(CompactString&& o) noexcept
    {
        std::memcpy(m_bytes, o.m_bytes, sizeof m_bytes);
        o.setInline(0);
    }
    CompactString& operator=(const CompactString& o)
    {
        if (this != &o) {
            CompactString copy(o);
            swap(copy);
        }
        return *this;
    }
    CompactString& operator=(CompactString&& o) noexcept
    {
        if (this != &o) {
            CompactString moved(std::move(o));
            swap(moved);
        }
        return *this;
    }
    ~CompactString()
    {
        if (isHeap()) delete[] heapData();
    }

    size_t size() const { return isHeap() ? heapSize() : kInline - static_cast<unsigned char>(m_bytes[kInline]); }
    size_t length() const { return size(); }
    bool empty() const { return size() == 0; }
    const char* data() const { return isHeap() ? heapData() : m_bytes; }
    const char* c_str() const { return data(); }
    std::string_view view() const { return {data(), size()}; }
    operator std::string_view() const { return view(); }
    std::string str() const { return std::string(view()); }
    char operator[](size_t i) const { return data()[i]; }
    const char* begin() const { return data(); }
    const char* end() const { return data() + size(); }
    size_t find(std::string_view s, size_t pos = 0) const { return view().find(s, pos); }
    size_t find(char c, size_t pos = 0) const { return view().find(c, pos); }
    size_t rfind(std::string_view s, size_t pos = std::string_view::npos) const { return view().rfind(s, pos); }
    size_t rfind(char c, size_t pos = std::string_view::npos) const { return view().rfind(c, pos); }
    std::string_view substr(size_t pos, size_t n = std::string_view::npos) const { return view().substr(pos, n); }
    int compare(std::string_view o) const { return view().compare(o); }

    void swap(CompactString& o) noexcept
    {
        char tmp[sizeof m_bytes];
        std::memcpy(tmp, m_bytes, sizeof m_bytes);
        std::memcpy(m_bytes, o.m_bytes, sizeof m_bytes);
        std::memcpy(o.m_bytes, tmp, sizeof m_bytes);
    }

    friend bool operator==(const CompactString& a, const CompactString& b) { return a.view() == b.view(); }
    friend bool operator!=(const CompactString& a, const CompactString& b) { return !(a == b); }
    friend bool operator<(const CompactString& a, const CompactString& b) { return a.view() < b.view(); }
    friend bool operator==(const CompactString& a, std::string_view b) { return a.view() == b; }
    friend bool operator!=(const CompactString& a, std::string_view b) { return a.view() != b; }
    friend bool operator==(std::string_view a, const CompactString& b) { return a == b.view(); }
    friend bool operator!=(std::string_view a, const CompactString& b) { return a != b.view(); }
    friend bool operator==(const CompactString& a, const std::string& b) { return a.view() == b; }
    friend bool operator!=(const CompactString& a, const std::string& b) { return a.view() != b; }
    friend bool operator==(const std::string& a, const CompactString& b) { return b.view() == a; }
    friend bool operator!=(const std::string& a, const CompactString& b) { return b.view() != a; }
    friend bool operator==(const CompactString& a, const char* b) { return a.view() == b; }
    friend bool operator!=(const CompactString& a, const char* b) { return a.view() != b; }
    friend std::string operator+(const std::string& a, const CompactString& b) { return a + std::string(b.view()); }
    friend std::string operator+(const CompactString& a, const std::string& b) { return std::string(a.view()) + b; }
    friend std::string operator+(const char* a, const CompactString& b) { return a + std::string(b.view()); }
    friend std::string operator+(const CompactString& a, const char* b) { return std::string(a.view()) + b; }
    friend std::string operator+(char a, const CompactString& b) { return a + std::string(b.view()); }
    friend std::string operator+(const CompactString& a, char b) { return std::string(a.view()) + b; }
    friend std::string& operator+=(std::string& a, const CompactString& b) { return a.append(b.data(), b.size()); }
    friend std::ostream& operator<<(std::ostream& os, const CompactString& s) { return os << s.view(); }

private:
    // bytes 0..14: inline text; byte 15: 15 - inline length (0 for 15 characters, so it terminates the text too), or
    // kHeapTag with a heap pointer in bytes 0..7 and the length in bytes 8..11
    static constexpr size_t kInline = 15;
    static constexpr unsigned char kHeapTag = 0xff;
    bool isHeap() const { return static_cast<unsigned char>(m_bytes[kInline]) == kHeapTag; }
    char* heapData() const
    {
        char* p;
        std::memcpy(&p, m_bytes, sizeof p);
        return p;
    }
    size_t heapSize() const
    {
        uint32_t n;
        std::memcpy(&n, m_bytes + 8, sizeof n);
        return n;
    }
    void setInline(size_t n)
    {
        m_bytes[n] = '\0';
        m_bytes[kInline] = static_cast<char>(kInline - n);
    }
    void assign(std::string_view s)
    {
        if (s.size() <= kInline) {
            std::memcpy(m_bytes, s.data(), s.size());
            setInline(s.size());
            return;
        }
        // a key of 4 GiB or more is beyond every reader's limits; cut rather than wrap
        const uint32_t n = s.size() > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(s.size());
        char* p = new char[size_t(n) + 1];
        std::memcpy(p, s.data(), n);
        p[n] = '\0';
        std::memcpy(m_bytes, &p, sizeof p);
        std::memcpy(m_bytes + 8, &n, sizeof n);
        m_bytes[kInline] = static_cast<char>(kHeapTag);
    }
    alignas(8) char m_bytes[16];
};

} // namespace optscope

template<> struct std::hash<optscope::CompactString>
{
    size_t operator()(const optscope::CompactString& s) const noexcept { return std::hash<std::string_view>()(s); }
};
