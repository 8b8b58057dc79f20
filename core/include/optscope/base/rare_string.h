// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace optscope {

/// A string that is nearly always empty, in 8 bytes rather than std::string's 32: a tensor entry's wrapper class and
/// placements, set only for DTensor/ShardedTensor, in every one of 100k entries. A value type (copies copy the text).
class RareString
{
public:
    RareString() = default;
    RareString(std::string s) { assign(std::move(s)); }
    RareString(const char* s) { assign(s); }
    RareString(const RareString& o) { assign(o.str()); }
    RareString(RareString&&) noexcept = default;
    RareString& operator=(const RareString& o)
    {
        if (this != &o) assign(o.str());
        return *this;
    }
    RareString& operator=(RareString&&) noexcept = default;
    RareString& operator=(std::string s)
    {
        assign(std::move(s));
        return *this;
    }
    ~RareString() = default;

    bool empty() const { return !m_text; }
    const std::string& str() const { return m_text ? *m_text : empty_(); }
    operator const std::string&() const { return str(); }
    bool operator==(std::string_view o) const { return std::string_view(str()) == o; }
    bool operator!=(std::string_view o) const { return !(*this == o); }
    friend std::string operator+(const std::string& a, const RareString& b) { return a + b.str(); }
    friend std::string operator+(const char* a, const RareString& b) { return a + b.str(); }
    friend std::string operator+(const RareString& a, const std::string& b) { return a.str() + b; }
    friend std::string operator+(const RareString& a, const char* b) { return a.str() + b; }

private:
    void assign(std::string s) { m_text = s.empty() ? nullptr : std::make_unique<std::string>(std::move(s)); }
    static const std::string& empty_()
    {
        static const std::string none;
        return none;
    }
    std::unique_ptr<std::string> m_text;
};

} // namespace optscope
