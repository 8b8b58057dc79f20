// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/analysis/diagnoser.h"
#include "optscope/analysis/finding_text.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/format_registry.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/storage.h"
#include "optscope/optim/fqn_normalizer.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace optscope {

const char* loadPathName(LoadPath path)
{
    switch (path) {
    case LoadPath::OptimizerLoadStateDict:
        return "optimizer.load_state_dict";
    case LoadPath::SetOptimizerStateDict:
        return "set_optimizer_state_dict";
    case LoadPath::SetOptimizerStateDictNonStrict:
        return "set_optimizer_state_dict(strict=False)";
    case LoadPath::Fsdp1OptimStateDictToLoad:
        return "fsdp1.optim_state_dict_to_load";
    case LoadPath::ModelLoadStateDict:
        return "model.load_state_dict";
    }
    return "?";
}

nlohmann::ordered_json LoadVerdict::toJson() const
{
    using json = nlohmann::ordered_json;
    json j;
    j["path"] = loadPathName(path);
    if (outcome == LoadOutcome::NotApplicable) {
        j["skipped"] = why;
        return j;
    }
    j["loads"] = outcome == LoadOutcome::Loads;
    if (outcome == LoadOutcome::Raises) {
        j["exception"] = exception;
        j["message"] = message;
    } else {
        if (paramsTotal >= 0) {
            j["params_with_state"] = paramsWithState;
            j["params_total"] = paramsTotal;
            j["step_after_load"] = stepAfterLoad;
        }
        if (!assumedFrozen.empty()) {
            j["assumes_frozen"] = assumedFrozen;
            j["if_trainable"] = json {{"exception", ifTrainableException}, {"message", ifTrainableMessage}};
        }
    }
    j["why"] = why;
    return j;
}

LoadVerdict LoadVerdict::raises(LoadPath path, std::string exception, std::string message, std::string why)
{
    LoadVerdict v;
    v.path = path;
    v.outcome = LoadOutcome::Raises;
    v.exception = std::move(exception);
    v.message = std::move(message);
    v.why = std::move(why);
    return v;
}

LoadVerdict LoadVerdict::loads(LoadPath path, int withState, int total, std::string stepAfterLoad, std::string why)
{
    LoadVerdict v;
    v.path = path;
    v.outcome = LoadOutcome::Loads;
    v.paramsWithState = withState;
    v.paramsTotal = total;
    v.stepAfterLoad = std::move(stepAfterLoad);
    v.why = std::move(why);
    return v;
}

std::string LoadVerdict::outcomeText() const
{
    if (outcome == LoadOutcome::NotApplicable) return "n/a (" + why + ")";
    if (outcome == LoadOutcome::Raises) return "raises " + exception + ": " + message;
    std::string t = "loads";
    if (paramsTotal >= 0)
        t += " (" + std::to_string(paramsWithState) + " of " + std::to_string(paramsTotal) + " parameters get state)";
    if (!stepAfterLoad.empty() && stepAfterLoad != "ok") t += "; the first step() raises " + stepAfterLoad;
    if (!assumedFrozen.empty()) {
        std::string names;
        for (size_t i = 0; i < assumedFrozen.size() && i < 3; ++i)
            names += (i ? ", '" : "'") + assumedFrozen[i] + "'";
        if (assumedFrozen.size() > 3) names += " and " + std::to_string(assumedFrozen.size() - 3) + " more";
        if (assumedFrozen.size() == 1)
            t += " if " + names + " is frozen in the model; raises " + ifTrainableException + ": " + ifTrainableMessage
                + " if it is trainable there";
        else
            t += " if " + names + " are frozen in the model; raises " + ifTrainableException
                + " naming the first of them that is trainable there (" + ifTrainableMessage + " if all are)";
    }
    return t;
}

std::string Diagnosis::verdictsTitle() const
{
    if (!verdictsFor) return "what PyTorch 2.6 does with it";
    return "what PyTorch 2.6 does with " + optimizerText(*verdictsFor);
}

