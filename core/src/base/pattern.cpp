// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/base/pattern.h"

#include <regex>

namespace optscope {

struct Pattern::Compiled
{
    std::regex regex;
};

Pattern::Pattern(std::string_view expression, bool ignoreCase)
{
    auto flags = std::regex::ECMAScript;
    if (ignoreCase) flags |= std::regex::icase;
    try {
        m_compiled = std::make_unique<Compiled>(Compiled {std::regex(expression.begin(), expression.end(), flags)});
    } catch (const std::regex_error& e) {
        throw BadPattern(e.what());
    }
}

Pattern::~Pattern() = default;
Pattern::Pattern(Pattern&&) noexcept = default;
Pattern& Pattern::operator=(Pattern&&) noexcept = default;

namespace {

void copyGroups(const std::match_results<std::string_view::const_iterator>& m, std::vector<std::string>* groups)
{
    groups->clear();
    for (const auto& g : m)
        groups->push_back(g.matched ? g.str() : std::string());
}

} // namespace

bool Pattern::matches(std::string_view text, std::vector<std::string>* groups) const
{
    if (!groups) return std::regex_match(text.begin(), text.end(), m_compiled->regex);
    std::match_results<std::string_view::const_iterator> m;
    if (!std::regex_match(text.begin(), text.end(), m, m_compiled->regex)) return false;
    copyGroups(m, groups);
    return true;
}

bool Pattern::search(std::string_view text, std::vector<std::string>* groups) const
{
    if (!groups) return std::regex_search(text.begin(), text.end(), m_compiled->regex);
    std::match_results<std::string_view::const_iterator> m;
    if (!std::regex_search(text.begin(), text.end(), m, m_compiled->regex)) return false;
    copyGroups(m, groups);
    return true;
}

} // namespace optscope
