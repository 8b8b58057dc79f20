// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Asking ahead over items written one after the other (a writer's tensors or DCP items): before item k is written,
// the items after it are asked for until a byte budget or an item count is ahead and not yet written, so that the
// reads of a remote source are in flight across item boundaries, with a bounded amount of memory waiting for them.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

namespace optscope {

/// The most fetched bytes of remote objects the process holds at once (their block cache, io's BlockCache):
/// OPTSCOPE_REMOTE_CACHE_MB, 512 MiB unless set. What is read ahead must stay well under it, or it is evicted
/// before it is read and fetched twice.
uint64_t remoteCacheBytes();
/// what a LookAhead keeps asked for by default: 128 MiB, at most a quarter of remoteCacheBytes()
uint64_t lookAheadBytes();

class LookAhead
{
public:
    /// @p bytesOf(n): what item n will read (0: nothing to ask, such as a value or another process's item);
    /// @p ask(n): starts fetching it
    LookAhead(size_t count, std::function<uint64_t(size_t)> bytesOf, std::function<void(size_t)> ask,
        uint64_t maxBytes = lookAheadBytes(), size_t maxItems = 64)
        : m_count(count)
        , m_bytesOf(std::move(bytesOf))
        , m_ask(std::move(ask))
        , m_maxBytes(maxBytes)
        , m_maxItems(maxItems)
    { }

    /// call before item @p k is written, k increasing: item k itself and those after it are asked for
    void before(size_t k)
    {
        for (; m_written < k; ++m_written) // items written since: no longer ahead
            if (m_written < m_asked) {
                m_aheadBytes -= m_bytesOf(m_written);
                --m_aheadItems;
            }
        for (m_asked = m_asked < k ? k : m_asked;
             m_asked < m_count && (m_asked == k || (m_aheadBytes < m_maxBytes && m_aheadItems < m_maxItems));
             ++m_asked) {
            const uint64_t n = m_bytesOf(m_asked);
            if (n) m_ask(m_asked);
            m_aheadBytes += n;
            ++m_aheadItems;
        }
    }

private:
    size_t m_count;
    std::function<uint64_t(size_t)> m_bytesOf;
    std::function<void(size_t)> m_ask;
    uint64_t m_maxBytes;
    size_t m_maxItems;
    size_t m_asked = 0; ///< items below were asked for (or had nothing to ask)
    size_t m_written = 0; ///< items below are written
    uint64_t m_aheadBytes = 0;
    size_t m_aheadItems = 0;
};

} // namespace optscope
