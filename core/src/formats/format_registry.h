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

struct FormatInfo
{
    CheckpointFormat format;
    /// what the path would hold, for the error that names every format when none recognises it
    const char* looksFor;
    /// how strongly @p path looks like this format, 0 when it does not. Formats that contain another score above
    /// it: a Megatron torch_dist folder is a DCP folder plus metadata.json and common.pt; a Trainer run under
    /// DeepSpeed keeps global_stepN/ and `latest` beside its safetensors model
    int (*probe)(const std::string& path, bool isFolder);
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
};

/// every format, in no particular order (probes decide)
const std::vector<FormatInfo>& formatRegistry();
/// the row of @p format
const FormatInfo& formatInfo(CheckpointFormat format);

} // namespace optscope
