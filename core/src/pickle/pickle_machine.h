// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// A pickle virtual machine for protocols 0-5 that never executes anything.
//
// Format (CPython Lib/pickle.py, pickletools.py): a byte stream of one-byte opcodes with inline arguments,
// evaluated on a stack with a mark stack (MARK pushes the stack height) and a memo (PUT/GET/MEMOIZE). Integers are
// little-endian except BINFLOAT (big-endian IEEE double). Protocol 0 opcodes carry text arguments ending in '\n'.
// STOP pops the result. Protocol 4 adds FRAME (an 8-byte length hint), STACK_GLOBAL, MEMOIZE; protocol 5 adds
// BYTEARRAY8 and out-of-band buffers (NEXT_BUFFER, READONLY_BUFFER).
//
// Safety model:
//  * GLOBAL/STACK_GLOBAL/INST only create a Global name. REDUCE/NEWOBJ/NEWOBJ_EX/OBJ/INST/BUILD on a Global create
//    an inert Object (callable, args, state) unless the callable is in the interpreted set, where the result is
//    computed without running Python: collections.OrderedDict/defaultdict/Counter, builtins set/frozenset/
//    bytearray/complex/getattr, _codecs.encode, torch.Size/device/dtypes/_get_layout, storage classes, the tensor
//    rebuild functions (_rebuild_tensor[_v2|_v3], _rebuild_parameter[_with_state], _rebuild_from_type_v2 with
//    ShardedTensor/DTensor), the DCP metadata dataclasses (2.0-2.6+ module paths), pathlib paths.
//  * Any other global is kept inert and reported as a PickleWarning with code "unsafe-global" and its class path.
//  * Caps (PickleLimits) bound the memo, the stack, the mark stack, container nesting and the size of big integers;
//    length fields are checked against the bytes actually present before anything is allocated.
//  * Every failure throws Error with the source name and the byte offset of the opcode.

#include "optscope/model/py_value.h"
#include "optscope/model/reader_code.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace optscope {

/// Floors of the safety caps: the VM raises memo, stack and MARK caps to the input's length in bytes (each costs an
/// opcode byte), so real pickles of any size pass and hostile ones stay linear in their size.
struct PickleLimits
{
    size_t maxStack = 1u << 20; ///< values on the stack at once
    size_t maxMarks = 1u << 16; ///< open MARKs
    size_t maxMemo = 1u << 24; ///< memo entries
    uint32_t maxMemoIndex = 1u << 30; ///< largest PUT index accepted
    int32_t maxNesting = 2000; ///< container nesting depth
    size_t maxBigIntBytes = 1u << 16; ///< LONG/LONG1/LONG4 payload
    bool scaleWithInput = true; ///< raise maxMemo/maxStack/maxMarks to the input's length (off: fixed caps)
};

struct PickleWarning
{
    ReaderCode code = ReaderCode::BadTensor;
    std::string message;
    std::string classPath; ///< for unsafe-global
    uint64_t offset = 0;
};

/// Turns a persistent id (BINPERSID/PERSID) into a value. torch.save uses ('storage', cls, key, location, numel).
/// The loader must not keep or return @p pid or a part of it: the machine gives the id back to the arena afterwards.
using PersistentLoader = std::function<PyValue*(PyArena& arena, PyValue* pid, uint64_t offset)>;

struct PickleOptions
{
    std::string sourceName; ///< file (and record) named in errors
    uint64_t baseOffset = 0; ///< added to offsets in errors (position of the pickle inside its file)
    PickleLimits limits;
    PersistentLoader persistentLoad; ///< if empty, a persistent id is an error
};

struct PickleResult
{
    PyValue* root = nullptr;
    int protocol = 0;
    uint64_t bytesConsumed = 0; ///< up to and including STOP
    std::vector<PickleWarning> warnings;
};

/// Runs the pickle in [data, data+size) into @p arena. Strings point into the input bytes, so the caller keeps them
/// alive as long as the arena (PyArena::keepAlive). Stops at the first STOP; trailing bytes are left alone.
PickleResult unpickle(const uint8_t* data, uint64_t size, PyArena& arena, const PickleOptions& options);

/// Classes and functions the machine interprets (without a warning); anything else is "unsafe-global".
bool isKnownGlobal(std::string_view module, std::string_view name);

} // namespace optscope