bool Diagnosis::fixable() const
{
    for (const auto& f : findings)
        if (!f.actions.empty()) return true;
    return false;
}

bool Diagnosis::hasProblems() const
{
    for (const auto& f : findings)
        if (f.severity != Severity::Info) return true;
    return false;
}

DiagnosisChange compareDiagnoses(const Diagnosis& before, const Diagnosis& after)
{
    // counts per code, in registry order (the order every list of codes reads in)
    std::vector<DiagnosisChange::CodeCount> counts;
    for (const auto& info : findingRegistry())
        counts.push_back({info.code, 0, 0});
    auto tally = [&counts](const Diagnosis& d, size_t DiagnosisChange::CodeCount::*field) {
        for (const auto& f : d.findings)
            if (f.severity != Severity::Info) ++(counts[static_cast<size_t>(f.code)].*field);
    };
    tally(before, &DiagnosisChange::CodeCount::before);
    tally(after, &DiagnosisChange::CodeCount::after);
    DiagnosisChange change;
    for (const auto& c : counts) {
        if (c.before > 0 && c.after == 0) change.resolved.push_back(c);
        if (c.before > 0 && c.after > 0) change.remaining.push_back(c);
        if (c.before == 0 && c.after > 0) change.added.push_back(c);
    }
    for (const LoadVerdict& was : before.verdicts) {
        if (was.outcome != LoadOutcome::Loads) continue;
        const auto now = std::find_if(
            after.verdicts.begin(), after.verdicts.end(), [&](const LoadVerdict& v) { return v.path == was.path; });
        if (now != after.verdicts.end() && now->outcome == LoadOutcome::Raises) change.broken.push_back(*now);
    }
    return change;
}

std::string DiagnosisChange::brokenText() const
{
    std::string text;
    for (const LoadVerdict& v : broken)
        text += (text.empty() ? "" : "; ") + std::string(loadPathName(v.path)) + " " + v.outcomeText();
    return text;
}

std::string DiagnosisChange::CodeCount::countText() const
{
    if (before > 0 && after > 0) return std::to_string(after) + " of " + std::to_string(before);
    return std::to_string(std::max(before, after));
}

bool DiagnosisChange::noErrorsLeft() const
{
    if (!broken.empty()) return false;
    for (const auto* list : {&remaining, &added})
        for (const auto& c : *list)
            if (findingInfo(c.code).severity == Severity::Error) return false;
    return true;
}

nlohmann::ordered_json DiagnosisChange::toJson() const
{
    auto codes = [](const std::vector<CodeCount>& list) {
        nlohmann::ordered_json a = nlohmann::ordered_json::array();
        for (const auto& c : list)
            a.push_back({{"code", findingName(c.code)}, {"before", c.before}, {"after", c.after}});
        return a;
    };
    nlohmann::ordered_json brokenPaths = nlohmann::ordered_json::array();
    for (const LoadVerdict& v : broken)
        brokenPaths.push_back(v.toJson());
    return {{"resolved", codes(resolved)}, {"remaining", codes(remaining)}, {"added", codes(added)},
        {"broken", brokenPaths}, {"no_errors_left", noErrorsLeft()}};
}

nlohmann::ordered_json Diagnosis::toJson() const
{
    using json = nlohmann::ordered_json;
    json j;
    j["path"] = path;
    j["expected"] = expectedSource.empty() ? json(nullptr) : json(expectedSource);
    j["optimizer_kind"] = optimizerKind;
    j["fixable"] = fixable();
    j["findings"] = json::array();
    for (const auto& f : findings)
        j["findings"].push_back(f.toJson());
    j["verdicts"] = json::object();
    for (const auto& v : verdicts)
        j["verdicts"][loadPathName(v.path)] = v.toJson();
    if (verdictsFor) j["verdicts_for"] = *verdictsFor;
    j["notes"] = notes;
    return j;
}

