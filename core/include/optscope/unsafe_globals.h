// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Where a checkpoint's pickle names globals outside the safe set (os.system, a user's class, ...): the readers keep
// them inert and warn "unsafe-global"; this gives the views the class paths per entry, to name them and mark the rows.

#include "optscope/checkpoint.h"

#include <map>
#include <string>
#include <vector>

namespace optscope {

struct UnsafeGlobals
{
    /// entry key -> the unsafe class paths reachable from its value, sorted
    std::map<std::string, std::vector<std::string>> byKey;
    /// every unsafe class path of the checkpoint (also those no entry holds), sorted
    std::vector<std::string> classPaths;
    /// the classes of the library that wrote the checkpoint (isWriterLibraryClass), kept apart from the above: its
    /// own loader imports them
    std::vector<std::string> libraryClassPaths;
    bool empty() const { return classPaths.empty() && byKey.empty(); }
};

/// The unsafe globals of @p checkpoint, from its "unsafe-global" warnings and the inert objects of their entries.
UnsafeGlobals findUnsafeGlobals(const Checkpoint& checkpoint);

/// A class of the library that writes checkpoints of @p format, which its own loader imports: DeepSpeed's in a ZeRO
/// or universal checkpoint, Megatron-Core's in a dist_checkpointing folder. A healthy checkpoint of theirs names them
/// (`check` reports them as info, library-global).
bool isWriterLibraryClass(CheckpointFormat format, const std::string& classPath);
/// "DeepSpeed", "Megatron-Core", or "" for formats written by PyTorch itself
const char* writerLibraryName(CheckpointFormat format);

} // namespace optscope
