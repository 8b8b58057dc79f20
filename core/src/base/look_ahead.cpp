// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/base/look_ahead.h"

#include <algorithm>
#include <cstdlib>

namespace optscope {

uint64_t remoteCacheBytes()
{
    static const uint64_t bytes = [] {
        const char* mb = std::getenv("OPTSCOPE_REMOTE_CACHE_MB");
        const long long n = mb ? std::strtoll(mb, nullptr, 10) : 0;
        return uint64_t(n > 0 ? n : 512) << 20;
    }();
    return bytes;
}

uint64_t lookAheadBytes()
{
    return std::min(uint64_t(128) << 20, remoteCacheBytes() / 4);
}

} // namespace optscope