TargetOptimizer TargetOptimizer::fromCheckpoint(const Checkpoint& optimizer)
{
    const auto views = findOptimizers(optimizer);
    if (views.empty())
        throw Error(ErrorKind::Format, optimizer.path, "holds no optimizer state dict (no param_groups found)");
    TargetOptimizer t;
    t.source = optimizer.path;
    const ParamTable table = ParamTable::build(optimizer);
    t.kind = table.kinds.front();
    for (const auto& g : table.optimizers.front().groups)
        t.groupSizes.push_back(g.params.size());
    bool named = true;
    for (const ParamRow* r : table.rowsOf(0))
        if (r->position >= 0) {
            t.shapes.push_back(r->shape);
            t.zeroDim.push_back(r->param && paramIsZeroDimByState(t.kind, *r->param));
            t.withState.push_back(r->param != nullptr);
            const bool stored = r->confidence == Confidence::Stored || r->source == NameSource::StateKey
                || r->source == NameSource::FlattenedKey;
            named = named && stored && !r->fqn.empty();
            t.names.push_back(r->fqn);
        }
    if (!named) t.names.clear();
    return t;
}

namespace {
/// the target's parameter names whose state presence is @p stateful (empty when the target's names are not known or
/// no parameter has state: a target saved before its first step says nothing about which are frozen)
std::set<std::string> namesWithState(const TargetOptimizer& t, bool stateful)
{
    std::set<std::string> out;
    if (t.names.size() != t.withState.size()
        || std::find(t.withState.begin(), t.withState.end(), true) == t.withState.end())
        return out;
    for (size_t i = 0; i < t.names.size(); ++i)
        if (t.withState[i] == stateful) out.insert(normalizeFqn(t.names[i]).fqn);
    return out;
}
} // namespace

std::set<std::string> TargetOptimizer::frozenNames() const
{
    return namesWithState(*this, false);
}

std::set<std::string> TargetOptimizer::trainableNames() const
{
    return namesWithState(*this, true);
}

std::vector<std::string> TargetOptimizer::paramsOf(
    const ModelParams& model, const std::vector<std::string>& savedNames, std::string& note, bool& unique) const
{
    unique = true;
    size_t total = 0;
    for (const size_t n : groupSizes)
        total += n;
    if (total == model.fqns.size()) return model.fqns;
    // names as the model spells them (wrapper prefixes stripped); empty if one is not a model parameter
    std::map<std::string, std::string> byCanon;
    for (const auto& f : model.fqns)
        byCanon.emplace(normalizeFqn(f).fqn, f);
    auto asModelNames = [&](const std::vector<std::string>& names) {
        std::vector<std::string> out;
        for (const auto& n : names) {
            const auto it = byCanon.find(normalizeFqn(n).fqn);
            if (it == byCanon.end()) return std::vector<std::string> {};
            out.push_back(it->second);
        }
        return out;
    };
    // a position's shape is unknown when empty and not known 0-dim: it fits any parameter
    const auto unknownShape = [&](size_t k) { return shapes[k].empty() && !(k < zeroDim.size() && zeroDim[k]); };
    auto shapesFit = [&](const std::vector<std::string>& fqns) {
        if (fqns.size() != shapes.size()) return false;
        for (size_t k = 0; k < fqns.size(); ++k) {
            const auto it = model.shapes.find(fqns[k]);
            if (!unknownShape(k) && (it == model.shapes.end() || it->second != shapes[k])) return false;
        }
        return true;
    };
    const std::string holds = source + " holds " + std::to_string(total) + " of the model's "
        + std::to_string(model.fqns.size()) + " parameters (the others frozen: only trainable parameters given to it)";
    if (!names.empty()) {
        auto out = asModelNames(names);
        if (!out.empty()) note = holds + ": its names say which";
        return out;
    }
    if (auto out = asModelNames(savedNames); !out.empty() && out.size() == total && shapesFit(out)) {
        note = holds + ": taken as the saved optimizer's, whose names and shapes fit";
        return out;
    }
    if (shapes.size() != total || total > model.fqns.size()) return {};
    auto shapeOf = [&](size_t i) {
        const auto it = model.shapes.find(model.fqns[i]);
        return it == model.shapes.end() ? std::vector<int64_t> {} : it->second;
    };
    // the subsequence of model parameters with the target's shapes: matched from the end, and from the start to
    // see whether the choice is unique. An unknown shape (no state: LBFGS keeps all of it on the first parameter)
    // fits any parameter
    const auto fits = [&](size_t i, size_t k) { return unknownShape(k) || shapeOf(i) == shapes[k]; };
    std::vector<std::string> last(total), first;
    size_t i = model.fqns.size();
    for (size_t k = total; k-- > 0;) {
        while (i > 0 && !fits(i - 1, k))
            --i;
        if (i == 0) return {};
        last[k] = model.fqns[--i];
    }
    for (size_t k = 0, j = 0; k < total; ++k) {
        while (j < model.fqns.size() && !fits(j, k))
            ++j;
        first.push_back(model.fqns[j++]);
    }
    unique = first == last;
    note = holds
        + (unique ? ": the only parameters of the model with its shapes in its order"
                  : ": taken as the last ones in model order with its shapes (frozen layers usually come "
                    "first); several fit, give the target optimizer with param_names to be sure");
    return last;
}

