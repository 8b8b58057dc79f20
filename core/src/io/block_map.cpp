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
        if (!m_done.empty()) undone(b * m_block, e * m_block);
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

std::vector<BlockMap::Run> BlockMap::giveBack(uint64_t offset, uint64_t length)
{
    if (length == 0 || offset >= m_size) return {};
    const uint64_t end = std::min(offset + length, m_size);
    // joined with the done ranges it touches or adjoins
    uint64_t start = offset, stop = end;
    auto it = m_done.upper_bound(start);
    if (it != m_done.begin() && std::prev(it)->second >= start) --it;
    while (it != m_done.end() && it->first <= stop) {
        start = std::min(start, it->first);
        stop = std::max(stop, it->second);
        it = m_done.erase(it);
    }
    m_done.emplace(start, stop);
    // the range's blocks that [start, stop) covers whole (an object's last block ends at its end)
    const Run touched = blocksOf(offset, end - offset);
    Run r {std::max(touched.begin, (start + m_block - 1) / m_block),
        std::min(touched.end, stop >= m_size ? uint64_t(m_state.size()) : stop / m_block)};
    // present ones only: a block in flight is being written by a fetch (its memory dropped now would lose what
    // arrived), one absent has no memory
    std::vector<Run> given;
    for (uint64_t b = r.begin; b < r.end; ++b) {
        if (m_state[b] != Present) continue;
        m_state[b] = Consumed;
        if (!given.empty() && given.back().end == b)
            given.back().end = b + 1;
        else
            given.push_back({b, b + 1});
    }
    return given;
}

void BlockMap::undone(uint64_t from, uint64_t to)
{
    auto it = m_done.upper_bound(from);
    if (it != m_done.begin()) --it;
    while (it != m_done.end() && it->first < to) {
        const uint64_t start = it->first, stop = it->second;
        if (stop <= from) {
            ++it;
            continue;
        }
        it = m_done.erase(it);
        if (start < from) m_done.emplace(start, from);
        if (stop > to) it = m_done.emplace(to, stop).first;
    }
}

} // namespace optscope
