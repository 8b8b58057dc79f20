// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <nlohmann/json.hpp>

#include <ostream>

namespace optscope {

struct InspectOptions
{
    bool hash = false; ///< add "sha256" of every full tensor
    int threads = 0; ///< hashing threads; 0 = one per core
    /// list every chunk of every tensor under "chunks" (a 1,024-rank checkpoint has millions: the text report, which
    /// shows a count and the ranks, leaves them out and gives "chunk_count" and "ranks" per tensor instead)
    bool listChunks = true;
    /// give "entries" in the JSON document; off, the document holds the summary and warnings only and a caller renders
    /// the entries from the checkpoint and the report's per-entry fields (the CLI's text table: 100k entries as JSON
    /// objects take about 1 KiB each)
    bool entriesJson = true;
};

struct InspectReport
{
    nlohmann::ordered_json json;
    /// per entry of the checkpoint, in its order: the SHA-256 (empty when not hashed or unreadable) and what went
    /// wrong reading it (the entry's own error, else the hashing error; empty when nothing)
    /// (both sized only when something can be in them: read them with sha256Of / errorOf)
    std::vector<std::string> sha256;
    std::vector<std::string> errors;
    const std::string& sha256Of(size_t entry) const { return entry < sha256.size() ? sha256[entry] : none(); }
    const std::string& errorOf(size_t entry) const { return entry < errors.size() ? errors[entry] : none(); }
    /// false if anything could not be read (error-severity warnings, entries with errors, failed hashes)
    bool ok = true;

private:
    static const std::string& none()
    {
        static const std::string empty;
        return empty;
    }
};

/// The `inspect --json` document:
/// {"format", "path", "detail", "pickle_protocol", "summary": {...},
///  "entries": [{"key", "path", "type": "tensor", "dtype", "shape", "numel", "bytes", "chunks": [{"rank", "offsets",
///               "sizes", "file"}], "sha256"} | {"key", "path", "type": "value", "python_type", "value"}],
///  "warnings": [{"code", "severity", "message", "key"}]}
/// "tensor" for tensors; else the Python type of the value: the class path of an object, "dict", "int", ...
std::string inspectTypeName(const Entry& entry);

InspectReport inspectCheckpoint(
    const Checkpoint& checkpoint, const InspectOptions& options, const Progress& progress = {});

/// Writes the `inspect --json` document of @p report (made by inspectCheckpoint with @p options, entriesJson off) to
/// @p out with the entries streamed one at a time: byte for byte what report.json.dump(2) gives when the entries are
/// in it (invalid UTF-8 replaced), without the whole document in memory. No newline at the end.
void writeInspectJson(
    std::ostream& out, const Checkpoint& checkpoint, const InspectReport& report, const InspectOptions& options);

} // namespace optscope