Diagnosis Diagnoser::run()
{
    Diagnosis d;
    d.path = displayLocation(m_cp.path); // shown: a URL without its password and query
    d.expectedSource = m_exp ? m_exp->source : std::string();
    // the structure as check sees it (metadata only: diagnosing never reads every chunk)
    // (and the first chunk of each data file: one read per file finds a file overwritten or of another kind)
    CheckOptions structural;
    structural.readChunks = false;
    structural.firstChunkPerFile = true;
    structural.optimizers = false;
    for (auto& f : checkCheckpoint(m_cp, structural, m_progress).findings)
        d.findings.push_back(std::move(f));
    // a data file missing or unreadable: every loader fails reading it, and what the rest of the file says
    // (param_groups that lived in the missing file, ...) is not the checkpoint
    for (const auto& f : d.findings) {
        if (f.code != FindingCode::MissingFile && f.code != FindingCode::SpecialFile
            && f.code != FindingCode::UnreadableChunk && f.code != FindingCode::ChunkTruncated)
            continue;
        const bool dcp = formatInfo(m_cp.format).loadsThroughDcp;
        const std::string exception = dcp ? "CheckpointException" : "RuntimeError";
        const std::string message = "reading the checkpoint fails: " + f.message;
        if (m_exp)
            for (const LoadPath p : {LoadPath::OptimizerLoadStateDict, LoadPath::SetOptimizerStateDict,
                     LoadPath::SetOptimizerStateDictNonStrict, LoadPath::Fsdp1OptimStateDictToLoad,
                     LoadPath::ModelLoadStateDict})
                d.verdicts.push_back(LoadVerdict::raises(p, exception, message,
                    std::string(dcp ? "torch.distributed.checkpoint.load" : "torch.load")
                        + " reads every file before any state is loaded"));
        d.notes.push_back("the optimizer was not compared with the model: a data file is missing or unreadable ("
            + std::string(f.name())
            + "), so the state read from the other files is not the checkpoint; restore the file first");
        return d;
    }
    if (m_table.optimizers.empty()) {
        Finding f(FindingCode::NoOptimizer,
            "no optimizer state dict was found in " + m_cp.path + " (nothing with \"state\" and \"param_groups\")");
        f.pytorchError = "KeyError: 'param_groups'";
        f.fix = "point the loader at the optimizer part of the checkpoint";
        d.findings.push_back(std::move(f));
        return d;
    }
    d.optimizerKind = optimizerKindName(m_table.kinds.front());
    const size_t beforeOptimizerFindings = d.findings.size();
    for (auto& f : optimizerFindings(m_cp, m_table))
        d.findings.push_back(std::move(f));
    flattenedToNested(d);
    if (!m_exp) {
        wrapperPrefixHints(d);
        return d;
    }
    if (!m_targetNote.empty()) d.notes.push_back(m_targetNote);
    if (m_frozenReading) frozenReading(*expectedModel(), d);
    // each optimizer against the model; with several (a GAN's generator and discriminator optimizers), the
    // verdicts are for the first that fits the model, and those that do not are named, not diagnosed
    const size_t n = m_table.optimizers.size();
    std::vector<Diagnosis> each(n);
    size_t chosen = n;
    for (size_t oi = 0; oi < n; ++oi) {
        m_progress.checkCancelled();
        compare(static_cast<int>(oi), each[oi], true);
        if (chosen == n && !hasError(each[oi])) chosen = oi;
    }
    const bool someFits = n > 1 && chosen < n;
    const bool someDoesNotFit = std::any_of(each.begin(), each.end(), hasError);
    if (n > 1 && someDoesNotFit && !m_target && !m_exp->fromOptimizer) {
        // not all of them fit the whole model: several optimizers over parts of one model (a GAN's generator
        // and discriminator, Lightning's configure_optimizers returning two), each loaded into an optimizer over
        // its part, when their shapes split the model so
        std::string partNote;
        bool unique = true;
        if (auto parts = partsOfModel(partNote, unique)) {
            d.findings.erase(
                d.findings.begin() + static_cast<std::ptrdiff_t>(beforeOptimizerFindings), d.findings.end());
            diagnoseParts(*parts, unique, partNote, d);
            return d;
        }
    }
    if (chosen == n) chosen = 0;
    for (size_t oi = 0; oi < n; ++oi) {
        if (someFits && oi != chosen && hasError(each[oi])) {
            // its ids were named against a model that is not its own: re-keying by those names would be wrong
            for (auto& f : d.findings)
                if (f.key == m_table.optimizers[oi].rootKey() && f.code == FindingCode::IdKeyed) {
                    f.actions.clear();
                    f.fix = "diagnose it against its own model to name its ids";
                    f.fixNeutral = f.fix;
                    f.message = idKeyedMessage(f.key, NameSource::None);
                }
            d.notes.push_back("optimizer '" + m_table.optimizers[oi].rootKey() + "' does not fit " + m_exp->source
                + " (" + firstError(each[oi])
                + "): taken as the optimizer of another model in the file; the verdicts are for '"
                + m_table.optimizers[chosen].rootKey() + "', which fits");
            continue;
        }
        for (auto& f : each[oi].findings)
            d.findings.push_back(std::move(f));
        for (auto& n : each[oi].notes)
            d.notes.push_back(std::move(n));
    }
    d.verdicts = std::move(each[chosen].verdicts);
    if (n > 1) d.verdictsFor = m_table.optimizers[chosen].rootKey();
    d.optimizerKind = optimizerKindName(m_table.kinds[chosen]);
    return d;
}

