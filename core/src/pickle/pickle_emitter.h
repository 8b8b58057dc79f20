// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: pickle protocol-2 emission, the opcodes torch.save's pickler produces (and pickle.load reads).

#include "optscope/pickle/pickle_opcodes.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>

namespace optscope {

/// Protocol-2 pickle emission, the opcodes torch.save's pickler produces.
class PickleEmitter
{
public:
    std::string out;

    PickleEmitter() { op(pickle_op::PROTO), out += '\x02'; }
    PickleEmitter& op(uint8_t code)
    {
        out += static_cast<char>(code);
        return *this;
    }
    void u32(uint32_t v)
    {
        for (int i = 0; i < 4; ++i)
            out += static_cast<char>((v >> (8 * i)) & 0xff);
    }
    void integer(int64_t v)
    {
        if (v >= 0 && v < 256) {
            op(pickle_op::BININT1);
            out += static_cast<char>(v);
        } else if (v >= 0 && v < 65536) {
            op(pickle_op::BININT2);
            out += static_cast<char>(v & 0xff);
            out += static_cast<char>(v >> 8);
        } else if (v >= INT32_MIN && v <= INT32_MAX) {
            op(pickle_op::BININT);
            u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
        } else {
            // LONG1: minimal little-endian two's complement
            std::string b;
            uint64_t u = static_cast<uint64_t>(v);
            for (int i = 0; i < 8; ++i)
                b += static_cast<char>((u >> (8 * i)) & 0xff);
            while (b.size() > 1) {
                const auto last = static_cast<uint8_t>(b.back());
                const auto prev = static_cast<uint8_t>(b[b.size() - 2]);
                if ((last == 0 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80)))
                    b.pop_back();
                else
                    break;
            }
            longBytes(b);
        }
    }
    void longBytes(std::string_view le)
    {
        if (le.size() < 256) {
            op(pickle_op::LONG1);
            out += static_cast<char>(le.size());
        } else {
            op(pickle_op::LONG4);
            u32(static_cast<uint32_t>(le.size()));
        }
        out.append(le);
    }
    void floating(double d)
    {
        op(pickle_op::BINFLOAT);
        uint64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        for (int i = 7; i >= 0; --i)
            out += static_cast<char>((bits >> (8 * i)) & 0xff);
    }
    void str(std::string_view s)
    {
        op(pickle_op::BINUNICODE);
        u32(static_cast<uint32_t>(s.size()));
        out.append(s);
    }
    void global(const std::string& module, const std::string& name)
    {
        const std::string key = module + "\n" + name;
        auto it = m_memo.find(key);
        if (it != m_memo.end()) {
            get(it->second);
            return;
        }
        op(pickle_op::GLOBAL);
        out += key + "\n";
        put(key);
    }
    void mark() { op(pickle_op::MARK); }
    void tuple(size_t n)
    {
        if (n == 0)
            op(pickle_op::EMPTY_TUPLE);
        else if (n <= 3)
            op(static_cast<uint8_t>(pickle_op::TUPLE1 + n - 1));
        else
            op(pickle_op::TUPLE);
    }

    /// A value written again is a memo GET, as pickle writes it: shared values stay shared (a list reached 2^64 times
    /// through z = [z, z] is written once), and so does a container that holds itself.
    /// The memo index of @p object when it was written before (putObject), else -1.
    int64_t memoOf(const void* object) const
    {
        const auto it = m_objects.find(object);
        return it == m_objects.end() ? -1 : static_cast<int64_t>(it->second);
    }
    /// memoises the object whose pickle is on top of the stack (PUT)
    void putObject(const void* object)
    {
        const uint32_t idx = m_next++;
        m_objects.emplace(object, idx);
        putIndex(idx);
    }
    void get(uint32_t idx)
    {
        if (idx < 256) {
            op(pickle_op::BINGET);
            out += static_cast<char>(idx);
        } else {
            op(pickle_op::LONG_BINGET);
            u32(idx);
        }
    }

private:
    void put(const std::string& key)
    {
        const uint32_t idx = m_next++;
        m_memo.emplace(key, idx);
        putIndex(idx);
    }
    void putIndex(uint32_t idx)
    {
        if (idx < 256) {
            op(pickle_op::BINPUT);
            out += static_cast<char>(idx);
        } else {
            op(pickle_op::LONG_BINPUT);
            u32(idx);
        }
    }
    std::map<std::string, uint32_t> m_memo;
    std::unordered_map<const void*, uint32_t> m_objects;
    uint32_t m_next = 0;
};

} // namespace optscope
