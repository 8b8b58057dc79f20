// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// How findings quote names in their messages (check, diagnose).

#include "optscope/optim/param_table.h"

#include <algorithm>
#include <string>
#include <vector>

namespace optscope {

/// how a message names the optimizer at @p rootKey: "optimizer 'optim'", or "the optimizer state dict" when the file
/// is one
inline std::string optimizerText(const std::string& rootKey)
{
    return rootKey.empty() ? std::string("the optimizer state dict") : "optimizer '" + rootKey + "'";
}

/// id-keyed's message for the optimizer at @p rootKey, whose ids are named by @p namedBy (NameSource::None: not
/// named, or the names are not its own)
std::string idKeyedMessage(const std::string& rootKey, NameSource namedBy);

/// 'a', 'b', ... (N in all): the first @p max names quoted
inline std::string quoteList(const std::vector<std::string>& v, size_t max = 5)
{
    std::string s;
    for (size_t i = 0; i < v.size() && i < max; ++i)
        s += (i ? ", '" : "'") + v[i] + "'";
    if (v.size() > max) s += ", ... (" + std::to_string(v.size()) + " in all)";
    return s;
}

/// the first @p n names (Finding::keys)
inline std::vector<std::string> head(const std::vector<std::string>& v, size_t n = 8)
{
    return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size()))};
}

} // namespace optscope