bool Diagnoser::hasError(const Diagnosis& d)
{
    for (const auto& f : d.findings)
        if (f.severity == Severity::Error) return true;
    return false;
}

std::string Diagnoser::firstError(const Diagnosis& d)
{
    for (const auto& f : d.findings)
        if (f.severity == Severity::Error) return f.name();
    return {};
}

void Diagnoser::frozenReading(const ModelParams& model, Diagnosis& d) const
{
    std::set<std::string> held(m_exp->fqns.begin(), m_exp->fqns.end());
    std::vector<std::string> left;
    for (const auto& f : model.fqns)
        if (!held.count(f)) left.push_back(f);
    const OptimizerView& v = m_table.optimizers.front();
    const std::string where = optimizerText(v.rootKey());
    Finding f(FindingCode::FrozenParams,
        where + " holds " + std::to_string(held.size()) + " of the " + std::to_string(model.fqns.size())
            + " parameters of " + model.source + ": the other " + std::to_string(left.size())
            + " are taken as frozen (requires_grad=False, left out of the optimizer by the training script)"
            + (m_exp->orderKnown ? ": " : ", which ones is a guess by shapes: ") + quoteList(left)
            + ". An optimizer over the trainable parameters loads it (the verdicts below); one over "
              "model.parameters() does not",
        v.rootKey());
    f.pytorchError = std::string("ValueError: ") + kGroupSizeError
        + " (optimizer.load_state_dict into an optimizer over model.parameters())";
    f.fix = "build the optimizer over the trainable parameters, as the run that saved it did; give the loading "
            "code's optimizer (--target-optim) to check that reading";
    f.fixNeutral = "build the optimizer over the trainable parameters, as the run that saved it did; give the "
                   "loading code's optimizer to check that reading";
    f.keys = head(left);
    d.findings.push_back(std::move(f));
}

