// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: how PyContainer::index files dict keys. The pickle machine renders each hashable key (hashKey in
// pickle_machine.cpp: str keys as "s<length>:<text>", ints as "i<value>;", tuples as "t(...)", ...) and PyValue::get
// looks str keys up the same way.

#include "optscope/io/sha256.h"

#include <string>

namespace optscope {

/// Keys whose rendering would be longer are not indexed (appended like unhashable ones): a tuple key can hold one
/// large tuple many times over through the memo, and its rendering would grow exponentially. 128 KiB holds the
/// largest integer (PickleLimits::maxBigIntBytes) and any str key a real checkpoint has.
constexpr size_t kMaxDictKeyRenderingBytes = size_t(1) << 17;

/// Renderings up to 64 bytes are their own index key; longer ones are filed under their SHA-256, so that the index
/// takes a few bytes per key whatever the key is (one long string shared by thousands of keys through the memo).
inline std::string dictIndexKey(std::string rendering)
{
    if (rendering.size() <= 64) return rendering; // never starts with '#'
    return "#" + Sha256::hex(rendering.data(), rendering.size());
}

} // namespace optscope
