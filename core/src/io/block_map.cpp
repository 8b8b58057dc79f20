// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/block_map.h"

#include <algorithm>

namespace optscope {

BlockMap::BlockMap(uint64_t size, uint64_t blockBytes, uint64_t maxPartBytes)
    : m_size(size)
    , m_block(std::max<uint64_t>(blockBytes, 1))
    , m_maxPart(std::max<uint64_t>(maxPartBytes, 1))
    , m_state(static_cast<size_t>((size + m_block - 1) / m_block), Absent)
{ }

BlockMap::Run BlockMap::blocksOf(uint64_t offset, uint64_t length) const
{
    return {offset / m_block, (offset + length + m_block - 1) / m_block};
}

BlockMap::Claim BlockMap::claim(Run range, const std::vector<Run>& skip, bool prefetch)
{
    auto wanted = [&](uint64_t b) {
        const bool absent = m_state[b] == Absent || (m_state[b] == Consumed && !prefetch);
        return absent && std::none_of(skip.begin(), skip.end(), [b](const Run& r) { return r.contains(b); });
    };
    Claim c;
    range.end = std::min<uint64_t>(range.end, m_state.size());
    for (uint64_t b = range.begin; b < range.end;) {
        if (!wanted(b)) {
            c.waiting = c.waiting || m_state[b] == InFlight;
            ++b;
            continue;
        }
        uint64_t e = b;
        while (e < range.end && wanted(e))
            m_state[e++] = InFlight;
        c.runs.push_back({b, e});
        const uint64_t end = std::min(m_size, e * m_block);
        for (uint64_t at = b * m_block; at < end; at += m_maxPart)
            c.parts.push_back({at, std::min(m_maxPart, end - at)});
        b = e;
    }
    return c;
}

void BlockMap::renew(Run range)
{
    for (uint64_t b = range.begin; b < range.end && b < m_state.size(); ++b)
        if (m_state[b] == Consumed) m_state[b] = Absent;
}

void BlockMap::settle(const std::vector<Run>& runs, bool fetched)
{
    for (const Run& r : runs)
        for (uint64_t b = r.begin; b < r.end && b < m_state.size(); ++b)
            m_state[b] = fetched ? Present : Absent;
}

BlockMap::Run BlockMap::giveBack(uint64_t offset, uint64_t length)
{
    const uint64_t end = offset + length;
    Run r {(offset + m_block - 1) / m_block, end >= m_size ? m_state.size() : end / m_block};
    if (r.begin >= r.end) return {};
    for (uint64_t b = r.begin; b < r.end; ++b)
        m_state[b] = Consumed;
    return r;
}

} // namespace optscope
