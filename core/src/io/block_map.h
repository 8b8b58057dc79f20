// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The block bookkeeping of a RemoteObject (remote_object.h), apart from its requests so that it is fuzzed
// (tests/fuzz: fuzzBlockMap) and tested on its own: which blocks of an object are absent, being fetched or present;
// which ranged GETs a read needs (the absent blocks it claims, coalesced into runs, the runs cut into parts); which
// blocks a reader gives back. Not thread-safe: the RemoteObject calls it under its lock.

#include <cstdint>
#include <map>
#include <vector>

namespace optscope {

class BlockMap
{
public:
    /// Consumed: absent again after a reader copied it out (given back); a read fetches it again, a prefetch does
    /// not (it was asked ahead of that read, which has happened already)
    enum State : uint8_t { Absent, InFlight, Present, Consumed };
    struct Run ///< blocks [begin, end)
    {
        uint64_t begin = 0, end = 0;
        bool contains(uint64_t b) const { return b >= begin && b < end; }
    };
    struct Part ///< bytes [offset, offset + length): one ranged GET
    {
        uint64_t offset = 0, length = 0;
    };
    struct Claim
    {
        std::vector<Run> runs; ///< the blocks claimed (now in flight), in order, maximal
        std::vector<Part> parts; ///< exactly their bytes (clipped to the object's end), in order, each <= maxPart
        bool waiting = false; ///< a block of the range is in flight for another claim
    };

    /// an object of @p size bytes in blocks of @p blockBytes, fetched in parts of at most @p maxPartBytes
    BlockMap(uint64_t size, uint64_t blockBytes, uint64_t maxPartBytes);

    uint64_t size() const { return m_size; }
    uint64_t blockBytes() const { return m_block; }
    uint64_t blocks() const { return m_state.size(); }
    State state(uint64_t block) const { return static_cast<State>(m_state[block]); }

    /// the blocks holding [offset, offset + length) (inside the object: the caller checks)
    Run blocksOf(uint64_t offset, uint64_t length) const;
    /// claims the absent blocks of @p range that are not in @p skip (runs the caller fetched already and a reader may
    /// have given back since), and the consumed ones unless @p prefetch: they become in flight, to be fetched by the
    /// parts returned
    Claim claim(Run range, const std::vector<Run>& skip, bool prefetch = false);
    /// the consumed blocks of @p range become absent: a prefetch asked from now on fetches them (a new pass over
    /// bytes read before), one asked before does not
    void renew(Run range);
    /// a claim's blocks become present (@p fetched) or absent again (its fetch failed)
    void settle(const std::vector<Run>& runs, bool fetched);
    /// [offset, offset + length) is done: a reader copied it out, or will not read it again, and nobody points into
    /// it. It joins the object's done bytes; the blocks of the range that every byte of which is now done become
    /// consumed: the whole blocks inside it, and a block at either end whose other bytes were done before (a file of
    /// many small items shares each block among several: it goes when the last of them is done). Returns them, for
    /// the caller to drop their memory. Only present blocks are given back; a block claimed for a fetch is no longer
    /// done (a new read may point into it).
    std::vector<Run> giveBack(uint64_t offset, uint64_t length);
    /// a reader points into [offset, offset + length): its bytes are no longer done (until given back again)
    void reading(uint64_t offset, uint64_t length)
    {
        if (!m_done.empty() && length) undone(offset, offset + length);
    }

private:
    void undone(uint64_t from, uint64_t to); ///< [from, to) leaves the done bytes
    uint64_t m_size;
    uint64_t m_block;
    uint64_t m_maxPart;
    std::vector<uint8_t> m_state; ///< State per block
    std::map<uint64_t, uint64_t> m_done; ///< the done bytes, merged: start -> end (few: done ranges adjoin)
};

} // namespace optscope
