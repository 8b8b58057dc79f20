// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/finding.h"
#include "optscope/base/display_text.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

namespace optscope {

const char* severityName(Severity s)
{
    switch (s) {
    case Severity::Error:
        return "error";
    case Severity::Warning:
        return "warning";
    case Severity::Info:
        return "info";
    }
    return "?";
}

const std::vector<FindingInfo>& findingRegistry()
{
    using C = FindingCode;
    using S = Severity;
    static const std::vector<FindingInfo> r = {
        {C::ChunkOutOfBounds, "chunk-out-of-bounds", S::Error, "a chunk lies (partly) outside its tensor's shape"},
        {C::ChunkOverlap, "chunk-overlap", S::Error,
            "two chunks cover the same elements with different bytes; a loader takes one silently"},
        {C::ChunkDuplicate, "chunk-duplicate", S::Warning, "the same region is stored twice with identical bytes"},
        {C::ChunkGap, "chunk-gap", S::Error, "no chunk holds some elements of a tensor: the checkpoint is incomplete"},
        {C::ChunkDtypeMismatch, "dtype-mismatch", S::Error, "a chunk stores another dtype than its tensor's"},
        {C::ChunkShapeMismatch, "chunk-shape-mismatch", S::Error,
            "a chunk stores another shape than the metadata says"},
        {C::ChunkTruncated, "chunk-truncated", S::Error, "a chunk's bytes run past the end of its file"},
        {C::MissingFile, "missing-file", S::Error, "a data file the metadata names is not there"},
        {C::PathOutsideCheckpoint, "path-outside-checkpoint", S::Error,
            "the metadata names a data file outside the checkpoint (an absolute path, '..', or a symlink out of the "
            "folder): it is not read (--allow-outside-reads reads it; PyTorch's loaders would)"},
        {C::SpecialFile, "special-file", S::Error,
            "a data file the metadata names is a FIFO, device, socket, folder or symlink loop, not a file: not read"},
        {C::MissingStorageInfo, "missing-storage-info", S::Error, "the metadata does not say where a chunk is stored"},
        {C::UnreadableChunk, "unreadable-chunk", S::Error, "a chunk's bytes cannot be read or parsed"},
        {C::RecordCrcMismatch, "crc-mismatch", S::Error,
            "a zip record's bytes do not match the CRC-32 its writer stored: the file changed after it was written "
            "(torch.load does not check it and reads the damaged bytes)"},
        {C::UnreadableValue, "unreadable-value", S::Error, "a non-tensor value cannot be read"},
        {C::BadMetadata, "bad-metadata", S::Error, "the DCP metadata is inconsistent"},
        {C::UnsupportedTransform, "unsupported-transform", S::Error,
            "a DCP stream transform (compression) this version cannot undo"},
        {C::UnsafeGlobal, "unsafe-global", S::Warning,
            "the pickle references a class or function outside the safe set: torch.load(weights_only=True) refuses "
            "it, and a full unpickle would run it"},
        {C::LibraryGlobal, "library-global", S::Info,
            "the pickle references a class of the library that wrote the checkpoint (DeepSpeed, Megatron-Core), kept "
            "inert: the library loads it with weights_only=False; torch.load(weights_only=True) refuses it unless it "
            "is allowed with torch.serialization.add_safe_globals"},
        {C::DcpDataGlobal, "dcp-data-global", S::Info,
            "a pure-data class (io.BytesIO) in a value of a DCP checkpoint, kept inert: DCP saved the value with "
            "torch.save and dcp.load reads it back with torch.load(weights_only=False) "
            "(DefaultLoadPlanner.load_bytes); "
            "torch.load(weights_only=True) of the value (or of dcp_to_torch_save's file) refuses it unless it is "
            "allowed with torch.serialization.add_safe_globals"},
        {C::NoOptimizer, "no-optimizer", S::Error, "no optimizer state dict (state + param_groups) in the file"},
        {C::EmptyState, "empty-state", S::Error,
            "param_groups list parameters but there is no state at all (saved before the first step)"},
        {C::StepInconsistent, "step-inconsistent", S::Warning, "parameters of one optimizer are at different steps"},
        {C::StepRankConflict, "step-rank-conflict", S::Error,
            "ranks store different values for the same parameter's step"},
        {C::StepDtype, "step-dtype", S::Warning,
            "step is not a 0-dim float32 tensor; load_state_dict casts it, which can change large values"},
        {C::UnexpectedState, "unexpected-state", S::Warning,
            "state for parameters no param_group lists; load_state_dict ignores it"},
        {C::FrozenParams, "frozen-params", S::Warning,
            "parameters without state: frozen (fine) or never given a gradient (their moments restart)"},
        {C::IdKeyed, "id-keyed", S::Info,
            "state keyed by integer ids: loading pairs parameters by position, and nothing checks the names"},
        {C::FlattenedFormat, "flattened-format", S::Warning,
            "DSD's flattened format (state.<fqn>.<name>): set_optimizer_state_dict reads it, optimizer.load_state_dict "
            "raises KeyError"},
        {C::ParamMapping, "param-mapping", S::Error,
            "an optimizer's integer ids cannot be named: no rule (the model's order, the Hugging Face Trainer's "
            "groups) fits the shapes of its state and the model beside it"},
        {C::ParamOrderAssumed, "param-order-assumed", S::Warning,
            "integer optimizer ids named by an order the files do not store (a safetensors model): parameters of "
            "one shape may carry each other's state under their names"},
        {C::PrefixMismatch, "prefix-mismatch", S::Error,
            "names differ by a wrapper or module prefix (module., _orig_mod., ...)"},
        {C::ParamNamesPrefix, "param-names-prefix", S::Warning,
            "param_names of integer-keyed state carry wrapper prefixes: optimizer.load_state_dict pairs by position "
            "and ignores them, name-based tools see other names"},
        {C::RenamedParams, "renamed-params", S::Error,
            "parameters whose names differ but whose shapes and positions agree: probably renamed"},
        {C::ParamOrderMismatch, "param-order-mismatch", S::Error,
            "the saved parameters are in another order than the target's: optimizer.load_state_dict pairs by "
            "position and gives parameters each other's state (silently where their shapes agree)"},
        {C::OptimizerClassMismatch, "optimizer-class-mismatch", S::Error,
            "the saved param groups or states lack what the target optimizer's class reads (another class saved "
            "them: Adagrad's state into Adam): load_state_dict takes them as they are, then the load or the first "
            "step() raises KeyError"},
        {C::DTensorState, "dtensor-state", S::Error,
            "the saved state is DTensors (a fully_shard or tensor-parallel model's get_optimizer_state_dict, "
            "torch.save'd) and the target model's tensors are plain: the optimizer loads it and its first step() "
            "raises RuntimeError (mixed torch.Tensor and DTensor)"},
        {C::MissingState, "missing-state", S::Error, "parameters of the model have no entry in the optimizer"},
        {C::ExtraParams, "extra-params", S::Warning,
            "the optimizer names parameters the model does not have; name-based loaders ignore them"},
        {C::ParamGroupsMismatch, "param-groups-mismatch", S::Error,
            "the number of param groups or of parameters per group differs from the optimizer it loads into"},
        {C::ShapeMismatch, "shape-mismatch", S::Error,
            "state tensors do not have their parameter's shape: the first step after loading fails"},
        {C::StateDtypeCast, "state-dtype-cast", S::Warning,
            "load_state_dict casts the state to its parameter's dtype, which holds less: the moments are rounded"},
        {C::Float8Params, "float8-params", S::Error,
            "the model's parameters are float8: torch.optim has no float8 kernels, the first step raises"},
        {C::Fsdp1FlatState, "fsdp1-flat-state", S::Error,
            "raw FSDP1 flat-parameter state (one rank's padded shard per flat parameter), not per-parameter state"},
        {C::ModelKeysMismatch, "model-keys-mismatch", S::Error,
            "the model state dict saved beside the optimizer does not match the model's keys"},
        {C::ZeroMissingRankFile, "zero-missing-rank-file", S::Error,
            "a DeepSpeed ZeRO rank's optimizer (or ZeRO-3 model states) file is missing: its partitions are lost"},
        {C::ZeroWorldSizeMismatch, "zero-world-size-mismatch", S::Error,
            "DeepSpeed ZeRO files disagree on the data-parallel world size (partition_count, dp_world_size, files)"},
        {C::ZeroStageMismatch, "zero-stage-mismatch", S::Error,
            "DeepSpeed ZeRO files were written at different ZeRO stages (files of two runs, or the wrong config)"},
        {C::ZeroMissingLatest, "zero-missing-latest", S::Error,
            "a DeepSpeed save folder without 'latest': load_checkpoint without a tag loads nothing and returns None"},
        {C::ZeroWorldSizeChange, "zero-world-size-change", S::Error,
            "a DeepSpeed ZeRO checkpoint loaded on another data-parallel world size: load_checkpoint refuses it (a "
            "universal checkpoint can change it)"},
        {C::MegatronBucketLayout, "megatron-bucket-layout", S::Warning,
            "Megatron-Core dp_reshardable flat buckets that the model weights do not explain: shown flat, "
            "per-parameter "
            "optimizer state unavailable"},
        {C::MegatronParamGroups, "megatron-param-groups", S::Warning,
            "Megatron-Core param_groups other than the default weight-decay / no-weight-decay pair: the files do not "
            "say which parameter is in which group"},
        {C::MegatronMissingLatest, "megatron-missing-latest", S::Error,
            "a Megatron save folder without latest_checkpointed_iteration.txt: load_checkpoint loads nothing and "
            "training starts from random"},
        {C::MegatronMissingMetadata, "megatron-missing-metadata", S::Error,
            "a Megatron-Core torch_dist folder (a DCP folder with common.pt) without metadata.json: "
            "dist_checkpointing.load refuses it as not a distributed checkpoint"},
        {C::MegatronMissingCommon, "megatron-missing-common", S::Error,
            "a Megatron-Core torch_dist folder without common.pt (iteration, args, optimizer param_groups): "
            "dist_checkpointing.load fails"},
        {C::WrapperPrefix, "wrapper-prefix", S::Info,
            "parameter names carry a wrapper prefix (_orig_mod., module., ...): they match the wrapped module they "
            "were saved from; diagnose against the model they load into to check them"},
        {C::TensorWithoutData, "tensor-without-data", S::Warning,
            "a tensor saved without its data (a meta-device tensor): torch.load gives a meta tensor with no values, "
            "and nothing can read, compare or reshard it"},
        {C::LazyBit, "lazy-bit", S::Info,
            "a tensor saved from a lazy conj() or neg view (its bit set): its bytes are stored unresolved and "
            "torch.load "
            "applies the bit, as every read here does; what gather, fix and reshard write holds the values resolved"},
        {C::NestedTooDeep, "nested-too-deep", S::Warning,
            "tensors nested deeper than 200 levels are kept inside one value: they are not listed, checked, "
            "gathered, resharded or compared as tensors (torch.load reads them)"},
        {C::NonFinite, "non-finite", S::Warning,
            "a weight or optimizer state holds NaN or +-inf values (counted as torch.isnan / isposinf / isneginf "
            "count them): torch.load and load_state_dict take them as they are, and the next steps spread them"},
    };
    return r;
}

const FindingInfo& findingInfo(FindingCode code)
{
    return findingRegistry()[static_cast<size_t>(code)];
}

const char* findingName(FindingCode code)
{
    return findingInfo(code).name;
}

const char* findingLoader(FindingCode code)
{
    switch (code) {
    case FindingCode::ZeroMissingRankFile:
    case FindingCode::ZeroWorldSizeMismatch:
    case FindingCode::ZeroStageMismatch:
    case FindingCode::ZeroMissingLatest:
    case FindingCode::ZeroWorldSizeChange:
        return "DeepSpeed";
    case FindingCode::MegatronMissingLatest:
        return "Megatron-LM";
    case FindingCode::MegatronMissingMetadata:
    case FindingCode::MegatronMissingCommon:
        return "Megatron-Core";
    default:
        return "PyTorch";
    }
}

const char* fixActionKindName(FixAction::Kind kind)
{
    switch (kind) {
    case FixAction::Kind::RenameParam:
        return "rename-param";
    case FixAction::Kind::RenameModelKey:
        return "rename-model-key";
    case FixAction::Kind::RekeyIds:
        return "rekey-ids";
    case FixAction::Kind::UnflattenFormat:
        return "unflatten-format";
    case FixAction::Kind::CastStep:
        return "cast-step";
    }
    return "?";
}

Finding::Finding(FindingCode c, std::string msg, std::string k)
    : code(c)
    , severity(findingInfo(c).severity)
    , message(std::move(msg))
    , key(std::move(k))
{ }

nlohmann::ordered_json Finding::toJson() const
{
    using json = nlohmann::ordered_json;
    json a = json::array();
    for (const auto& x : actions)
        a.push_back(
            {{"kind", fixActionKindName(x.kind)}, {"from", x.from}, {"to", x.to}, {"description", x.description}});
    json j = {{"code", name()}, {"severity", severityName(severity)}, {"key", key.empty() ? json(nullptr) : json(key)},
        {"message", message}, {"pytorch_error", pytorchError.empty() ? json(nullptr) : json(pytorchError)},
        {"fix", fix.empty() ? json(nullptr) : json(fix)}, {"keys", keys}, {"ranks", ranks}, {"offsets", offsets},
        {"actions", a}};
    if (!isUtf8(key)) j["key_hex"] = hexBytes(key); // the exact bytes (README: JSON output)
    if (!counts.empty()) {
        json c = json::object();
        for (const auto& [name, value] : counts)
            c[name] = value;
        j["counts"] = std::move(c);
    }
    return j;
}

nlohmann::json findingToWire(const Finding& f)
{
    nlohmann::json actions = nlohmann::json::array();
    for (const auto& a : f.actions)
        actions.push_back({static_cast<int>(a.kind), a.from, a.to, a.description, a.paramGroups});
    nlohmann::json counts = nlohmann::json::array();
    for (const auto& [name, value] : f.counts)
        counts.push_back({name, value});
    return {static_cast<int>(f.code), static_cast<int>(f.severity), f.message, f.key, f.pytorchError, f.fix,
        f.fixNeutral, f.keys, f.ranks, f.offsets, actions, counts};
}

Finding findingFromWire(const nlohmann::json& w)
{
    Finding f(static_cast<FindingCode>(w.at(0).get<int>()), w.at(2).get<std::string>(), w.at(3).get<std::string>());
    f.severity = static_cast<Severity>(w.at(1).get<int>());
    f.pytorchError = w.at(4).get<std::string>();
    f.fix = w.at(5).get<std::string>();
    f.fixNeutral = w.at(6).get<std::string>();
    f.keys = w.at(7).get<std::vector<std::string>>();
    f.ranks = w.at(8).get<std::vector<int>>();
    f.offsets = w.at(9).get<std::vector<std::vector<int64_t>>>();
    for (const auto& a : w.at(10))
        f.actions.emplace_back(static_cast<FixAction::Kind>(a.at(0).get<int>()), a.at(1).get<std::string>(),
            a.at(2).get<std::string>(), a.at(3).get<std::string>(),
            a.at(4).get<std::vector<std::vector<std::string>>>());
    for (const auto& c : w.at(11))
        f.counts.emplace_back(c.at(0).get<std::string>(), c.at(1).get<int64_t>());
    return f;
}

std::vector<std::vector<size_t>> groupAlikeFindings(const std::vector<Finding>& findings, size_t minGroup)
{
    // alike: the same code, loader error and fix text
    std::vector<std::vector<size_t>> groups;
    std::unordered_map<std::string, size_t> groupOf;
    std::string key;
    for (size_t i = 0; i < findings.size(); ++i) {
        const Finding& f = findings[i];
        key.assign(findingName(f.code));
        key.append(1, '\0').append(f.pytorchError).append(1, '\0').append(f.fix);
        const auto [it, added] = groupOf.try_emplace(key, groups.size());
        if (added) groups.emplace_back();
        groups[it->second].push_back(i);
    }
    std::vector<std::vector<size_t>> out;
    for (auto& g : groups) {
        if (g.size() >= minGroup) {
            out.push_back(std::move(g));
            continue;
        }
        for (size_t i : g)
            out.push_back({i});
    }
    // in the order of each group's first member
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
    return out;
}

} // namespace optscope
