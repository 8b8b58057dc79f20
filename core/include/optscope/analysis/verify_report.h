// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Verify-by-load, offline: the flow of PyTorch's _verify_osd_by_load (gather -> load into a differently sharded
// optimizer -> gather again -> compare), for any world size, on CPU or on the local GPUs.

#include "optscope/analysis/gather.h"
#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <nlohmann/json_fwd.hpp> // the full header (25k lines) only where JSON is built

#include <iosfwd>
#include <string>
#include <vector>

namespace optscope {

/// what loading a key back found
/// LeftOut: a value the reshard cannot write into a DCP value item (TorchSaveWriter::unwritableReason: a tensor
/// nested in a value); said, not a difference
enum class VerifyStatus { Identical, Different, Missing, Unexpected, Error, LeftOut };
/// "identical", "different", "missing", "unexpected", "error", "left_out"
const char* verifyStatusName(VerifyStatus status);

struct VerifyRankResult
{
    int rank = -1;
    int64_t elements = 0; ///< elements this rank's shard holds
    int64_t differing = 0; ///< of them, how many differ (bitwise)
    int64_t firstDiff = -1; ///< row-major index in the full tensor of the first differing element
};

struct VerifyEntry
{
    std::string key;
    std::string type; ///< "tensor" or "value"
    /// "identical", "different", "missing" (in the source, not in the result), "unexpected" (only in the result),
    /// "error" (could not be read)
    VerifyStatus status = VerifyStatus::Identical;
    std::string detail;
    std::vector<int64_t> shape; ///< tensors
    int64_t elements = 0;
    int64_t differing = 0;
    std::vector<VerifyRankResult> ranks; ///< tensors: per rank of the result's layout
};

struct VerifyReport
{
    std::string source;
    std::string target; ///< "resharded to M ranks" or the --against path
    std::string device; ///< what loaded and gathered the shards
    int worldSize = 0;
    uint64_t bytesCompared = 0;
    std::vector<VerifyEntry> entries;

    bool identical() const;
    size_t count(VerifyStatus status) const;
    nlohmann::ordered_json toJson() const;
    /// one row per entry and one per rank of it (`verify --csv`, the GUI's CSV export)
    std::string toCsv() const;
    /// toCsv()'s text, written row by row (`verify --csv`)
    void writeCsv(std::ostream& out) const;
};

struct VerifyOptions
{
    int worldSize = 0; ///< M; 0 = the source's number of ranks (at least 1)
    ComputeDevice device = ComputeDevice::Cpu;
    /// keep the resharded checkpoint here (a new folder); empty = a temporary folder, removed afterwards
    std::string keepResharded;
};

/// gather -> reshard to M ranks (FSDP2 Shard(0)) -> load each rank's shard from the written files as that rank would
/// -> gather again (CPU concatenation, or NCCL all-gather on the GPUs) -> compare bit for bit with the source.
VerifyReport verifyByLoad(const Checkpoint& source, const VerifyOptions& options, const Progress& progress = {});

/// Compares @p source with @p resharded (a copy made by any tool): every key, tensors bit for bit, per chunk (rank)
/// of the copy's own layout.
/// @p leftOut: what the reshard that wrote @p resharded left out ("key: why", DcpWriteStats::leftOut), reported as
/// left_out rather than missing
VerifyReport verifyAgainst(const Checkpoint& source, const Checkpoint& resharded, const Progress& progress = {},
    const std::vector<std::string>& leftOut = {});

} // namespace optscope
