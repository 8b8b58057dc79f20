// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// One finding type for check and diagnose, and one registry of codes: a code always has the same name, severity and
// meaning whichever command reports it (the README lists the registry; `optscope-cli codes` prints it).

#include <nlohmann/json_fwd.hpp> // the full header (25k lines) only where JSON is built

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace optscope {

enum class Severity {
    Error, ///< the load fails, or state is lost or wrong
    Warning, ///< loads, but worth checking
    Info, ///< a fact about the file that explains how it loads
};
const char* severityName(Severity s);

enum class FindingCode {
    // structure (check, and diagnose without reading chunks)
    ChunkOutOfBounds,
    ChunkOverlap,
    ChunkDuplicate,
    ChunkGap,
    ChunkDtypeMismatch,
    ChunkShapeMismatch,
    ChunkTruncated,
    MissingFile,
    PathOutsideCheckpoint,
    SpecialFile,
    MissingStorageInfo,
    UnreadableChunk,
    RecordCrcMismatch,
    UnreadableValue,
    BadMetadata,
    UnsupportedTransform,
    UnsafeGlobal,
    LibraryGlobal,
    DcpDataGlobal,
    // one optimizer on its own (check and diagnose)
    NoOptimizer,
    EmptyState,
    StepInconsistent,
    StepRankConflict,
    StepDtype,
    UnexpectedState,
    FrozenParams,
    IdKeyed,
    FlattenedFormat,
    ParamMapping,
    ParamOrderAssumed,
    // an optimizer against the model it is loaded into (diagnose)
    PrefixMismatch,
    ParamNamesPrefix,
    RenamedParams,
    ParamOrderMismatch,
    OptimizerClassMismatch,
    DTensorState,
    MissingState,
    ExtraParams,
    ParamGroupsMismatch,
    ShapeMismatch,
    StateDtypeCast,
    Float8Params,
    Fsdp1FlatState,
    ModelKeysMismatch,
    // DeepSpeed ZeRO checkpoint folders (check and diagnose; the reader finds them)
    ZeroMissingRankFile,
    ZeroWorldSizeMismatch,
    ZeroStageMismatch,
    ZeroMissingLatest,
    ZeroWorldSizeChange,
    // Megatron-Core dist_checkpointing folders (the reader finds them)
    MegatronBucketLayout,
    MegatronParamGroups,
    MegatronMissingLatest,
    MegatronMissingMetadata,
    MegatronMissingCommon,
    // diagnose without a model
    WrapperPrefix,
    // structure, found later
    TensorWithoutData,
    LazyBit,
    NestedTooDeep,
    // values (check, reading every chunk)
    NonFinite,
};

struct FindingInfo
{
    FindingCode code;
    const char* name; ///< stable text code ("chunk-gap")
    Severity severity;
    const char* meaning; ///< one sentence
};

/// every code, in declaration order
const std::vector<FindingInfo>& findingRegistry();
const FindingInfo& findingInfo(FindingCode code);
const char* findingName(FindingCode code);
/// the library whose loader raises Finding::pytorchError: "DeepSpeed" for the zero-* findings of a ZeRO folder
/// (DeepSpeed's own error text), "PyTorch" otherwise
const char* findingLoader(FindingCode code);

/// One rename/re-key the fix applies, at one optimizer (and the model part beside it).
struct FixAction
{
    /// RenameParam renames one parameter everywhere in the optimizer (state keys, params, param_names);
    /// RenameModelKey one key of the model state dict saved beside it
    enum class Kind { RenameParam, RenameModelKey, RekeyIds, UnflattenFormat, CastStep };
    FixAction(Kind kind, std::string from, std::string to, std::string description,
        std::vector<std::vector<std::string>> paramGroups = {})
        : kind(kind)
        , from(std::move(from))
        , to(std::move(to))
        , description(std::move(description))
        , paramGroups(std::move(paramGroups))
    { }
    Kind kind;
    std::string from; ///< e.g. "_orig_mod.fc.weight" / "3"
    std::string to; ///< e.g. "fc.weight"
    std::string description;
    /// UnflattenFormat: the parameters (FQNs) of each param group, in order, as the loading code's optimizer groups
    /// them (the flattened format does not store it)
    std::vector<std::vector<std::string>> paramGroups;
};
const char* fixActionKindName(FixAction::Kind kind);

struct Finding
{
    FindingCode code;
    Severity severity; ///< from the registry
    std::string message; ///< what is wrong, in words, naming keys/parameters
    std::string key; ///< entry key, or the optimizer's root key; empty for checkpoint-wide findings
    std::string pytorchError; ///< what PyTorch raises because of it (diagnose), empty when it loads
    std::string fix; ///< what to do, in the CLI's words (its commands and options)
    /// the same advice without CLI syntax, for the desktop app ("give the model", "the fix renames them"); empty
    /// when `fix` has no CLI syntax in it. Read through fixText(false).
    std::string fixNeutral;
    std::vector<std::string> keys; ///< parameters/keys involved (first few)
    std::vector<int> ranks;
    std::vector<std::vector<int64_t>> offsets;
    std::vector<FixAction> actions; ///< what `fix` would do for this finding
    /// numbers the finding counts, by name, in order (non-finite: "numel", "nan", "posinf", "neginf"); JSON
    /// "counts" when there are any
    std::vector<std::pair<std::string, int64_t>> counts;

    Finding(FindingCode c, std::string msg, std::string k = {});
    const char* name() const { return findingName(code); }
    /// `fix` for the CLI, the tool-neutral wording (when there is one) otherwise
    const std::string& fixText(bool cli) const { return cli || fixNeutral.empty() ? fix : fixNeutral; }
    nlohmann::ordered_json toJson() const;
};

/// Every field of @p f, for the processes of a job to send findings to rank 0 (as CBOR: keys and messages travel as
/// their bytes), and back. Not an output format: toJson() is.
nlohmann::json findingToWire(const Finding& f);
Finding findingFromWire(const nlohmann::json& wire);

/// Findings alike enough to read as one: the same code, the same error from the loader and the same fix (a file per
/// rank that cannot be read, 1,024 times over). Returns groups of indices into @p findings, in the order of each
/// group's first member; a group of fewer than @p minGroup alike findings is split into groups of one.
std::vector<std::vector<size_t>> groupAlikeFindings(const std::vector<Finding>& findings, size_t minGroup = 4);

} // namespace optscope
