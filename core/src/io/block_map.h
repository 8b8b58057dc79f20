// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The block bookkeeping of a RemoteObject (remote_object.h), apart from its requests so that it is fuzzed
// (tests/fuzz: fuzzBlockMap) and tested on its own: which blocks of an object are absent, being fetched or present;
// which ranged GETs a read needs (the absent blocks it claims, coalesced into runs, the runs cut into parts); which
// blocks a reader gives back. Not thread-safe: the RemoteObject calls it under its lock.

#include <cstdint>
#include <map>
#include <utility>
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
    State state(uint64_t block) const { return static_cast<State>(m_state[block] & kStateBits); }
    /// a reader points into the block (reading()) and has not given that range back: it keeps its memory
    bool pinned(uint64_t block) const;
    /// who reads: a thread of the process (each gives back its own ranges; another's pins stay)
    using Reader = uint64_t;

    /// the blocks holding [offset, offset + length) (inside the object: the caller checks)
    Run blocksOf(uint64_t offset, uint64_t length) const;
    /// claims the absent blocks of @p range (never fetched, or evicted), and the consumed ones that are not in
    /// @p skip (runs the caller fetched already and a reader gave back since) unless @p prefetch: they become in
    /// flight, to be fetched by the parts returned
    Claim claim(Run range, const std::vector<Run>& skip, bool prefetch = false);
    /// the consumed blocks of @p range become absent: a prefetch asked from now on fetches them (a new pass over
    /// bytes read before), one asked before does not
    void renew(Run range);
    /// a claim's blocks become present (@p fetched) or absent again (its fetch failed)
    void settle(const std::vector<Run>& runs, bool fetched);
    /// [offset, offset + length) is done for @p reader: it copied it out, or will not read it again, and points into
    /// it no more (its pins there go). It joins the object's done bytes; the blocks of the range that every byte of
    /// which is now done become consumed: the whole blocks inside it, and a block at either end whose other bytes
    /// were done before (a file of many small items shares each block among several: it goes when the last of them
    /// is done). Returns them, for the caller to drop their memory. Only present blocks no other reader pins are
    /// given back (two threads reading one item: the first to finish must not take the other's bytes; the block goes
    /// when the other gives its range back); a block claimed for a fetch is no longer done (a new read may point
    /// into it).
    std::vector<Run> giveBack(uint64_t offset, uint64_t length, Reader reader = 0);
    /// @p reader points into [offset, offset + length) (present): its bytes are no longer done and pin their blocks
    /// (never evicted, whatever the cache's bound) until @p reader gives the range back
    void reading(uint64_t offset, uint64_t length, Reader reader = 0);
    /// a reader copied bytes of @p range out: its present blocks were used lately (evicted after the others)
    void used(Run range);
    /// The block cache's clock: visits at most @p visits blocks from where the last call stopped, round the object;
    /// a present block not pinned and not used since the last visit becomes absent (a read fetches it again), one
    /// used since loses that mark. A block fetched and not read yet (a read-ahead: needed soon) is left unless
    /// @p unread. Stops after @p want blocks. (A block is pinned while any of its bytes is.) Returns those evicted,
    /// for the caller to drop their memory; @p cleared counts the marks taken (progress without eviction).
    std::vector<Run> evict(uint64_t want, uint64_t visits, uint64_t& cleared, bool unread = false);

private:
    static constexpr uint8_t kStateBits = 0x3, kUsed = 0x40, kUnread = 0x80; // a present block's marks
    using Ranges = std::map<uint64_t, uint64_t>; ///< byte ranges, merged: start -> end
    /// [from, to) joins @p ranges, merged with those it touches or adjoins: returns the range it became part of
    static std::pair<uint64_t, uint64_t> add(Ranges& ranges, uint64_t from, uint64_t to);
    static void remove(Ranges& ranges, uint64_t from, uint64_t to);
    void undone(uint64_t from, uint64_t to) { remove(m_done, from, to); } ///< [from, to) leaves the done bytes
    uint64_t m_size;
    uint64_t m_block;
    uint64_t m_maxPart;
    std::vector<uint8_t> m_state; ///< State per block, with a present block's flags
    uint64_t m_hand = 0; ///< where evict() goes on
    Ranges m_done; ///< the done bytes (few ranges: done ranges adjoin)
    std::map<Reader, Ranges> m_pins; ///< the bytes each reader points into (the items it is reading: few at a time)
};

} // namespace optscope
