// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// A regular expression (ECMAScript, as std::regex reads it), compiled once and matched many times. std::regex lives
// behind pattern.cpp alone: every file that instantiates it spends about 10 s of compile time with gcc -O2 and 20 s
// under the sanitizers, which CI's 45 minutes on 2 cores cannot pay in every reader that matches a file name.

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace optscope {

class Pattern
{
public:
    /// @throws BadPattern when @p expression is not a regular expression
    explicit Pattern(std::string_view expression, bool ignoreCase = false);
    ~Pattern();
    Pattern(Pattern&&) noexcept;
    Pattern& operator=(Pattern&&) noexcept;

    /// whether the whole of @p text matches; @p groups (when given) gets the whole match and then each group's
    /// text ("" for a group that took no part)
    bool matches(std::string_view text, std::vector<std::string>* groups = nullptr) const;
    /// whether some part of @p text matches; @p groups as for matches(), of the first match
    bool search(std::string_view text, std::vector<std::string>* groups = nullptr) const;

private:
    struct Compiled;
    std::unique_ptr<Compiled> m_compiled;
};

/// what Pattern's constructor throws for an expression it cannot compile; what() says why, in std::regex's words
class BadPattern : public std::invalid_argument
{
public:
    using std::invalid_argument::invalid_argument;
};

} // namespace optscope
