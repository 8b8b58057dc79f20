// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: how PyContainer::index files dict keys. The pickle machine renders each hashable key (hashKey in
// pickle_machine.cpp: str keys as "s<length>:<text>", ints as "i<value>;", tuples as "t(...)", ...) and files the
// key's position in items under the rendering's hash; PyValue::get looks str keys up the same way. The renderings
// are not kept: a match of the hash is confirmed by the caller against the key at that position.

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace optscope {

/// Keys whose rendering would be longer are not indexed (appended like unhashable ones): a tuple key can hold one
/// large tuple many times over through the memo, and its rendering would grow exponentially. 128 KiB holds the
/// largest integer (PickleLimits::maxBigIntBytes) and any str key a real checkpoint has.
constexpr size_t kMaxDictKeyRenderingBytes = size_t(1) << 17;

/// An open-addressing table of (hash of a key's rendering, the key's position in the dict's items): 16 bytes a slot
/// at most half full, and no allocation per key (a map of the renderings took about 100 bytes and two allocations
/// per key: a sixth of the time to read a file of a million values).
class DictIndex
{
public:
    static constexpr size_t npos = ~size_t(0);
    static uint64_t hashOf(std::string_view rendering) { return std::hash<std::string_view>()(rendering); }

    /// the position filed under @p hash for which @p sameKey(position) is true, or npos
    template<class SameKey> size_t find(uint64_t hash, const SameKey& sameKey) const
    {
        if (m_slots.empty()) return npos;
        const size_t mask = m_slots.size() - 1;
        for (size_t s = hash & mask;; s = (s + 1) & mask) {
            const Slot& slot = m_slots[s];
            if (slot.positionPlusOne == 0) return npos;
            if (slot.hash == hash && sameKey(slot.positionPlusOne - 1)) return slot.positionPlusOne - 1;
        }
    }

    /// files @p position under @p hash (a key not in the table: find() said npos)
    void insert(uint64_t hash, size_t position)
    {
        if (2 * (m_count + 1) > m_slots.size()) grow();
        place(hash, position);
        ++m_count;
    }

private:
    struct Slot
    {
        uint64_t hash = 0;
        uint64_t positionPlusOne = 0; ///< 0: empty
    };

    void place(uint64_t hash, size_t position)
    {
        const size_t mask = m_slots.size() - 1;
        size_t s = hash & mask;
        while (m_slots[s].positionPlusOne != 0)
            s = (s + 1) & mask;
        m_slots[s] = Slot {hash, position + 1};
    }

    void grow()
    {
        std::vector<Slot> old = std::move(m_slots);
        m_slots.assign(old.empty() ? 64 : 2 * old.size(), Slot {});
        for (const Slot& slot : old)
            if (slot.positionPlusOne != 0) place(slot.hash, slot.positionPlusOne - 1);
    }

    std::vector<Slot> m_slots;
    size_t m_count = 0;
};

} // namespace optscope
