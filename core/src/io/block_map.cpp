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
        if (state(b) == Absent) return true; // never fetched, or evicted since: whatever the skip list says
        return state(b) == Consumed && !prefetch
            && std::none_of(skip.begin(), skip.end(), [b](const Run& r) { return r.contains(b); });
    };
    Claim c;
    range.end = std::min<uint64_t>(range.end, m_state.size());
    for (uint64_t b = range.begin; b < range.end;) {
        if (!wanted(b)) {
            c.waiting = c.waiting || state(b) == InFlight;
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
        if (state(b) == Consumed) m_state[b] = Absent;
}

void BlockMap::settle(const std::vector<Run>& runs, bool fetched)
{
    for (const Run& r : runs)
        for (uint64_t b = r.begin; b < r.end && b < m_state.size(); ++b)
            m_state[b] = fetched ? uint8_t(Present | kUnread) : uint8_t(Absent);
}

void BlockMap::reading(uint64_t offset, uint64_t length, Reader reader)
{
    if (length == 0 || offset >= m_size) return;
    const uint64_t end = std::min(offset + length, m_size);
    if (!m_done.empty()) undone(offset, end);
    add(m_pins[reader], offset, end);
    used(blocksOf(offset, end - offset));
}

bool BlockMap::pinned(uint64_t block) const
{
    const uint64_t from = block * m_block, to = from + m_block;
    for (const auto& [reader, ranges] : m_pins) {
        auto it = ranges.lower_bound(to); // the first range starting at or past the block's end
        if (it != ranges.begin() && std::prev(it)->second > from) return true;
    }
    return false;
}

void BlockMap::used(Run range)
{
    for (uint64_t b = range.begin; b < range.end && b < m_state.size(); ++b)
        if (state(b) == Present) m_state[b] = uint8_t((m_state[b] | kUsed) & ~kUnread);
}

std::vector<BlockMap::Run> BlockMap::evict(uint64_t want, uint64_t visits, uint64_t& cleared, bool unread)
{
    std::vector<Run> evicted;
    uint64_t count = 0;
    for (uint64_t v = 0; v < visits && count < want && !m_state.empty(); ++v) {
        const uint64_t b = m_hand;
        m_hand = m_hand + 1 < m_state.size() ? m_hand + 1 : 0;
        if (state(b) != Present || ((m_state[b] & kUnread) && !unread) || pinned(b)) continue;
        if (m_state[b] & kUsed) {
            m_state[b] &= uint8_t(~kUsed);
            ++cleared;
            continue;
        }
        m_state[b] = Absent;
        ++count;
        if (!evicted.empty() && evicted.back().end == b)
            evicted.back().end = b + 1;
        else
            evicted.push_back({b, b + 1});
    }
    return evicted;
}

std::vector<BlockMap::Run> BlockMap::giveBack(uint64_t offset, uint64_t length, Reader reader)
{
    if (length == 0 || offset >= m_size) return {};
    const uint64_t end = std::min(offset + length, m_size);
    // the reader no longer points into it; joined with the done ranges it touches or adjoins
    if (auto pins = m_pins.find(reader); pins != m_pins.end()) {
        remove(pins->second, offset, end);
        if (pins->second.empty()) m_pins.erase(pins);
    }
    const auto [start, stop] = add(m_done, offset, end);
    // the range's blocks that [start, stop) covers whole (an object's last block ends at its end)
    const Run touched = blocksOf(offset, end - offset);
    Run r {std::max(touched.begin, (start + m_block - 1) / m_block),
        std::min(touched.end, stop >= m_size ? uint64_t(m_state.size()) : stop / m_block)};
    // present ones only: a block in flight is being written by a fetch (its memory dropped now would lose what
    // arrived), one absent has no memory
    std::vector<Run> given;
    for (uint64_t b = r.begin; b < r.end; ++b) {
        if (state(b) != Present || pinned(b)) continue;
        m_state[b] = Consumed;
        if (!given.empty() && given.back().end == b)
            given.back().end = b + 1;
        else
            given.push_back({b, b + 1});
    }
    return given;
}

std::pair<uint64_t, uint64_t> BlockMap::add(Ranges& ranges, uint64_t from, uint64_t to)
{
    uint64_t start = from, stop = to;
    auto it = ranges.upper_bound(start);
    if (it != ranges.begin() && std::prev(it)->second >= start) --it;
    while (it != ranges.end() && it->first <= stop) {
        start = std::min(start, it->first);
        stop = std::max(stop, it->second);
        it = ranges.erase(it);
    }
    ranges.emplace(start, stop);
    return {start, stop};
}

void BlockMap::remove(Ranges& ranges, uint64_t from, uint64_t to)
{
    auto it = ranges.upper_bound(from);
    if (it != ranges.begin()) --it;
    while (it != ranges.end() && it->first < to) {
        const uint64_t start = it->first, stop = it->second;
        if (stop <= from) {
            ++it;
            continue;
        }
        it = ranges.erase(it);
        if (start < from) ranges.emplace(start, from);
        if (stop > to) it = ranges.emplace(to, stop).first;
    }
}

} // namespace optscope