std::optional<ModelParams> Diagnoser::optimizerParams(const Checkpoint& cp, const ModelParams* model,
    const TargetOptimizer* target, std::string& note, bool& frozenReading)
{
    frozenReading = false;
    if (!model) return std::nullopt;
    std::optional<TargetOptimizer> saved;
    if (!target && !model->fromOptimizer) {
        const auto views = findOptimizers(cp);
        if (views.size() != 1 || views.front().flattened) return std::nullopt;
        try {
            saved = TargetOptimizer::fromCheckpoint(cp);
        } catch (const Error&) {
            return std::nullopt;
        }
        size_t total = 0;
        for (const size_t n : saved->groupSizes)
            total += n;
        if (total == 0 || total >= model->fqns.size()) return std::nullopt;
        saved->source = optimizerText(views.front().rootKey());
        target = &*saved;
    }
    if (!target) return std::nullopt;
    bool unique = true;
    std::vector<std::string> named = savedNames(cp);
    if (named.empty()) {
        // integer ids without param_names: as the one id -> FQN rule names them against this model (the
        // Trainer's decay / no-decay groups over the trainable parameters), which paramsOf checks by shapes
        const ParamTable table = ParamTable::build(cp, model);
        if (!table.optimizers.empty()) named = table.fqnsInOrder(0);
        if (std::find(named.begin(), named.end(), std::string()) != named.end()) named.clear();
    }
    std::vector<std::string> params = target->paramsOf(*model, named, note, unique);
    frozenReading = saved.has_value() && !params.empty();
    if (params.empty() || params == model->fqns) return std::nullopt;
    ModelParams m = *model;
    m.fqns = std::move(params);
    // shapes chose among several fits: names by position rest on that guess, so they are not "known"
    if (!unique) m.orderKnown = false;
    return m;
}

std::vector<std::string> Diagnoser::savedNames(const Checkpoint& cp)
{
    const auto views = findOptimizers(cp);
    if (views.empty()) return {};
    const OptimizerView& v = views.front();
    if (!v.idKeyed) return v.groupParams();
    std::vector<std::string> names;
    for (const auto& g : v.groups) {
        if (g.paramNames.size() != g.params.size()) return {};
        names.insert(names.end(), g.paramNames.begin(), g.paramNames.end());
    }
    return names;
}

