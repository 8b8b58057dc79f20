// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal: the pickle opcodes (values as in CPython's Lib/pickle.py), how each one's argument is laid out in the
// stream and what kind of work each does. One table for every reader of pickles: the general machine, its pre-scan of
// memo reads, the DCP
// `.metadata` fast path and the emitter.

#include <cstdint>
#include <cstring>

namespace optscope::pickle_op {

enum Op : uint8_t {
    MARK = '(',
    STOP = '.',
    POP = '0',
    POP_MARK = '1',
    DUP = '2',
    FLOAT = 'F',
    INT = 'I',
    BININT = 'J',
    BININT1 = 'K',
    LONG = 'L',
    BININT2 = 'M',
    NONE = 'N',
    PERSID = 'P',
    BINPERSID = 'Q',
    REDUCE = 'R',
    STRING = 'S',
    BINSTRING = 'T',
    SHORT_BINSTRING = 'U',
    UNICODE = 'V',
    BINUNICODE = 'X',
    APPEND = 'a',
    BUILD = 'b',
    GLOBAL = 'c',
    DICT = 'd',
    EMPTY_DICT = '}',
    APPENDS = 'e',
    GET = 'g',
    BINGET = 'h',
    INST = 'i',
    LONG_BINGET = 'j',
    LIST = 'l',
    EMPTY_LIST = ']',
    OBJ = 'o',
    PUT = 'p',
    BINPUT = 'q',
    LONG_BINPUT = 'r',
    SETITEM = 's',
    TUPLE = 't',
    EMPTY_TUPLE = ')',
    SETITEMS = 'u',
    BINFLOAT = 'G',
    // protocol 2
    PROTO = 0x80,
    NEWOBJ = 0x81,
    EXT1 = 0x82,
    EXT2 = 0x83,
    EXT4 = 0x84,
    TUPLE1 = 0x85,
    TUPLE2 = 0x86,
    TUPLE3 = 0x87,
    NEWTRUE = 0x88,
    NEWFALSE = 0x89,
    LONG1 = 0x8a,
    LONG4 = 0x8b,
    // protocol 3
    BINBYTES = 'B',
    SHORT_BINBYTES = 'C',
    // protocol 4
    SHORT_BINUNICODE = 0x8c,
    BINUNICODE8 = 0x8d,
    BINBYTES8 = 0x8e,
    EMPTY_SET = 0x8f,
    ADDITEMS = 0x90,
    FROZENSET = 0x91,
    NEWOBJ_EX = 0x92,
    STACK_GLOBAL = 0x93,
    MEMOIZE = 0x94,
    FRAME = 0x95,
    // protocol 5
    BYTEARRAY8 = 0x96,
    NEXT_BUFFER = 0x97,
    READONLY_BUFFER = 0x98,
};

/// How an opcode's argument follows it: nothing, a fixed number of bytes, a little-endian length of that many bytes
/// and then as many bytes, or newline-terminated lines. Unknown: not an opcode.
enum class ArgKind : uint8_t { None, Fixed, Counted, Lines, Unknown };

struct Arg
{
    ArgKind kind;
    uint8_t n; ///< Fixed: its bytes; Counted: the length's bytes; Lines: how many
};

constexpr Arg argumentOf(uint8_t op)
{
    switch (op) {
    case MARK:
    case STOP:
    case POP:
    case POP_MARK:
    case DUP:
    case NONE:
    case BINPERSID:
    case REDUCE:
    case APPEND:
    case BUILD:
    case DICT:
    case EMPTY_DICT:
    case APPENDS:
    case LIST:
    case EMPTY_LIST:
    case OBJ:
    case SETITEM:
    case TUPLE:
    case EMPTY_TUPLE:
    case SETITEMS:
    case NEWOBJ:
    case TUPLE1:
    case TUPLE2:
    case TUPLE3:
    case NEWTRUE:
    case NEWFALSE:
    case EMPTY_SET:
    case ADDITEMS:
    case FROZENSET:
    case NEWOBJ_EX:
    case STACK_GLOBAL:
    case MEMOIZE:
    case NEXT_BUFFER:
    case READONLY_BUFFER:
        return {ArgKind::None, 0};
    case FLOAT:
    case INT:
    case LONG:
    case STRING:
    case UNICODE:
    case PERSID:
    case GET:
    case PUT:
        return {ArgKind::Lines, 1};
    case GLOBAL:
    case INST:
        return {ArgKind::Lines, 2};
    case BININT1:
    case PROTO:
    case EXT1:
    case BINGET:
    case BINPUT:
        return {ArgKind::Fixed, 1};
    case BININT2:
    case EXT2:
        return {ArgKind::Fixed, 2};
    case BININT:
    case EXT4:
    case LONG_BINGET:
    case LONG_BINPUT:
        return {ArgKind::Fixed, 4};
    case BINFLOAT:
    case FRAME:
        return {ArgKind::Fixed, 8};
    case LONG1:
    case SHORT_BINSTRING:
    case SHORT_BINBYTES:
    case SHORT_BINUNICODE:
        return {ArgKind::Counted, 1};
    case LONG4:
    case BINSTRING:
    case BINUNICODE:
    case BINBYTES:
        return {ArgKind::Counted, 4};
    case BINUNICODE8:
    case BINBYTES8:
    case BYTEARRAY8:
        return {ArgKind::Counted, 8};
    default:
        return {ArgKind::Unknown, 0};
    }
}

/// What an opcode does, by which the machine dispatches it: the stack and framing; push a number or constant; push
/// text or bytes; build or fill a container; read or write the memo; name, call or build an object (globals, REDUCE,
/// persistent ids); STOP. Unknown: not an opcode.
enum class OpGroup : uint8_t { Stack, Number, Text, Container, Memo, Object, Stop, Unknown };

constexpr OpGroup groupOf(uint8_t op)
{
    switch (op) {
    case MARK:
    case POP:
    case POP_MARK:
    case DUP:
    case PROTO:
    case FRAME:
    case NEXT_BUFFER:
    case READONLY_BUFFER:
        return OpGroup::Stack;
    case FLOAT:
    case INT:
    case BININT:
    case BININT1:
    case BININT2:
    case LONG:
    case LONG1:
    case LONG4:
    case NONE:
    case NEWTRUE:
    case NEWFALSE:
    case BINFLOAT:
        return OpGroup::Number;
    case STRING:
    case BINSTRING:
    case SHORT_BINSTRING:
    case UNICODE:
    case BINUNICODE:
    case SHORT_BINUNICODE:
    case BINUNICODE8:
    case BINBYTES:
    case SHORT_BINBYTES:
    case BINBYTES8:
    case BYTEARRAY8:
        return OpGroup::Text;
    case APPEND:
    case APPENDS:
    case DICT:
    case EMPTY_DICT:
    case LIST:
    case EMPTY_LIST:
    case SETITEM:
    case SETITEMS:
    case TUPLE:
    case EMPTY_TUPLE:
    case TUPLE1:
    case TUPLE2:
    case TUPLE3:
    case EMPTY_SET:
    case ADDITEMS:
    case FROZENSET:
        return OpGroup::Container;
    case GET:
    case BINGET:
    case LONG_BINGET:
    case PUT:
    case BINPUT:
    case LONG_BINPUT:
    case MEMOIZE:
        return OpGroup::Memo;
    case PERSID:
    case BINPERSID:
    case REDUCE:
    case BUILD:
    case GLOBAL:
    case STACK_GLOBAL:
    case INST:
    case OBJ:
    case NEWOBJ:
    case NEWOBJ_EX:
    case EXT1:
    case EXT2:
    case EXT4:
        return OpGroup::Object;
    case STOP:
        return OpGroup::Stop;
    default:
        return OpGroup::Unknown;
    }
}

constexpr uint64_t kPastTheEnd = ~uint64_t(0);

/// Where @p arg, starting at @p pos (at most @p size) of the @p size bytes at @p data, ends: the position after it, or
/// kPastTheEnd when it runs past them (or is not an opcode's). What a scan that does not read the argument steps by.
inline uint64_t argumentEnd(const uint8_t* data, uint64_t size, uint64_t pos, Arg arg)
{
    switch (arg.kind) {
    case ArgKind::None:
        return pos;
    case ArgKind::Fixed:
        return arg.n <= size - pos ? pos + arg.n : kPastTheEnd;
    case ArgKind::Counted: {
        if (arg.n > size - pos) return kPastTheEnd;
        uint64_t length = 0;
        for (unsigned b = 0; b < arg.n; ++b)
            length |= static_cast<uint64_t>(data[pos + b]) << (8 * b);
        pos += arg.n;
        return length <= size - pos ? pos + length : kPastTheEnd;
    }
    case ArgKind::Lines:
        for (int line = 0; line < arg.n; ++line) {
            const void* nl = pos < size ? std::memchr(data + pos, '\n', size - pos) : nullptr;
            if (!nl) return kPastTheEnd;
            pos = static_cast<uint64_t>(static_cast<const uint8_t*>(nl) - data) + 1;
        }
        return pos;
    case ArgKind::Unknown:
        break;
    }
    return kPastTheEnd;
}

} // namespace optscope::pickle_op
