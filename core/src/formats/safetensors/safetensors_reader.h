// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// safetensors files (Hugging Face), read without running Python; the data is memory-mapped, nothing is executed.
//
//   bytes [0, 8)          N: the header's length, unsigned 64-bit little-endian (safetensors caps it at 100 MB)
//   bytes [8, 8+N)        the header: a UTF-8 JSON object, padded with spaces to a multiple of 8 by the writer
//       "<tensor name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//                          one per tensor; offsets in bytes relative to the data area; end - begin = numel x the
//                          dtype's size; dtypes BOOL U8 I8 U16 I16 U32 I32 U64 I64 F16 BF16 F32 F64 F8_E4M3 (torch's
//                          float8_e4m3fn) F8_E5M2 F8_E8M0 C64 (F4/F6_* of newer writers, and unknown ones: an
//                          entry with an error)
//       "__metadata__":      optional {str: str} (transformers writes {"format": "pt"})
//   bytes [8+N, end)      the data area: each tensor's raw bytes, little-endian, C-contiguous. The Rust writer lays
//                         tensors out by descending dtype alignment, then by name: the model's parameter order
//                         (named_parameters()) is NOT recorded anywhere in the file.
//
// Sharded checkpoints (save_pretrained / save_model with max_shard_size): model-0000K-of-0000N.safetensors plus
// model.safetensors.index.json = {"metadata": {"total_size": bytes}, "weight_map": {tensor name: shard file name}}.
// The index, or a folder holding it (or a single model.safetensors), opens as one checkpoint.
//
// Entries: one tensor entry per tensor, keyed by its name as-is (never split on '.'), one StorageRecord chunk
// (file, offset, length, contiguous strides). Order: the data area's order (begin offset).
//
// Failure semantics: a header whose length is out of bounds, that is not a JSON object, or whose tensor records are
// malformed (negative or overflowing shape, begin > end, a byte count that does not match the shape, tensors that
// overlap) throws Error naming the file. A tensor whose bytes lie past the end of a file cut short, a
// dtype this version cannot represent, a shard file the index names that is missing, become warnings of severity
// "error" on the checkpoint (those entries have no data), so that the rest can be browsed.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace optscope {

class CheckpointBuilder;

/// One parsed safetensors header.
struct SafetensorsHeader
{
    struct Tensor
    {
        std::string name;
        std::string dtypeText; ///< as in the file ("BF16")
        std::optional<DType> dtype; ///< nullopt: a dtype DType cannot represent (F4, F6_E2M3, unknown ones)
        std::vector<int64_t> shape;
        uint64_t begin = 0; ///< relative to the data area
        uint64_t end = 0;
    };
    uint64_t headerLength = 0; ///< N
    uint64_t dataStart = 0; ///< 8 + N
    std::vector<Tensor> tensors; ///< by begin offset
    std::vector<std::pair<std::string, std::string>> metadata; ///< __metadata__
};

class SafetensorsReader
{
public:
    /// the names its probe asks for in a folder (and the format registry's folderNames)
    static constexpr const char* kIndexFile = "model.safetensors.index.json";
    static constexpr const char* kSingleFile = "model.safetensors";
    /// the largest header accepted, as safetensors' own MAX_HEADER_SIZE
    static constexpr uint64_t kMaxHeaderLength = 100'000'000;

    /// Parses and validates the header of the @p size bytes at @p data (a whole file). Does not require the data area
    /// to be complete: a tensor may reach past @p size (a truncated file; the caller decides). Throws Error(Format /
    /// Truncated) naming @p where.
    static SafetensorsHeader parseHeader(const uint8_t* data, uint64_t size, const std::string& where);

    /// a .safetensors file, a model.safetensors.index.json, or a folder holding either
    static std::shared_ptr<const Checkpoint> open(const std::string& path, const Progress& progress = {});

    /// Adds the tensors of the safetensors file(s) of a model (@p modelFile: "model.safetensors" or an index
    /// "model.safetensors.index.json", relative to @p cp's root) as entries under @p prefix (empty: names as-is).
    /// Returns a short description ("1 file", "2 shards").
    static std::string addModel(Checkpoint& cp, CheckpointBuilder& builder, const std::string& modelFile,
        const KeyPath& prefix, const Progress& progress = {});

    /// the first bytes look like a safetensors file: a plausible header length and '{'
    static bool looksLikeSafetensors(const uint8_t* data, uint64_t size);
    /// @p path is a *.safetensors.index.json file, or a folder holding model.safetensors(.index.json)
    static bool looksLikeSafetensorsPath(const std::string& path);
    /// in a folder: "model.safetensors.index.json", else "model.safetensors", else the only "*.safetensors" file;
    /// empty if none
    static std::string modelFileIn(const std::string& folder);
};

} // namespace optscope