namespace {

/// a loading run on @p loadWorldSize data-parallel ranks. DeepSpeed v0.19.5 (read in its source, not run):
/// engine.py _load_zero_checkpoint raises before it opens any optimizer file when the saved dp_world_size is not the
/// current one, whatever the stage, BF16_Optimizer included, elastic_checkpoint or not; _load_checkpoint has by then
/// loaded the weights, the lr scheduler and global_steps. At ZeRO-3 a rank without a model states file of its own
/// (rank >= the saved size) fails before that, in state_dict_factory.py's check_ckpt_list (a bare assert).
void worldSizeFindings(const Checkpoint& cp, int loadWorldSize, Diagnosis& d)
{
    if (loadWorldSize <= 0) return;
    const std::string m = std::to_string(loadWorldSize);
    const int saved = cp.zero ? cp.zero->dataParallelSize : 0;
    const int stage = cp.zero ? cp.zero->stage : 0;
    const OtherWorldSize otherWorldSize = formatInfo(cp.format).otherWorldSize;
    if (otherWorldSize == OtherWorldSize::SavedOnly && saved > 0) {
        const std::string n = std::to_string(saved);
        if (loadWorldSize == saved) {
            d.notes.push_back("saved by " + n
                + " data-parallel ranks and loaded on as many: DeepSpeed's "
                  "load_checkpoint takes the optimizer state as it is partitioned");
            return;
        }
        Finding f(FindingCode::ZeroWorldSizeChange,
            "saved by " + n + " data-parallel ranks (ZeRO stage " + std::to_string(stage) + "), loaded on " + m
                + ": DeepSpeed's load_checkpoint raises before it reads any optimizer state, after it has already "
                  "loaded the weights, the lr scheduler and the step counters");
        const std::string text = "ZeRORuntimeException: The checkpoint being loaded used a DP world size of " + n
            + " but the current world size is " + m
            + ". Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not currently "
              "supported.";
        f.pytorchError = stage == 3 && loadWorldSize > saved
            ? (loadWorldSize - saved == 1 ? "rank " + n : "ranks " + n + " to " + std::to_string(loadWorldSize - 1))
                + " (no zero_pp_rank_R model states file of their own): AssertionError (DeepSpeed's "
                  "SDLoaderBase.check_ckpt_list: assert len(self.ckpt_list) > 0); the others: "
                + text
            : text;
        const std::string tag = cp.files ? locationName(cp.files->rootDir()) : "TAG";
        f.fix = "convert it to a universal checkpoint, which loads on any world size: python "
                "deepspeed/checkpoint/ds_to_universal.py --input_folder SAVE_DIR/"
            + tag + " --output_folder SAVE_DIR/" + tag
            + "_universal, then set \"checkpoint\": {\"load_universal\": true} in the DeepSpeed config and call "
              "load_checkpoint(SAVE_DIR) (it reads latest_universal); or move to FSDP2 with the optimizer state: "
              "optscope-cli reshard "
            + cp.path + " --layout fsdp2 --world-size " + m
            + " -o OUT. load_checkpoint(..., load_optimizer_states=False) loads the weights only and starts the "
              "optimizer afresh; elastic_checkpoint does not help (the check comes first)";
        d.findings.push_back(std::move(f));
        return;
    }
    switch (otherWorldSize) {
    case OtherWorldSize::Universal:
        d.notes.push_back("a DeepSpeed universal checkpoint loads on " + m
            + " data-parallel ranks as on any other number (\"checkpoint\": {\"load_universal\": true})");
        break;
    case OtherWorldSize::LoaderDecides:
        break; // the files alone do not settle it
    case OtherWorldSize::ReshardedOnLoad:
        d.notes.push_back("sharded tensors are resharded on load: loading on " + m
            + " ranks reads each rank's part from the saved chunks, whatever the saved world size");
        break;
    case OtherWorldSize::FullStateDict:
    case OtherWorldSize::SavedOnly: // without the saved world size in the files
        d.notes.push_back("a full state dict: each of the " + m
            + " ranks loads the same whole tensors (set_optimizer_state_dict with full_state_dict shards them)");
        break;
    }
}

} // namespace

ExpectedParams expectedParamsFrom(const std::string& location, const Progress& progress)
{
    if (isFile(location) && !formatTakesFileByName(location)) {
        const auto source = openByteSource(location);
        const uint64_t headSize = std::min<uint64_t>(source->size(), 4096);
        if (headSize > 0 && ModelParams::looksLikeFqnList(source->bytes(0, headSize), headSize))
            return ModelParams::fromFqnList(location);
    }
    return ModelParams::fromCheckpoint(*openCheckpoint(location, progress));
}

Diagnosis diagnoseCheckpoint(const Checkpoint& optim, const ModelParams* expected, const Progress& progress,
    const TargetOptimizer* target, int loadWorldSize)
{
    Diagnosis d = Diagnoser(optim, expected, target, progress).run();
    worldSizeFindings(optim, loadWorldSize, d);
    return d;
}

} // namespace optscope
