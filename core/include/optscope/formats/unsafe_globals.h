// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Where a checkpoint's pickle names globals outside the safe set (os.system, a user's class, ...): the readers keep
// them inert and warn "unsafe-global"; this gives the views the class paths per entry, to name them and mark the rows.

#include "optscope/model/checkpoint.h"

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
    /// pure-data classes that the format's own loader reads (io.BytesIO in a DCP value, isLoaderDataClass), kept
    /// apart from the above too
    std::vector<std::string> dataClassPaths;
    bool empty() const { return classPaths.empty() && byKey.empty(); }
};

/// The unsafe globals of @p checkpoint, from its "unsafe-global" warnings and the inert objects of their entries.
UnsafeGlobals findUnsafeGlobals(const Checkpoint& checkpoint);

/// A class of the library that writes checkpoints of @p format, which its own loader imports: DeepSpeed's in a ZeRO
/// or universal checkpoint, Megatron-Core's in a dist_checkpointing folder. A healthy checkpoint of theirs names them
/// (`check` reports them as info, library-global).
bool isWriterLibraryClass(CheckpointFormat format, const std::string& classPath);
/// A class whose unpickled object is pure data, running no code of its own: io.BytesIO (a bytes buffer and its
/// position; torchtitan keeps its train state's loss history in them). torch.load(weights_only=True) still refuses
/// it unless it is allowed with torch.serialization.add_safe_globals.
bool isPureDataClass(const std::string& classPath);
/// A pure-data class (isPureDataClass) in a checkpoint whose own loader unpickles values without weights_only: DCP
/// writes every non-tensor value with torch.save, and dcp.load reads it with torch.load(weights_only=False)
/// (DefaultLoadPlanner.load_bytes). `check` reports it as info (dcp-data-global); in a torch.save file it stays an
/// unsafe-global warning, as torch.load's default (weights_only=True since 2.6) refuses it.
bool isLoaderDataClass(CheckpointFormat format, const std::string& classPath);
/// "DeepSpeed", "Megatron-Core", or "" for formats written by PyTorch itself
const char* writerLibraryName(CheckpointFormat format);

/// What a global outside the safe set is in a checkpoint of @p format: the writer library's own class
/// (library-global), pure data the format's own loader reads (dcp-data-global), or unsafe (unsafe-global). check,
/// inspect and the GUI all take it from here.
FindingCode globalFinding(CheckpointFormat format, const std::string& classPath);

/// How inspect (its table and --json) and the GUI label a reader's warning: its code's name and severity ("error",
/// "warning", or "info" for a global that globalFinding calls the library's or the loader's data, as check does)
struct WarningLabel
{
    const char* code;
    const char* severity;
};
WarningLabel warningLabel(const Checkpoint& checkpoint, const CheckpointWarning& warning);

} // namespace optscope
