// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Every checkpoint format OptScope reads, as one table: how a path is recognised (a probe with a score, the highest
// wins), how it is opened, and the facts about the format that other code asks (the library that wrote it, what its
// own loader reads that a weights_only load would refuse). openCheckpoint picks from it; adding a format is its
// reader and one row in format_registry.cpp.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <string>
#include <vector>

namespace optscope {

/// how a checkpoint of a format loads on a data-parallel world size other than the one that saved it
enum class OtherWorldSize {
    FullStateDict, ///< a full state dict: every rank loads the same whole tensors
    ReshardedOnLoad, ///< sharded tensors: each rank reads its part of the saved chunks, whatever the saved size
    Universal, ///< DeepSpeed's universal checkpoint: any world size
    SavedOnly, ///< the loader refuses any other (DeepSpeed ZeRO's load_checkpoint raises)
    LoaderDecides, ///< Megatron-Core: by the optimizer's sharding type and the TP/PP layout, not by the files alone
};

struct FormatInfo
{
    CheckpointFormat format;
    /// what the path would hold, for the error that names every format when none recognises it
    const char* looksFor;
    /// how strongly a path this format's probe matches looks like it: formats that contain another score above it
    /// (a Megatron torch_dist folder is a DCP folder plus metadata.json and common.pt; a Trainer run under DeepSpeed
    /// keeps global_stepN/ and `latest` beside its safetensors model). Distinct: the probes are asked from the
    /// highest score down and the first match wins, so a folder's cheap probe (DCP's `.metadata`) spares the costly
    /// ones below it (the rank files' listing: two LISTs of a 1,024-rank folder on S3)
    int score;
    /// whether @p path looks like this format
    bool (*probe)(const std::string& path, bool isFolder);
    /// the names under a folder that probe (and open's first steps) ask about: over plain HTTP, which cannot list a
    /// folder, openCheckpoint asks for every format's together before the probes run (one round trip, not one each)
    std::vector<const char*> folderNames;
    CheckpointPtr (*open)(const std::string& path, const Progress& progress);
    /// the library that writes it ("DeepSpeed"), empty for PyTorch's own formats
    const char* writerLibrary;
    /// the class-path prefix of that library's classes ("deepspeed."): found in its pickles, they are expected
    const char* writerClassPrefix;
    /// the format's loader reads pure-data values (io.BytesIO) with torch.load(weights_only=False): DCP's
    /// load_bytes does, so torchtitan's train state is no unsafe global there
    bool loaderReadsDataObjects;
    /// PyTorch loads it with torch.distributed.checkpoint.load (which raises CheckpointException), not torch.load
    bool loadsThroughDcp;
    OtherWorldSize otherWorldSize;
    /// `fix` writes the fixed checkpoint as a DCP folder, not as one torch.save file
    bool fixWritesDcp;
    /// its optimizers count steps per param group, and its reader gives each parameter its group's count as the
    /// Python int or float the files hold (Megatron's; its conversions write float32 tensors): not a step-dtype
    /// finding
    bool stepsPerParamGroup;
};

/// every format, in no particular order (scores decide); a format recognised in more than one way has a row per way,
/// its general row first
const std::vector<FormatInfo>& formatRegistry();
/// the formats from the highest score down: the order openCheckpoint probes them in
const std::vector<const FormatInfo*>& formatsByScore();
/// the (first, general) row of @p format
const FormatInfo& formatInfo(CheckpointFormat format);

} // namespace optscope
