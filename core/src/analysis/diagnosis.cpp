// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/analysis/finding_text.h"
#include "optscope/base/error.h"
#include "optscope/formats/format_registry.h"
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
    return change;
}

std::string DiagnosisChange::CodeCount::countText() const
{
    if (before > 0 && after > 0) return std::to_string(after) + " of " + std::to_string(before);
    return std::to_string(std::max(before, after));
}

bool DiagnosisChange::noErrorsLeft() const
{
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
    return {{"resolved", codes(resolved)}, {"remaining", codes(remaining)}, {"added", codes(added)},
        {"no_errors_left", noErrorsLeft()}};
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
            t.withState.push_back(r->param != nullptr);
            const bool stored = r->confidence == Confidence::Stored || r->source == NameSource::StateKey
                || r->source == NameSource::FlattenedKey;
            named = named && stored && !r->fqn.empty();
            t.names.push_back(r->fqn);
        }
    if (!named) t.names.clear();
    return t;
}

std::set<std::string> TargetOptimizer::frozenNames() const
{
    std::set<std::string> out;
    if (names.size() != withState.size() || std::find(withState.begin(), withState.end(), true) == withState.end())
        return out;
    for (size_t i = 0; i < names.size(); ++i)
        if (!withState[i]) out.insert(normalizeFqn(names[i]).fqn);
    return out;
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
    auto shapesFit = [&](const std::vector<std::string>& fqns) {
        if (fqns.size() != shapes.size()) return false;
        for (size_t k = 0; k < fqns.size(); ++k) {
            const auto it = model.shapes.find(fqns[k]);
            if (!shapes[k].empty() && (it == model.shapes.end() || it->second != shapes[k])) return false;
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
    const auto fits = [&](size_t i, size_t k) { return shapes[k].empty() || shapeOf(i) == shapes[k]; };
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

namespace {

/// how nn.Module.load_state_dict lists keys
/// an exception PyTorch raises, its type and str(e) apart (a verdict holds them apart, a finding says "type: message")
struct PythonError
{
    std::string type;
    std::string message;
    std::string text() const { return type + ": " + message; }
};

std::string torchKeyList(const std::vector<std::string>& v)
{
    std::string s;
    for (const auto& k : v)
        s += (s.empty() ? "\"" : ", \"") + k + "\"";
    return s;
}

std::string torchSizeText(const std::vector<int64_t>& s)
{
    std::string t = "torch.Size([";
    for (size_t i = 0; i < s.size(); ++i)
        t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "])";
}

const char* kGroupCountError = "loaded state dict has a different number of parameter groups";
const char* kGroupSizeError
    = "loaded state dict contains a parameter group that doesn't match the size of optimizer's group";

/// the plain leading prefix ("model.", "backbone.") that, added to or removed from the optimizer's names, makes the
/// most of them model names (wrapper prefixes are handled before, by normalising)
struct PrefixMatch
{
    std::string prefix;
    bool optimizerHasIt = false;
    size_t matched = 0;
};

PrefixMatch bestPrefix(const std::vector<std::string>& optim, const std::set<std::string>& model)
{
    PrefixMatch best;
    auto count = [&](const std::function<std::string(const std::string&)>& f) {
        size_t n = 0;
        for (const auto& x : optim)
            n += model.count(f(x)) > 0;
        return n;
    };
    const size_t base = count([](const std::string& x) { return x; });
    std::set<std::string> candidates;
    for (const auto& x : optim)
        if (auto dot = x.find('.'); dot != std::string::npos) candidates.insert(x.substr(0, dot + 1));
    for (const auto& x : model)
        if (auto dot = x.find('.'); dot != std::string::npos) candidates.insert(x.substr(0, dot + 1));
    for (const auto& p : candidates) {
        const size_t strip = count([&](const std::string& x) { return x.rfind(p, 0) == 0 ? x.substr(p.size()) : x; });
        if (strip > std::max(base, best.matched)) best = {p, true, strip};
        const size_t add = count([&](const std::string& x) { return p + x; });
        if (add > std::max(base, best.matched)) best = {p, false, add};
    }
    return best;
}

class Diagnoser
{
public:
    Diagnoser(
        const Checkpoint& cp, const ModelParams* expected, const TargetOptimizer* target, const Progress& progress)
        : m_cp(cp)
        , m_target(target)
        , m_progress(progress)
        , m_optimizerParams(optimizerParams(cp, expected, target, m_targetNote, m_frozenReading))
        , m_model(expected)
        , m_exp(m_optimizerParams ? &*m_optimizerParams : expected)
        , m_table(ParamTable::build(cp, m_exp))
        , m_frozenInTarget(target ? target->frozenNames() : std::set<std::string>())
    { }

    Diagnosis run()
    {
        Diagnosis d;
        d.path = m_cp.path;
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

private:
    static bool hasError(const Diagnosis& d)
    {
        for (const auto& f : d.findings)
            if (f.severity == Severity::Error) return true;
        return false;
    }
    static std::string firstError(const Diagnosis& d)
    {
        for (const auto& f : d.findings)
            if (f.severity == Severity::Error) return f.name();
        return {};
    }

    struct Names
    {
        std::vector<std::string> opt; ///< the optimizer's parameter names in param_groups order ("" unknown)
        std::map<std::string, std::string> rename; ///< optimizer name -> model name
    };

    /// the name set_optimizer_state_dict looks a model parameter up by: wrapper prefixes stripped (DSD's _get_fqns)
    static std::string canon(const std::string& fqn) { return normalizeFqn(fqn).fqn; }

    /// Without a model, names with wrapper prefixes (a torch.compile'd model's "_orig_mod.") are the first thing to
    /// know about: they load only into the wrapped module, and the user has not said which model is the target.
    /// The flattened format's conversion to the nested one, with the target optimizer's param groups: the format
    /// stores no grouping, and a nested file grouped otherwise than the loading code's optimizer does not load
    /// (optimizer.load_state_dict counts groups; set_optimizer_state_dict gives a live group the hyperparameters
    /// of one saved group holding its parameters, none to the others). Target parameters by name when the target
    /// names them, else by position in the saved order (DSD writes param_groups.<fqn>.* group by group).
    void flattenedToNested(Diagnosis& d) const
    {
        if (!m_target) return;
        for (auto& f : d.findings) {
            if (f.code != FindingCode::FlattenedFormat) continue;
            const OptimizerView* v = nullptr;
            for (const auto& view : m_table.optimizers)
                if (view.rootKey() == f.key && view.flattened) v = &view;
            if (!v) continue;
            std::vector<std::string> saved; // the parameters in file order
            std::map<std::string, std::string> savedByCanon;
            for (const auto& [fqn, hps] : v->flatParamHyperparams) {
                saved.push_back(fqn);
                savedByCanon.emplace(normalizeFqn(fqn).fqn, fqn);
            }
            size_t total = 0;
            for (const size_t n : m_target->groupSizes)
                total += n;
            std::string problem;
            std::vector<std::vector<std::string>> groups;
            if (total != saved.size()) {
                problem = "the target optimizer holds " + std::to_string(total) + " parameters, the flattened one "
                    + std::to_string(saved.size());
            } else {
                const bool byName = m_target->names.size() == total;
                size_t pos = 0;
                std::set<std::string> used;
                for (const size_t n : m_target->groupSizes) {
                    groups.emplace_back();
                    for (size_t i = 0; i < n && problem.empty(); ++i, ++pos) {
                        std::string fqn = saved[pos];
                        if (byName) {
                            const auto it = savedByCanon.find(normalizeFqn(m_target->names[pos]).fqn);
                            if (it == savedByCanon.end()) {
                                problem = "the target optimizer's parameter '" + m_target->names[pos]
                                    + "' is not in the flattened one";
                                break;
                            }
                            fqn = it->second;
                        }
                        used.insert(fqn);
                        groups.back().push_back(fqn);
                    }
                }
                if (problem.empty() && used.size() != saved.size())
                    problem = "the target optimizer names a parameter twice";
            }
            if (!problem.empty()) {
                f.fix += "; " + m_target->source + " cannot group it: " + problem;
                continue;
            }
            // groups whose parameters were saved with other hyperparameters take the first one's, as DSD does
            std::map<std::string, const std::map<std::string, const Entry*>*> hyperparamsOf;
            for (const auto& [fqn, hps] : v->flatParamHyperparams)
                hyperparamsOf.emplace(fqn, &hps);
            size_t mixed = 0;
            for (const auto& g : groups)
                for (const auto& fqn : g) {
                    const auto& a = *hyperparamsOf.at(g.front());
                    const auto& b = *hyperparamsOf.at(fqn);
                    bool same = a.size() == b.size();
                    for (auto ia = a.begin(), ib = b.begin(); same && ia != a.end(); ++ia, ++ib)
                        same = ia->first == ib->first && !ia->second->isTensor() && !ib->second->isTensor()
                            && pyRepr(ia->second->value, 4000) == pyRepr(ib->second->value, 4000);
                    mixed += !same;
                }
            const std::string how = std::to_string(groups.size()) + " param group(s) of " + m_target->source
                + (m_target->names.size() == total ? " (by name)" : " (by position)");
            f.fix = "load it with set_optimizer_state_dict, or let `optscope-cli fix` convert it to the nested format "
                    "for optimizer.load_state_dict, with the "
                + how;
            f.fixNeutral = "load it with set_optimizer_state_dict, or apply the fix, which converts it to the nested "
                           "format for optimizer.load_state_dict, with the "
                + how;
            if (mixed)
                f.fix += "; " + std::to_string(mixed) + " parameter(s) were saved with other hyperparameters than "
                    + "the first of their target group, whose values the group takes (as set_optimizer_state_dict "
                      "does)";
            FixAction a {FixAction::Kind::UnflattenFormat, "flattened", "nested",
                "convert to the nested {state, param_groups} format with the target's " + std::to_string(groups.size())
                    + " param groups",
                std::move(groups)};
            f.actions.push_back(std::move(a));
        }
    }

    void wrapperPrefixHints(Diagnosis& d) const
    {
        for (size_t oi = 0; oi < m_table.optimizers.size(); ++oi) {
            std::set<std::string> prefixes;
            std::vector<std::string> names;
            for (const ParamRow* r : m_table.rowsOf(static_cast<int>(oi))) {
                if (r->fqn.empty() || r->fqn == r->normalized) continue;
                for (const auto& p : normalizeFqn(r->fqn).stripped)
                    prefixes.insert(p);
                names.push_back(r->fqn);
            }
            if (names.empty()) continue;
            std::string list;
            for (const auto& p : prefixes)
                list += (list.empty() ? "'" : ", '") + p + "'";
            const OptimizerView& v = m_table.optimizers[oi];
            const std::string root = v.rootKey();
            Finding f(FindingCode::WrapperPrefix,
                std::to_string(names.size()) + " parameter name(s) of "
                    + (root.empty() ? std::string("the optimizer") : "optimizer '" + root + "'")
                    + " carry the wrapper prefix " + list
                    + " ('_orig_mod.': torch.compile; 'module.': DDP; '_fsdp_wrapped_module.': FSDP1): they match the "
                      "wrapped module they were saved from. A plain model raises Missing/Unexpected key(s) for such "
                      "keys in model.load_state_dict",
                root);
            f.fix = "diagnose against the model it will load into (--model): the findings then say what PyTorch does, "
                    "and `optscope-cli fix` renames the keys";
            f.fixNeutral = "diagnose against the model it will load into (Model / reference): the findings then say "
                           "what PyTorch does, and the fix renames the keys";
            for (size_t i = 0; i < names.size() && i < 8; ++i)
                f.keys.push_back(names[i]);
            d.findings.push_back(std::move(f));
        }
    }

    /// the model's parameter dtype for a name (as written, or as DSD names it); nullopt when the model does not say
    std::optional<DType> modelDtype(const std::string& fqn) const
    {
        auto it = m_exp->dtypes.find(fqn);
        if (it != m_exp->dtypes.end()) return it->second;
        if (m_exp->dtypes.empty()) return std::nullopt;
        if (m_dtypeByCanon.empty())
            for (const auto& [k, dt] : m_exp->dtypes)
                m_dtypeByCanon.emplace(canon(k), dt);
        const auto c = m_dtypeByCanon.find(canon(fqn));
        return c == m_dtypeByCanon.end() ? std::nullopt : std::optional<DType>(c->second);
    }

    static bool isFloat8(DType d)
    {
        return d == DType::Float8_e5m2 || d == DType::Float8_e4m3fn || d == DType::Float8_e5m2fnuz
            || d == DType::Float8_e4m3fnuz || d == DType::Float8_e8m0fnu;
    }

    /// whether @p to holds every value of @p from as it is (a cast to it rounds nothing)
    static bool holdsAll(DType from, DType to)
    {
        if (from == to) return true;
        if (to == DType::Float64) return true;
        if (to == DType::Float32) return from != DType::Float64;
        return false; // float16 and bfloat16 hold each other's values only in part, float8 almost nothing
    }

    /// The first float8 parameter of the model the optimizer loads into, "" if none: torch.optim (2.6) has no float8
    /// kernels, whatever the checkpoint holds
    std::string float8Param() const
    {
        for (const auto& fqn : m_exp->fqns)
            if (auto dt = modelDtype(fqn); dt && isFloat8(*dt)) return fqn;
        return {};
    }

    /// What the first step() on float8 parameters raises in PyTorch 2.6: the first kernel of the step without a
    /// float8 implementation, which depends on the optimizer and its settings (measured on the CPU with each
    /// torch.optim class at its defaults: Adam, NAdam, RAdam, Adamax lerp_kernel_scalar; AdamW, RMSprop, Adadelta,
    /// ASGD mul_cpu_reduced_float; SGD with momentum add_stub; Adagrad addcmul_cpu_out; Rprop sign_cpu)
    static PythonError float8StepError(DType dtype)
    {
        const std::string type = dtype == DType::Float8_e5m2 ? "Float8_e5m2"
            : dtype == DType::Float8_e4m3fn                  ? "Float8_e4m3fn"
            : dtype == DType::Float8_e5m2fnuz                ? "Float8_e5m2fnuz"
            : dtype == DType::Float8_e4m3fnuz                ? "Float8_e4m3fnuz"
                                                             : "Float8_e8m0fnu";
        return {"RuntimeError", "\"<kernel>\" not implemented for '" + type + "'"};
    }

    /// the class that loads the saved optimizer: the target optimizer's when it is given and known, else the saved
    /// one's own (the target built as the saved one was)
    OptimizerKind loadingClass(int oi) const
    {
        if (m_target && m_target->kind != OptimizerKind::Unknown) return m_target->kind;
        return m_table.kinds[static_cast<size_t>(oi)];
    }

    /// what the loading class reads and the saved groups or states lack (another class's state, a group edited by
    /// hand or by a tool)
    std::optional<ClassReadMiss> targetClassMiss(int oi) const
    {
        return firstMissForClass(loadingClass(oi), m_cp, m_table.optimizers[static_cast<size_t>(oi)]);
    }

    void classFindings(int oi, OptimizerKind savedKind, const std::string& where, const std::string& root, Diagnosis& d)
    {
        const auto miss = targetClassMiss(oi);
        if (!miss) return;
        const std::string target = optimizerKindName(loadingClass(oi));
        const bool otherClass = m_target && savedKind != m_target->kind && savedKind != OptimizerKind::Unknown;
        const std::string lacks = miss->groupKey
            ? "its param group " + std::to_string(miss->group) + " has no '" + miss->key + "'"
            : "the state of its parameter '" + miss->param + "' has no '" + miss->key + "'";
        Finding f(FindingCode::OptimizerClassMismatch,
            where
                + (otherClass ? " was saved by " + std::string(optimizerKindName(savedKind))
                            + ", the target optimizer (" + m_target->source + ") is " + target
                              : " does not hold what " + std::string(m_target ? "the target optimizer's" : "its own")
                            + " class (" + target + ") reads")
                + ": load_state_dict takes the saved param groups' hyperparameters and the saved states as they are, "
                  "and "
                + lacks + ", which " + target
                + (miss->atLoad ? "'s __setstate__ reads while it loads" : "'s step() reads"),
            root);
        f.pytorchError = "KeyError: '" + miss->key + "' ("
            + (miss->atLoad ? "optimizer.load_state_dict" : "at the first optimizer.step() after loading") + ")";
        f.fix = otherClass
            ? "load it into the optimizer class that saved it (" + std::string(optimizerKindName(savedKind))
                + "), or keep the new optimizer's fresh state: load the model weights only"
            : "the file was edited or written by another tool: add '" + miss->key + "' to the saved "
                + (miss->groupKey ? "param groups (" + target + "'s default for it)" : "states")
                + " before loading, or keep the new optimizer's fresh state: load the model weights only";
        f.fixNeutral = otherClass ? "load it into an optimizer of the class that saved it, or keep the new optimizer's "
                                    "fresh state and load the model weights only"
                                  : "add what the optimizer's class reads to the saved groups or states, or keep the "
                                    "new optimizer's fresh state";
        f.keys = {miss->key};
        d.findings.push_back(std::move(f));
    }

    /// the saved optimizer's DTensor states, when the target model is known to hold plain tensors (a torch.save'd,
    /// safetensors or Trainer model file without DTensors): every step mixes the two. Empty otherwise
    std::vector<std::string> dtensorStatesIntoPlain(int oi) const
    {
        std::vector<std::string> keys;
        if (m_cp.format != CheckpointFormat::TorchSave || !m_model || m_model->fromOptimizer
            || !m_model->tensorClassesKnown || !m_model->dtensors.empty())
            return keys;
        for (const auto& p : m_table.optimizers[static_cast<size_t>(oi)].params)
            for (const auto& [name, e] : p.states)
                if (e->isTensor() && isDTensorSubclass(e->tensor->subclass.str())) keys.push_back(p.key + "." + name);
        return keys;
    }
    static constexpr const char* kMixedDTensor
        = "got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before calling distributed "
          "operators!";

    void dtensorFindings(int oi, const std::string& where, const std::string& root, Diagnosis& d)
    {
        const std::vector<std::string> keys = dtensorStatesIntoPlain(oi);
        if (keys.empty()) return;
        Finding f(FindingCode::DTensorState,
            where + " holds " + std::to_string(keys.size()) + " DTensor state(s) (" + quoteList(keys, 3)
                + "): get_optimizer_state_dict of a fully_shard or tensor-parallel model, torch.save'd. "
                + m_model->source
                + " holds plain tensors: optimizer.load_state_dict and set_optimizer_state_dict "
                  "take the DTensors as they are, and the first step() mixes them with the plain parameters",
            root);
        f.pytorchError = "RuntimeError: aten.lerp_.Scalar: " + std::string(kMixedDTensor)
            + " (at the first optimizer.step() after loading; the op named is the optimizer's first)";
        f.fix = "`optscope-cli gather` of the file (of every rank's file, for a job of several ranks) writes each "
                "DTensor as the plain full tensor, which loads into the plain model; or save it with "
                "StateDictOptions(full_state_dict=True), or load it into the model sharded as it was saved";
        f.fixNeutral = "gather the file (every rank's file) into plain full tensors, or load it into the model "
                       "sharded as it was saved";
        f.keys = head(keys);
        d.findings.push_back(std::move(f));
    }

    /// optimizer.load_state_dict (and so every loader) casts each state tensor but "step" to its parameter's dtype
    /// when the parameter is floating point (Optimizer._process_value_according_to_param_policy, torch 2.6): float32
    /// moments into bfloat16 parameters are rounded without a word; into float8 parameters they load, and the first
    /// step raises
    void dtypeFindings(const std::vector<const ParamRow*>& listed, const Names& names, bool byName,
        const std::string& where, const std::string& root, Diagnosis& d) const
    {
        const ModelParams& exp = *m_exp;
        if (exp.dtypes.empty()) return;
        std::vector<std::string> casts;
        std::map<std::string, int> pairs; // "float32 -> bfloat16" -> count
        for (size_t i = 0; i < listed.size(); ++i) {
            const ParamRow* r = listed[i];
            if (!r->param) continue;
            std::string fqn;
            if (byName) {
                const auto it = names.rename.find(r->fqn);
                fqn = it == names.rename.end() ? r->fqn : it->second;
            } else {
                fqn = i < exp.fqns.size() ? exp.fqns[i] : std::string();
            }
            const auto pdt = fqn.empty() ? std::nullopt : modelDtype(fqn);
            if (!pdt || !dtypeIsFloatingPoint(*pdt) || isFloat8(*pdt)) continue;
            for (const auto& [name, e] : r->param->states) {
                if (name == "step" || !e->isTensor() || holdsAll(e->tensor->dtype, *pdt)) continue;
                if (!dtypeIsFloatingPoint(e->tensor->dtype)) continue; // integer state: counts, never moments
                casts.push_back(fqn + "." + name + " " + std::string(dtypeName(e->tensor->dtype)) + " -> "
                    + std::string(dtypeName(*pdt)));
                ++pairs[std::string(dtypeName(e->tensor->dtype)) + " -> " + std::string(dtypeName(*pdt))];
            }
        }
        if (!casts.empty()) {
            std::string kinds;
            for (const auto& [pair, n] : pairs)
                kinds += (kinds.empty() ? "" : ", ") + pair + " (" + std::to_string(n) + ")";
            Finding f(FindingCode::StateDtypeCast,
                std::to_string(casts.size()) + " state tensor(s) of " + where + " are cast to their parameter's dtype "
                    + "in " + exp.source + ", which holds less: " + kinds + ", e.g. " + quoteList(casts, 3)
                    + ". load_state_dict casts every state but step to the parameter's dtype: the moments are rounded, "
                      "without an error",
                root);
            f.fix = "load into a model whose parameters keep the saved precision (mixed precision keeps float32 "
                    "parameters and casts in autocast), or accept the rounding";
            f.keys = head(casts);
            d.findings.push_back(std::move(f));
        }
        if (const std::string p = float8Param(); !p.empty()) {
            const DType dt = *modelDtype(p);
            Finding f(FindingCode::Float8Params,
                "the model's parameters are " + std::string(dtypeName(dt)) + " ('" + p + "' in " + exp.source
                    + "): the state loads, cast to " + std::string(dtypeName(dt))
                    + ", but torch.optim has no float8 kernels and the first step() raises; "
                      "set_optimizer_state_dict raises in its own first step",
                root);
            // when and where: the kernel depends on the optimizer and its settings
            f.pytorchError = float8StepError(dt).text()
                + " (at the first optimizer.step(); the kernel depends on the optimizer and its settings: "
                  "lerp_kernel_scalar for Adam at its defaults on the CPU)";
            f.fix
                = "train float8 with float32 or bfloat16 parameters (torchao's Float8Linear casts in the forward) and "
                  "load the optimizer into those";
            f.keys = {p};
            d.findings.push_back(std::move(f));
        }
    }

    /// the model's parameter shape for a name (as written, or as DSD names it)
    const std::vector<int64_t>* modelShape(const std::string& fqn) const
    {
        auto it = m_exp->shapes.find(fqn);
        if (it != m_exp->shapes.end()) return &it->second;
        if (m_shapeByCanon.empty()) // built on first use: a scan per lookup was quadratic at 100k parameters
            for (const auto& [k, shape] : m_exp->shapes)
                m_shapeByCanon.emplace(canon(k), &shape);
        const auto c = m_shapeByCanon.find(canon(fqn));
        return c == m_shapeByCanon.end() ? nullptr : c->second;
    }

    /// Several optimizers over disjoint parts of the model: each optimizer's parameters, by the shapes its state
    /// gives (in param_groups order), matched in model order among the parameters the optimizers before it did not
    /// take. Every optimizer must find its parameters; model tensors left over are buffers or frozen parameters.
    /// nullopt when they do not fit so.
    std::optional<std::vector<std::vector<std::string>>> partsOfModel(std::string& note, bool& unique) const
    {
        const ModelParams& exp = *m_exp;
        const ParamTable bare = ParamTable::build(m_cp); // shapes from the state itself, not from a naming
        if (bare.optimizers.size() != m_table.optimizers.size()) return std::nullopt;
        std::vector<bool> used(exp.fqns.size(), false);
        std::vector<std::vector<std::string>> parts(bare.optimizers.size());
        std::map<std::vector<int64_t>, std::set<size_t>> holders; // shape -> optimizers holding one of that shape
        std::vector<size_t> stateless; // optimizers whose state tells no shape (SGD without momentum)
        std::vector<size_t> counts(bare.optimizers.size(), 0);
        unique = true;
        for (size_t oi = 0; oi < bare.optimizers.size(); ++oi) {
            std::vector<const ParamRow*> listed;
            for (const ParamRow* r : bare.rowsOf(static_cast<int>(oi)))
                if (r->position >= 0) listed.push_back(r);
            std::sort(listed.begin(), listed.end(),
                [](const ParamRow* a, const ParamRow* b) { return a->position < b->position; });
            if (listed.empty()) return std::nullopt;
            counts[oi] = listed.size();
            if (std::none_of(listed.begin(), listed.end(), [&](const ParamRow* r) { return r->param; })) {
                stateless.push_back(oi);
                continue;
            }
            std::vector<std::string> part;
            auto fits = [&](size_t j, const std::vector<int64_t>& shape) {
                return !used[j] && modelShape(exp.fqns[j]) && *modelShape(exp.fqns[j]) == shape;
            };
            size_t from = 0;
            int group = listed.front()->group;
            for (const ParamRow* r : listed) {
                const auto shape = stateShape(*r, bare.kinds[oi]);
                if (!shape) return std::nullopt; // no state tells its shape
                if (r->group != group) group = r->group, from = 0;
                // a group lists its parameters in model order, as module.parameters() gives them: the next free one
                // after the one before; else (a group in another order) the first free one
                size_t j = from;
                while (j < exp.fqns.size() && !fits(j, *shape))
                    ++j;
                if (j == exp.fqns.size())
                    for (j = 0; j < exp.fqns.size() && !fits(j, *shape);)
                        ++j;
                if (j == exp.fqns.size()) return std::nullopt;
                used[j] = true;
                part.push_back(exp.fqns[j]);
                holders[*shape].insert(oi);
                from = j + 1;
            }
            parts[oi] = std::move(part);
        }
        // one optimizer without any state (SGD without momentum keeps none): the parameters the others left, in model
        // order, when there are as many as it lists (more: some are buffers, and which is a guess)
        if (stateless.size() > 1) return std::nullopt;
        for (const size_t oi : stateless) {
            std::vector<size_t> free;
            for (size_t j = 0; j < exp.fqns.size(); ++j)
                if (!used[j]) free.push_back(j);
            if (free.size() < counts[oi]) return std::nullopt;
            if (free.size() > counts[oi]) unique = false;
            for (size_t k = 0; k < counts[oi]; ++k) {
                used[free[k]] = true;
                parts[oi].push_back(exp.fqns[free[k]]);
                if (modelShape(exp.fqns[free[k]])) holders[*modelShape(exp.fqns[free[k]])].insert(oi);
            }
        }
        // a shape two optimizers hold, or one a tensor in none has: which of them holds which is a guess
        for (const auto& [shape, who] : holders)
            if (who.size() > 1) unique = false;
        std::vector<std::string> rest;
        for (size_t j = 0; j < exp.fqns.size(); ++j) {
            if (used[j]) continue;
            rest.push_back(exp.fqns[j]);
            if (modelShape(exp.fqns[j]) && holders.count(*modelShape(exp.fqns[j]))) unique = false;
        }
        note = std::to_string(parts.size()) + " optimizers over parts of " + exp.source + ", none over all of it: ";
        for (size_t oi = 0; oi < parts.size(); ++oi)
            note += (oi ? "; '" : "'") + m_table.optimizers[oi].rootKey() + "' over " + std::to_string(parts[oi].size())
                + " (" + quoteList(parts[oi], 2) + ")";
        note += unique ? ", the parameters with its shapes in model order"
                       : ", taken in model order by shapes (several fit: the names are a guess)";
        if (!rest.empty())
            note += "; in none: " + quoteList(rest, 3)
                + " (buffers, which a state dict does not tell from parameters, or frozen parameters)";
        note += ". Each is diagnosed against an optimizer over its part, as the training code that built them "
                "(Lightning's configure_optimizers, a GAN's two optimizers) builds them again";
        return parts;
    }

    /// the parameter's shape as its own state gives it (a state that has the parameter's shape: exp_avg,
    /// momentum_buffer, ...), whatever name a table gave the row; nullopt without such a state
    static std::optional<std::vector<int64_t>> stateShape(const ParamRow& row, OptimizerKind kind)
    {
        if (!row.param) return std::nullopt;
        for (const auto& [name, e] : row.param->states) {
            if (!e->isTensor()) continue;
            const auto want = expectedStateShape(kind, name, e->tensor->shape);
            if (want && *want == e->tensor->shape) return e->tensor->shape;
        }
        return std::nullopt;
    }

    /// each optimizer against the model restricted to its part (diagnosed as with --target-optim over that part)
    void diagnoseParts(
        const std::vector<std::vector<std::string>>& parts, bool unique, const std::string& note, Diagnosis& d)
    {
        d.notes.push_back(note);
        for (size_t oi = 0; oi < parts.size(); ++oi) {
            ModelParams sub = *m_exp;
            sub.fqns = parts[oi];
            if (!unique) sub.orderKnown = false; // names by position rest on the shapes' guess (as optimizerParams)
            sub.source = m_exp->source + " ('" + m_table.optimizers[oi].rootKey() + "''s part)";
            Diagnoser inner(m_cp, &sub, nullptr, m_progress);
            inner.m_reportedModelPart = oi > 0; // the model state dict beside them is compared once
            const std::string root = inner.m_table.optimizers[oi].rootKey();
            for (auto& f : optimizerFindings(m_cp, inner.m_table))
                if (f.key == root) d.findings.push_back(std::move(f));
            Diagnosis one;
            inner.compare(static_cast<int>(oi), one, true);
            for (auto& f : one.findings)
                d.findings.push_back(std::move(f));
            for (auto& n : one.notes)
                d.notes.push_back(std::move(n));
            if (oi == 0) {
                d.verdicts = std::move(one.verdicts);
                d.verdictsFor = root;
                d.optimizerKind = optimizerKindName(inner.m_table.kinds[oi]);
            } else {
                for (const auto& v : one.verdicts)
                    if (v.path == LoadPath::OptimizerLoadStateDict)
                        d.notes.push_back("optimizer '" + root + "' into an optimizer over its part: "
                            + std::string(loadPathName(v.path)) + " " + v.outcomeText());
            }
        }
    }

    /// first state of @p row whose shape is not what the parameter @p shape needs; "" if none
    /// optimizer.load_state_dict pairs the saved parameters with the target's by position: where both sides record
    /// names (param_names, FQN keys or the model saved beside it; the target's own, or model order for the default
    /// one-group target) and the
    /// saved name at a position is another target parameter's, that parameter gets the other's state, silently where
    /// the shapes agree. @p sameOrder: the target is taken to build the saved groups (a resume, the Trainer)
    void positionFindings(const std::vector<const ParamRow*>& listed, const Names& names, bool sameOrder,
        const std::string& where, const std::string& root, bool shapesFit, Diagnosis& d) const
    {
        const ModelParams& exp = *m_exp;
        std::vector<std::string> targetNames;
        // a target without names over one group holds model.parameters(): the model's order
        const bool modelOrder = m_target ? m_target->names.empty() && m_target->groupSizes.size() == 1 : !sameOrder;
        if (m_target && m_target->names.size() == listed.size())
            targetNames = m_target->names;
        else if (modelOrder && !m_frozenReading && !exp.fromOptimizer && exp.orderKnown
            && exp.fqns.size() == listed.size())
            targetNames = exp.fqns;
        if (targetNames.empty()) return;
        std::set<std::string> targetSet;
        for (const auto& n : targetNames)
            targetSet.insert(canon(n));
        std::vector<std::string> pairs, keys;
        for (size_t i = 0; i < listed.size(); ++i) {
            const ParamRow& r = *listed[i];
            // names the file records, or the order of the model saved beside it (the saving run's own)
            const bool known = r.confidence == Confidence::Stored
                || (r.source == NameSource::ModelInFile && r.confidence == Confidence::Exact);
            if (!known || r.fqn.empty()) continue;
            const auto renamed = names.rename.find(r.fqn);
            const std::string saved = canon(renamed == names.rename.end() ? r.fqn : renamed->second);
            const std::string target = canon(targetNames[i]);
            if (saved == target || !targetSet.count(saved)) continue; // the same, or not a permutation of names
            pairs.push_back(target + " <- " + saved);
            keys.push_back(target);
        }
        if (pairs.empty()) return;
        Finding f(FindingCode::ParamOrderMismatch,
            where + " lists its parameters in another order than " + (m_target ? m_target->source : exp.source) + ": "
                + std::to_string(pairs.size())
                + " position(s) pair a parameter with another's state under optimizer.load_state_dict, which pairs "
                  "by position: "
                + quoteList(pairs, 4)
                + (shapesFit ? " (their shapes agree: it loads and trains on the wrong moments without a word)"
                             : " (the first step() fails where the shapes differ)"),
            root);
        f.pytorchError = shapesFit
            ? "none: optimizer.load_state_dict loads each state into the parameter at its position"
            : "RuntimeError: The size of tensor a must match the size of tensor b (at the first "
              "optimizer.step() after loading)";
        f.fix = "load it with set_optimizer_state_dict, which pairs by name, or build the optimizer's param groups in "
                "the saved order";
        f.keys = head(keys);
        d.findings.push_back(std::move(f));
    }

    /// DSD's _split_optim_state_dict gives each saved group's hyperparameters to the last of the target's groups that
    /// holds one of its parameters: the first target group left with none (its first step() raises KeyError on a
    /// hyperparameter), or -1. Known only for FQN-keyed state and a target that records its parameters' names
    int targetGroupWithoutHyperparameters(const OptimizerView& v) const
    {
        if (!m_target || m_target->names.empty() || v.idKeyed || v.flattened) return -1;
        std::map<std::string, size_t> targetGroupOf; // canonical name -> target group
        size_t pos = 0;
        for (size_t g = 0; g < m_target->groupSizes.size(); ++g)
            for (size_t k = 0; k < m_target->groupSizes[g] && pos < m_target->names.size(); ++k, ++pos)
                targetGroupOf[normalizeFqn(m_target->names[pos]).fqn] = g;
        std::vector<bool> given(m_target->groupSizes.size(), false);
        for (const auto& saved : v.groups) {
            int last = -1;
            for (const auto& p : saved.params)
                if (const auto it = targetGroupOf.find(normalizeFqn(p).fqn); it != targetGroupOf.end())
                    last = std::max(last, static_cast<int>(it->second));
            if (last >= 0) given[static_cast<size_t>(last)] = true;
        }
        for (size_t g = 0; g < given.size(); ++g)
            if (!given[g]) return static_cast<int>(g);
        return -1;
    }

    /// FQN-keyed state paired with the model's parameters by name (DSD, FSDP1): some state does not fit the shape of
    /// the parameter of its name
    bool namedStateMisfits(const OptimizerView& v, const std::vector<const ParamRow*>& listed, OptimizerKind kind) const
    {
        std::set<std::string> stateKeys;
        for (const auto& p : v.params)
            stateKeys.insert(p.key);
        for (const auto& fqn : m_exp->fqns) {
            const std::string key = normalizeFqn(fqn).fqn;
            if (!stateKeys.count(key) || !modelShape(fqn)) continue;
            for (const ParamRow* r : listed)
                if (r->id == key && !wrongState(*r, kind, *modelShape(fqn)).empty()) return true;
        }
        return false;
    }

    std::string wrongState(const ParamRow& row, OptimizerKind kind, const std::vector<int64_t>& shape) const
    {
        if (!row.param) return {};
        for (const auto& [name, e] : row.param->states) {
            if (!e->isTensor()) continue;
            const auto want = expectedStateShape(kind, name, shape);
            if (!want || e->tensor->shape == *want) continue;
            if (kind == OptimizerKind::Adafactor && shape.size() < 2 && name == "variance" && e->tensor->shape == shape)
                continue;
            return name + " " + torchSizeText(e->tensor->shape) + " vs " + torchSizeText(*want);
        }
        return {};
    }

    std::vector<size_t> targetGroupSizes() const
    {
        if (m_target) return m_target->groupSizes;
        if (m_exp->fromOptimizer && !m_exp->groups.empty()) {
            std::vector<size_t> s;
            for (const auto& g : m_exp->groups)
                s.push_back(g.size());
            return s;
        }
        return {m_exp->fqns.size()};
    }

    /// What the rules of compare() read about one optimizer against the model, worked out once.
    struct OptimizerReading
    {
        int oi = 0;
        const OptimizerView* view = nullptr;
        OptimizerKind kind = OptimizerKind::Unknown;
        std::string root; ///< its key path
        std::string where; ///< its name in messages
        std::vector<const ParamRow*> listed; ///< its parameters by position
        bool fsdp1 = false; ///< FSDP1 flat parameters, named by their layout
        bool rankSlices = false; ///< one rank's raw FSDP1 slices
        bool named = false; ///< every listed parameter has a name
        /// ids named by the Hugging Face Trainer's groups: the run resuming it builds the same two groups from the
        /// same model (Trainer.create_optimizer), so that is the target, and each position has its named parameter
        bool trainer = false;
        /// no target optimizer given, and the saved groups hold as many parameters as the model: the loading code is
        /// taken to build the same groups (a resume runs the same training script: decay / no-decay, per-layer lr)
        bool sameGroupsAssumed = false;
        std::vector<size_t> savedSizes, targetSizes; ///< parameters per group
        size_t savedTotal = 0, targetTotal = 0;
        std::string targetText; ///< the optimizer it loads into, in words
    };

    /// The findings of one optimizer against the model, and (@p withVerdicts) what each load path does with it. The
    /// rules run in this order, each reading what the ones before found: flat FSDP1 state, names (prefixes, renames,
    /// then coverage: missing, extra, frozen), param groups, state shapes, positions, dtypes, class, DTensors, the
    /// model part; then the verdicts, whose errors the name findings quote.
    void compare(int oi, Diagnosis& d, bool withVerdicts)
    {
        const OptimizerReading r = readOptimizer(oi, d);
        const OptimizerView& v = *r.view;
        flatStateFindings(r, d);
        // names: wrapper/plain prefixes, then renamed layers (same shape, same position), then what is left
        Names names;
        for (const ParamRow* row : r.listed)
            names.opt.push_back(row->fqn);
        const size_t firstFinding = d.findings.size();
        if (r.named && !r.fsdp1) {
            nameFindings(oi, r.where, r.listed, names, d);
            coverageFindings(r, names, d);
        }
        const std::string groupError = groupFindings(r, d);
        const std::vector<std::string> wrongByPosition = shapeFindings(r, names, groupError, d);
        if (groupError.empty() && !r.fsdp1 && !r.rankSlices && !v.flattened)
            positionFindings(
                r.listed, names, r.trainer || r.sameGroupsAssumed, r.where, r.root, wrongByPosition.empty(), d);
        dtypeFindings(r.listed, names, r.named && !v.idKeyed, r.where, r.root, d);
        classFindings(oi, r.kind, r.where, r.root, d);
        dtensorFindings(oi, r.where, r.root, d);
        // the model state dict saved beside the optimizer
        modelPartFindings(names.rename, d);

        Diagnosis v2;
        verdicts({oi, r.kind, v, r.listed, groupError, wrongByPosition}, v2);
        quoteLoadErrors(v2.verdicts, firstFinding, d);
        if (withVerdicts) d.verdicts = std::move(v2.verdicts);
    }

    OptimizerReading readOptimizer(int oi, Diagnosis& d) const
    {
        OptimizerReading r;
        r.oi = oi;
        r.view = &m_table.optimizers[static_cast<size_t>(oi)];
        r.kind = m_table.kinds[static_cast<size_t>(oi)];
        r.root = r.view->rootKey();
        r.where = optimizerText(r.root);
        const ModelParams& exp = *m_exp;
        for (const ParamRow* row : m_table.rowsOf(oi))
            if (row->position >= 0 && row->source != NameSource::Fsdp1Layout) r.listed.push_back(row);
        r.fsdp1 = m_table.sources[static_cast<size_t>(oi)] == NameSource::Fsdp1Layout;
        r.rankSlices = m_table.rankSlices[static_cast<size_t>(oi)];
        r.named = !r.listed.empty()
            && std::all_of(r.listed.begin(), r.listed.end(), [](const ParamRow* row) { return !row->fqn.empty(); });
        for (const auto& g : r.view->groups)
            r.savedSizes.push_back(g.params.size());
        r.trainer
            = !m_target && !exp.fromOptimizer && m_table.sources[static_cast<size_t>(oi)] == NameSource::TrainerGroups;
        r.targetSizes = r.trainer ? r.savedSizes : targetGroupSizes();
        for (auto s : r.savedSizes)
            r.savedTotal += s;
        for (auto s : r.targetSizes)
            r.targetTotal += s;
        r.sameGroupsAssumed = !m_target && !exp.fromOptimizer && !r.trainer && !r.view->groupsGuessed
            && r.savedSizes.size() > 1 && r.savedTotal == r.targetTotal;
        if (r.sameGroupsAssumed) {
            r.targetSizes = r.savedSizes;
            std::string sizes;
            for (size_t g = 0; g < r.savedSizes.size(); ++g)
                sizes += (g ? ", " : "") + std::to_string(r.savedSizes[g]);
            d.notes.push_back("no target optimizer given: the loading code is taken to build the same "
                + std::to_string(r.savedSizes.size()) + " param groups as " + r.where + " ([" + sizes
                + "] parameters), as a resume with the same training script does; one group over "
                  "model.parameters() would raise ValueError: "
                + kGroupCountError + " (give the target optimizer to check it)");
        }
        r.targetText = m_target   ? m_target->source
            : m_frozenReading     ? "an optimizer over the model's trainable parameters (the ones it holds)"
            : exp.fromOptimizer   ? exp.source
            : r.trainer           ? "the Hugging Face Trainer's optimizer (decay and no-decay groups over the model)"
            : r.sameGroupsAssumed ? "the same groups over the model"
                                  : "an optimizer over model.parameters() in one group";
        return r;
    }

    /// raw FSDP1 flat-parameter state: one rank's slices, or flat parameters
    void flatStateFindings(const OptimizerReading& reading, Diagnosis& d) const
    {
        const OptimizerView& v = *reading.view;
        const OptimizerKind kind = reading.kind;
        const std::string& root = reading.root;
        const std::string& where = reading.where;
        const ModelParams& exp = *m_exp;
        const std::vector<const ParamRow*>& listed = reading.listed;
        const bool fsdp1 = reading.fsdp1;
        const bool rankSlices = reading.rankSlices;
        const size_t savedTotal = reading.savedTotal;
        const bool named = reading.named;
        bool allFlat = v.idKeyed && !v.params.empty() && !keepsAllStateOnFirstParam(kind);
        for (const auto& p : v.params)
            for (const auto& [name, e] : p.states)
                if (e->isTensor() && !e->tensor->shape.empty()) allFlat = allFlat && e->tensor->shape.size() == 1;
        if (rankSlices) {
            size_t held = 0;
            for (const ParamRow* r : listed)
                held += r->param != nullptr;
            Finding f(FindingCode::Fsdp1FlatState,
                where + " is one rank's raw optimizer state of FSDP1 with use_orig_params=True: each parameter's state "
                    + "is the rank's 1-D slice of it (" + std::to_string(held) + " of its " + std::to_string(savedTotal)
                    + " parameters have elements on this rank). It loads only on the same rank of the same FSDP1 "
                      "model and world size; anywhere else the slices do not fit the parameters",
                root);
            f.pytorchError = "RuntimeError: The size of tensor a must match the size of tensor b (at the first "
                             "optimizer.step() after loading it into an unsharded model)";
            f.fix = "unflatten it with all ranks' files: `optscope-cli unflatten RANK_FILE... --model MODEL`";
            f.fixNeutral = "unflatten it with all ranks' files and the model (optscope-cli unflatten)";
            d.findings.push_back(std::move(f));
        } else if (fsdp1 || (allFlat && !named && savedTotal < exp.fqns.size())) {
            Finding f(FindingCode::Fsdp1FlatState,
                where + " holds " + std::to_string(savedTotal) + " flat 1-D parameters for the "
                    + std::to_string(exp.fqns.size()) + " parameters of " + exp.source
                    + ": this is raw FSDP1 flat-parameter state (one rank's padded shard per flat parameter)",
                root);
            f.pytorchError = std::string("ValueError: ") + kGroupSizeError;
            f.fix = "unflatten it with all ranks' files: `optscope-cli unflatten RANK_FILE... --model MODEL`";
            f.fixNeutral = "unflatten it with all ranks' files and the model (optscope-cli unflatten)";
            d.findings.push_back(std::move(f));
        }
    }

    /// after the name rules: the model's parameters without saved state (missing, or frozen when saved or where it
    /// loads) and the saved ones the model lacks
    void coverageFindings(const OptimizerReading& reading, const Names& names, Diagnosis& d) const
    {
        const OptimizerView& v = *reading.view;
        const std::string& root = reading.root;
        const std::string& where = reading.where;
        const ModelParams& exp = *m_exp;
        const std::vector<const ParamRow*>& listed = reading.listed;
        const bool trainer = reading.trainer;
        std::set<std::string> expected; // the names DSD looks up
        for (const auto& n : exp.fqns)
            expected.insert(canon(n));
        std::vector<std::string> missing, extra;
        std::set<std::string> covered;
        for (const auto& n : names.opt) {
            const auto it = names.rename.find(n);
            const std::string to = it == names.rename.end() ? n : it->second;
            if (expected.count(to))
                covered.insert(to);
            else
                extra.push_back(n);
        }
        // in the target without state after its step: frozen in the loading run as when it was saved
        std::vector<std::string> frozenHere;
        for (const auto& n : exp.fqns)
            if (!covered.count(canon(n))) (m_frozenInTarget.count(canon(n)) ? frozenHere : missing).push_back(n);
        // a frozen-params warning: "<count> parameter(s) <what>: <the names>"
        const auto frozenFinding
            = [&](const std::vector<std::string>& names, const std::string& what, const char* fix) {
                  Finding f(FindingCode::FrozenParams,
                      std::to_string(names.size()) + " parameter(s) " + what + ": " + quoteList(names), root);
                  f.fix = fix;
                  f.keys = head(names);
                  d.findings.push_back(std::move(f));
              };
        if (!frozenHere.empty())
            frozenFinding(frozenHere,
                "of " + exp.source + " are not in " + where + ", and " + m_target->source
                    + " holds them without state after its step: frozen (requires_grad=False) when it was saved "
                      "and when it loads",
                "nothing to do while they stay frozen (set_optimizer_state_dict looks up state only for "
                "parameters that require grad); one made trainable starts with empty state");
        // saved with state, frozen in the target: set_optimizer_state_dict drops that state without a word
        std::vector<std::string> dropped;
        if (!v.idKeyed)
            for (const ParamRow* r : listed)
                if (r->param && m_frozenInTarget.count(canon(r->fqn))) dropped.push_back(r->fqn);
        if (!dropped.empty())
            frozenFinding(dropped,
                "have saved state in " + where + ", but " + m_target->source
                    + " holds them without state after its step: frozen (requires_grad=False) where it loads. "
                      "set_optimizer_state_dict looks up state only for parameters that require grad and drops "
                      "theirs",
                "make them trainable before loading if their state should carry over; "
                "optimizer.load_state_dict of the same file keeps it");
        if (!missing.empty() && trainer) {
            // the Trainer puts requires_grad=False parameters in no group: they were frozen when it saved
            frozenFinding(missing,
                "of " + exp.source + " are in neither of the Trainer's param groups of " + where
                    + ": frozen (requires_grad=False) when it was saved",
                "nothing to do if they are still frozen; a parameter trainable now starts with empty state "
                "(and the Trainer's groups then differ in size: optimizer.load_state_dict raises)");
        } else if (!missing.empty()) {
            Finding f(FindingCode::MissingState,
                std::to_string(missing.size()) + " parameter(s) of " + exp.source + " are not in " + where + ": "
                    + quoteList(missing),
                root);
            f.fix = "the optimizer was saved for a different model, or before these layers were added; if they "
                    "are new, build the optimizer state for them from zero: load with optimizer.load_state_dict "
                    "after rebuilding the param groups, or drop them from the model before loading";
            f.keys = head(missing);
            d.findings.push_back(std::move(f));
        }
        if (!extra.empty()) {
            Finding f(FindingCode::ExtraParams,
                std::to_string(extra.size()) + " parameter(s) of " + where + " are not in " + exp.source + ": "
                    + quoteList(extra)
                    + "; set_optimizer_state_dict ignores them silently, optimizer.load_state_dict pairs by "
                      "position and counts them",
                root);
            f.fix = "check that the model is the one this optimizer was trained with";
            f.keys = head(extra);
            d.findings.push_back(std::move(f));
        }
    }

    /// the positional loader's group count and sizes; returns the ValueError load_state_dict raises ("" if they fit)
    std::string groupFindings(const OptimizerReading& reading, Diagnosis& d) const
    {
        const OptimizerView& v = *reading.view;
        const std::string& root = reading.root;
        const std::string& where = reading.where;
        const ModelParams& exp = *m_exp;
        const std::vector<const ParamRow*>& listed = reading.listed;
        const bool fsdp1 = reading.fsdp1;
        const std::vector<size_t>& savedSizes = reading.savedSizes;
        const std::vector<size_t>& targetSizes = reading.targetSizes;
        const size_t savedTotal = reading.savedTotal;
        const size_t targetTotal = reading.targetTotal;
        const std::string& targetText = reading.targetText;
        // the positional loader: group count and sizes, then state shapes by position
        std::string groupError;
        if (savedSizes.size() != targetSizes.size())
            groupError = kGroupCountError;
        else if (savedSizes != targetSizes)
            groupError = kGroupSizeError;
        // a flattened optimizer's groups are a guess, and set_optimizer_state_dict (the path that reads it) takes
        // them from the live optimizer: nothing to compare (flattened-format covers optimizer.load_state_dict)
        if (!groupError.empty() && !fsdp1 && !v.groupsGuessed) {
            std::string sizes;
            for (size_t g = 0; g < savedSizes.size(); ++g)
                sizes += (g ? ", " : "") + std::to_string(savedSizes[g]);
            std::string tsizes;
            for (size_t g = 0; g < targetSizes.size(); ++g)
                tsizes += (g ? ", " : "") + std::to_string(targetSizes[g]);
            Finding f(FindingCode::ParamGroupsMismatch,
                where + " has " + std::to_string(savedSizes.size()) + " param group(s) of [" + sizes + "] parameters; "
                    + targetText + " has " + std::to_string(targetSizes.size()) + " of [" + tsizes + "]",
                root);
            f.pytorchError = "ValueError: " + groupError + " (optimizer.load_state_dict"
                + (v.idKeyed ? std::string(" and set_optimizer_state_dict)")
                             : std::string("; set_optimizer_state_dict regroups FQN-keyed state and gives each saved "
                                           "group's hyperparameters to the last target group holding one of its "
                                           "parameters)"));
            std::string subsetNote;
            if (!m_target && savedTotal < targetTotal) {
                // an optimizer over the trainable parameters only (frozen backbone, LoRA) holds fewer
                std::vector<std::vector<int64_t>> shapes;
                for (const ParamRow* r : listed)
                    shapes.push_back(r->shape);
                TargetOptimizer saved;
                saved.source = where;
                saved.groupSizes = savedSizes;
                saved.shapes = shapes;
                std::string note;
                bool unique = true;
                if (!saved.paramsOf(exp, {}, note, unique).empty())
                    subsetNote = "; their shapes fit " + std::to_string(savedTotal) + " of the model's parameters: if "
                        + "the others are frozen and the loading code gives the optimizer only the trainable ones, it "
                          "loads (give the target optimizer"; // the CLI's option added below, for the CLI's text
            }
            const size_t frozenCount = m_frozenInTarget.size();
            f.fix = savedTotal != targetTotal
                ? "the optimizer was saved for " + std::to_string(savedTotal) + " parameters; the target has "
                    + std::to_string(targetTotal)
                    + (frozenCount && savedTotal + frozenCount == targetTotal ? ", " + std::to_string(frozenCount)
                                + " of them frozen: build it over the trainable parameters only, or load with "
                                  "set_optimizer_state_dict, which skips frozen ones"
                            : subsetNote.empty() ? ": it is another model"
                                                 : subsetNote + ", --target-optim, to check)")
                : "build the optimizer with the same param groups as the run that saved it (same order, same split)";
            if (savedTotal != targetTotal && !subsetNote.empty())
                f.fixNeutral = "the optimizer was saved for " + std::to_string(savedTotal)
                    + " parameters; the target has " + std::to_string(targetTotal) + subsetNote + " to check)";
            d.findings.push_back(std::move(f));
        }
        return groupError;
    }

    /// state tensors whose shape is not their parameter's, by name (set_optimizer_state_dict) and by position
    /// (optimizer.load_state_dict); returns those by position
    std::vector<std::string> shapeFindings(
        const OptimizerReading& reading, const Names& names, const std::string& groupError, Diagnosis& d) const
    {
        const OptimizerView& v = *reading.view;
        const OptimizerKind kind = reading.kind;
        const std::string& root = reading.root;
        const std::string& where = reading.where;
        const ModelParams& exp = *m_exp;
        const std::vector<const ParamRow*>& listed = reading.listed;
        const bool fsdp1 = reading.fsdp1;
        const bool rankSlices = reading.rankSlices;
        const bool trainer = reading.trainer;
        const bool sameGroupsAssumed = reading.sameGroupsAssumed;
        const bool named = reading.named;
        std::vector<std::string> wrongByPosition;
        if (!fsdp1)
            for (size_t i = 0; i < listed.size() && i < exp.fqns.size(); ++i) {
                const bool byTarget = m_target && m_target->shapes.size() == exp.fqns.size();
                // a model whose order is not stored (safetensors) names the rows by shapes: compare with the
                // parameter each row was given, not the guessed order's i-th
                // the same groups built by the same script: position i holds the parameter the saved position i held
                const bool byRow = trainer || ((!exp.orderKnown || sameGroupsAssumed) && !listed[i]->fqn.empty());
                const auto* shape = byTarget ? &m_target->shapes[i]
                    : byRow                  ? modelShape(listed[i]->fqn)
                                             : modelShape(exp.fqns[i]);
                if (!shape || shape->empty()) continue;
                const std::string w = wrongState(*listed[i], kind, *shape);
                if (!w.empty())
                    wrongByPosition.push_back(
                        (listed[i]->fqn.empty() ? "id " + listed[i]->id : listed[i]->fqn) + "." + w);
            }
        // FQN-keyed state: shapes by name (after the renames), as set_optimizer_state_dict pairs them
        std::vector<std::string> wrongByName;
        if (named && !v.idKeyed && !fsdp1)
            for (const ParamRow* r : listed) {
                const auto it = names.rename.find(r->fqn);
                const auto* shape = modelShape(it == names.rename.end() ? r->fqn : it->second);
                if (!shape) continue;
                const std::string w = wrongState(*r, kind, *shape);
                if (!w.empty()) wrongByName.push_back(r->fqn + "." + w);
            }
        if (!wrongByName.empty()) {
            Finding f(FindingCode::ShapeMismatch,
                std::to_string(wrongByName.size()) + " state tensor(s) of " + where
                    + " do not have their parameter's shape in " + exp.source + ": " + quoteList(wrongByName, 4)
                    + ". The loaders do not compare shapes; the first step() after loading fails",
                root);
            f.pytorchError = "RuntimeError: The size of tensor a must match the size of tensor b (at the first "
                             "optimizer.step() after loading)";
            f.fix = "the optimizer belongs to a different architecture; it cannot be loaded into this model";
            f.keys = head(wrongByName);
            d.findings.push_back(std::move(f));
        }
        // positions pair up only when the groups do: with other groups load_state_dict raises before any shape matters
        if (!wrongByPosition.empty() && (v.idKeyed || !named) && groupError.empty() && !rankSlices) {
            Finding f(FindingCode::ShapeMismatch,
                std::to_string(wrongByPosition.size()) + " state tensor(s) of " + where
                    + " do not have the shape of the model parameter at their position: "
                    + quoteList(wrongByPosition, 4)
                    + ". optimizer.load_state_dict does not look at shapes and loads them; the first step() fails",
                root);
            f.pytorchError = "RuntimeError: The size of tensor a must match the size of tensor b (at the first "
                             "optimizer.step() after loading)";
            f.fix = "the optimizer belongs to a different architecture (or another parameter order)";
            f.keys = head(wrongByPosition);
            d.findings.push_back(std::move(f));
        }

        return wrongByPosition;
    }

    /// what the name findings cost on load: set_optimizer_state_dict's error (strict changes nothing), else the
    /// positional loader's
    static void quoteLoadErrors(const std::vector<LoadVerdict>& verdicts, size_t firstFinding, Diagnosis& d)
    {
        const LoadVerdict& byName = verdicts[1];
        const LoadVerdict& byPosition = verdicts[0];
        for (size_t i = firstFinding; i < d.findings.size(); ++i) {
            Finding& f = d.findings[i];
            if (f.code != FindingCode::PrefixMismatch && f.code != FindingCode::RenamedParams
                && f.code != FindingCode::MissingState && f.code != FindingCode::ParamNamesPrefix)
                continue;
            if (byName.outcome == LoadOutcome::Raises)
                f.pytorchError = byName.exception + ": " + byName.message
                    + " (set_optimizer_state_dict, also with StateDictOptions(strict=False): strict applies to the "
                      "model only)";
            else if (byPosition.outcome == LoadOutcome::Raises)
                f.pytorchError = byPosition.exception + ": " + byPosition.message + " (optimizer.load_state_dict)";
            else
                f.pytorchError.clear();
        }
    }

    void nameFindings(
        int oi, const std::string& where, const std::vector<const ParamRow*>& listed, Names& names, Diagnosis& d)
    {
        const ModelParams& exp = *m_exp;
        const std::string root = m_table.optimizers[static_cast<size_t>(oi)].rootKey();
        std::set<std::string> expected; // what set_optimizer_state_dict looks up: model names without wrappers
        for (const auto& n : exp.fqns)
            expected.insert(canon(n));
        // 1. wrapper prefixes on the optimizer's names (module., _orig_mod., ...): DSD's names have none, and it strips
        // the model's own wrappers, so the canonical name is the fix (a wrapper only on the model side is no problem)
        std::set<std::string> stripped;
        for (const auto& n : names.opt) {
            if (expected.count(n)) continue;
            const NormalizedFqn nn = normalizeFqn(n);
            if (nn.stripped.empty() || !expected.count(nn.fqn)) continue;
            names.rename[n] = nn.fqn;
            stripped.insert(nn.stripped.begin(), nn.stripped.end());
        }
        std::string prefixText;
        if (names.rename.empty()) {
            // 2. a plain leading prefix on one side ("model.", "backbone.")
            const PrefixMatch pm = bestPrefix(names.opt, expected);
            if (pm.matched > 0 && pm.matched * 2 >= names.opt.size()) {
                for (const auto& n : names.opt) {
                    const std::string to = pm.optimizerHasIt
                        ? (n.rfind(pm.prefix, 0) == 0 ? n.substr(pm.prefix.size()) : n)
                        : pm.prefix + n;
                    if (to != n && expected.count(to) && !expected.count(n)) names.rename[n] = to;
                }
                prefixText = (pm.optimizerHasIt ? "the optimizer's names carry '" : "the model's names carry '")
                    + pm.prefix + "' that the other side lacks";
            }
        } else {
            std::string t;
            for (const auto& x : stripped)
                t += (t.empty() ? "'" : ", '") + x + "'";
            prefixText = "the optimizer's names carry the wrapper prefix " + t
                + " (saved from the wrapped model); set_optimizer_state_dict looks names up without wrappers";
        }
        // integer-keyed state loads by position: its names are param_names, or derived from a model by position; the
        // derived ones are not in the optimizer, so there is nothing of it to rename (the model's keys are another
        // finding)
        const bool idKeyed = m_table.optimizers[static_cast<size_t>(oi)].idKeyed;
        const bool namesStored = !idKeyed || m_table.sources[static_cast<size_t>(oi)] == NameSource::ParamNames;
        if (!names.rename.empty() && namesStored) {
            size_t matched = 0; // after the renames, not only the renamed ones
            for (const auto& n : names.opt) {
                const auto it = names.rename.find(n);
                matched += expected.count(it == names.rename.end() ? n : it->second) > 0;
            }
            Finding f(idKeyed ? FindingCode::ParamNamesPrefix : FindingCode::PrefixMismatch,
                prefixText + ": " + std::to_string(names.rename.size()) + " of the " + std::to_string(names.opt.size())
                    + " parameter names of " + where + " need renaming; once renamed, " + std::to_string(matched)
                    + " of " + std::to_string(names.opt.size()) + " match " + exp.source,
                root);
            f.fix = "rename the optimizer's names (`optscope-cli fix` does it), or save with "
                    "get_optimizer_state_dict, which writes names without wrappers";
            f.fixNeutral = "rename the optimizer's names (the fix does it), or save with get_optimizer_state_dict, "
                           "which writes names without wrappers";
            for (const auto& n : names.opt)
                if (auto it = names.rename.find(n); it != names.rename.end())
                    f.actions.push_back(
                        {FixAction::Kind::RenameParam, n, it->second, "'" + n + "' -> '" + it->second + "'"});
            d.findings.push_back(std::move(f));
        }
        // 3. renamed modules: the unmatched names of one optimizer module and of one model module have the same
        // parameter names and shapes, and no other unmatched model module does (head.* -> lm_head.*): found wherever
        // the param groups put them, which positions are not (a decay / no-decay split reorders them)
        moduleRenameFindings(where, root, listed, expected, names, d);
        // 4. renamed layers: an unmatched optimizer name and an unmatched model name at the same position, same shape
        std::set<std::string> covered;
        for (const auto& n : names.opt)
            covered.insert(names.rename.count(n) ? names.rename.at(n) : n);
        std::vector<std::pair<std::string, std::string>> pairs;
        for (size_t i = 0; i < names.opt.size() && i < exp.fqns.size(); ++i) {
            const std::string& o = names.opt[i];
            const std::string m = canon(exp.fqns[i]);
            if (names.rename.count(o) || expected.count(o) || covered.count(m)) continue;
            const auto* shape = modelShape(exp.fqns[i]);
            if (!shape || !listed[i]->param || listed[i]->shape != *shape) continue;
            pairs.push_back({o, m});
        }
        if (!pairs.empty()) {
            std::string list;
            for (size_t i = 0; i < pairs.size() && i < 4; ++i)
                list += (i ? ", '" : "'") + pairs[i].first + "' -> '" + pairs[i].second + "'";
            if (pairs.size() > 4) list += ", ...";
            Finding f(FindingCode::RenamedParams,
                std::to_string(pairs.size()) + " parameter(s) of " + where
                    + " are not in the model, but the model parameter at the same position has the same shape and "
                      "no state: probably renamed: "
                    + list,
                root);
            f.fix = "`optscope-cli fix` applies these renames; to rename a whole module use `optscope-cli fix "
                    "--rename OLD=NEW` (a module prefix renames every parameter under it)";
            f.fixNeutral = "the fix applies these renames";
            for (const auto& [o, m] : pairs) {
                f.actions.push_back({FixAction::Kind::RenameParam, o, m, "'" + o + "' -> '" + m + "'"});
                names.rename[o] = m;
            }
            d.findings.push_back(std::move(f));
        }
    }

    void moduleRenameFindings(const std::string& where, const std::string& root,
        const std::vector<const ParamRow*>& listed, const std::set<std::string>& expected, Names& names, Diagnosis& d)
    {
        const ModelParams& exp = *m_exp;
        using Leaves = std::map<std::string, const std::vector<int64_t>*>; // parameter name in its module -> shape
        auto splitModule = [](const std::string& n) {
            const auto dot = n.rfind('.');
            return dot == std::string::npos ? std::make_pair(std::string(), n)
                                            : std::make_pair(n.substr(0, dot + 1), n.substr(dot + 1));
        };
        std::set<std::string> covered;
        for (const auto& n : names.opt)
            covered.insert(names.rename.count(n) ? names.rename.at(n) : n);
        std::map<std::string, Leaves> fromModules, toModules;
        for (size_t i = 0; i < names.opt.size() && i < listed.size(); ++i) {
            const std::string& o = names.opt[i];
            if (o.empty() || names.rename.count(o) || expected.count(o)) continue;
            const auto [module, leaf] = splitModule(o);
            fromModules[module][leaf] = listed[i]->param && !listed[i]->shape.empty() ? &listed[i]->shape : nullptr;
        }
        for (const auto& f : exp.fqns) {
            const std::string m = canon(f);
            if (covered.count(m)) continue;
            const auto [module, leaf] = splitModule(m);
            toModules[module][leaf] = modelShape(f);
        }
        auto fits = [](const Leaves& a, const Leaves& b) {
            if (a.size() != b.size()) return false;
            bool anyShape = false;
            for (const auto& [leaf, shape] : a) {
                const auto it = b.find(leaf);
                if (it == b.end()) return false;
                if (shape && it->second) {
                    if (*shape != *it->second) return false;
                    anyShape = true;
                }
            }
            return anyShape;
        };
        std::vector<std::pair<std::string, std::string>> modules; // from -> to, each side used once
        std::map<std::string, int> toUses;
        for (const auto& [from, leaves] : fromModules) {
            if (from.empty()) continue;
            std::string only;
            int matches = 0;
            for (const auto& [to, toLeaves] : toModules)
                if (!to.empty() && fits(leaves, toLeaves)) {
                    only = to;
                    ++matches;
                }
            if (matches == 1) {
                modules.emplace_back(from, only);
                ++toUses[only];
            }
        }
        std::vector<std::pair<std::string, std::string>> pairs;
        std::string list;
        for (const auto& [from, to] : modules) {
            if (toUses[to] != 1) continue; // two optimizer modules fit one model module: which was renamed?
            list += (list.empty() ? "'" : ", '") + from.substr(0, from.size() - 1) + "' -> '"
                + to.substr(0, to.size() - 1) + "'";
            for (const auto& [leaf, shape] : fromModules[from])
                pairs.emplace_back(from + leaf, to + leaf);
        }
        if (pairs.empty()) return;
        Finding f(FindingCode::RenamedParams,
            std::to_string(pairs.size()) + " parameter(s) of " + where
                + " are not in the model, but a module of the model that has no state has the same parameter names "
                  "and shapes: probably renamed modules: "
                + list,
            root);
        f.fix = "`optscope-cli fix` applies these renames (or `optscope-cli fix --rename OLD=NEW` for a module)";
        f.fixNeutral = "the fix applies these renames";
        for (const auto& [o, m] : pairs) {
            f.actions.push_back({FixAction::Kind::RenameParam, o, m, "'" + o + "' -> '" + m + "'"});
            names.rename[o] = m;
        }
        d.findings.push_back(std::move(f));
    }

    void modelPartFindings(const std::map<std::string, std::string>& optimizerRenames, Diagnosis& d)
    {
        if (!m_table.modelInFile || m_exp->fromOptimizer || m_reportedModelPart) return;
        m_reportedModelPart = true;
        const ModelParams& part = *m_table.modelInFile;
        std::vector<std::string> missing, unexpected;
        const std::set<std::string> have(part.keys.begin(), part.keys.end()),
            want(m_exp->keys.begin(), m_exp->keys.end());
        keyDifference(part, *m_exp, missing, unexpected);
        if (missing.empty() && unexpected.empty()) return;
        Finding f(FindingCode::ModelKeysMismatch,
            "the model state dict saved in " + part.source + " does not have the model's keys: "
                + std::to_string(missing.size()) + " missing, " + std::to_string(unexpected.size()) + " unexpected",
            joinKeyPath(part.root));
        f.pytorchError = "RuntimeError: " + modelLoadMessage(missing, unexpected);
        std::map<std::string, std::string> missingByCanon;
        for (const auto& k : missing)
            missingByCanon.emplace(canon(k), k);
        // the optimizer's renames as module renames (fc1.weight -> fc_in.weight: fc1 -> fc_in), for buffers too
        std::map<std::string, std::string> moduleRenames;
        for (const auto& [from, to] : optimizerRenames) {
            const auto a = from.rfind('.'), b = to.rfind('.');
            if (a != std::string::npos && b != std::string::npos && from.substr(a) == to.substr(b))
                moduleRenames.emplace(from.substr(0, a + 1), to.substr(0, b + 1));
        }
        const std::set<std::string> missingSet(missing.begin(), missing.end());
        for (const auto& k : unexpected) {
            std::string to;
            if (auto it = missingByCanon.find(canon(k)); it != missingByCanon.end()) to = it->second;
            for (const auto& [from, into] : moduleRenames)
                if (to.empty() && k.rfind(from, 0) == 0 && missingSet.count(into + k.substr(from.size())))
                    to = into + k.substr(from.size());
            if (!to.empty())
                f.actions.push_back({FixAction::Kind::RenameModelKey, k, to, "model '" + k + "' -> '" + to + "'"});
        }
        f.fix = f.actions.empty() ? "the model saved beside the optimizer is another model"
                                  : "rename its keys to the model's (`optscope-cli fix` does it), or load it into the "
                                    "module it was saved from (wrapped or not)";
        if (!f.actions.empty())
            f.fixNeutral = "rename its keys to the model's (the fix does it), or load it into the module it was saved "
                           "from (wrapped or not)";
        f.keys = head(unexpected.empty() ? missing : unexpected);
        d.findings.push_back(std::move(f));
    }

    /// nn.Module.load_state_dict's lists: missing keys in the model's order, unexpected ones in the file's
    static void keyDifference(const ModelParams& part, const ModelParams& model, std::vector<std::string>& missing,
        std::vector<std::string>& unexpected)
    {
        const std::set<std::string> have(part.keys.begin(), part.keys.end()),
            want(model.keys.begin(), model.keys.end());
        for (const auto& k : model.keys)
            if (!have.count(k)) missing.push_back(k);
        for (const auto& k : part.keys)
            if (!want.count(k)) unexpected.push_back(k);
    }

    static std::string modelLoadMessage(const std::vector<std::string>& missing,
        const std::vector<std::string>& unexpected, const std::vector<std::string>& sizes = {})
    {
        // nn.Module.load_state_dict: "Missing" is inserted before "Unexpected"
        std::vector<std::string> msgs;
        if (!missing.empty()) msgs.push_back("Missing key(s) in state_dict: " + torchKeyList(missing) + ". ");
        if (!unexpected.empty()) msgs.push_back("Unexpected key(s) in state_dict: " + torchKeyList(unexpected) + ". ");
        msgs.insert(msgs.end(), sizes.begin(), sizes.end()); // size mismatches are collected first, listed last
        std::string s = "Error(s) in loading state_dict for <Model>:\n\t";
        for (size_t i = 0; i < msgs.size(); ++i)
            s += (i ? "\n\t" : "") + msgs[i];
        return s;
    }

    /// What every load path's verdict is worked out from: the optimizer (its index and view, its class), the saved
    /// parameters it lists in the target's order, the group mismatch load_state_dict raises ("" when the groups fit)
    /// and the parameters whose state pairs with another shape by position.
    struct VerdictFacts
    {
        int oi;
        OptimizerKind kind;
        const OptimizerView& v;
        const std::vector<const ParamRow*>& listed;
        const std::string& groupError;
        const std::vector<std::string>& wrongByPosition;
    };

    /// The verdicts, one per load path. Each path's own reading decides whether it loads and how many parameters get
    /// state; then the rules of what the load or the first step() meets apply, in this order:
    ///
    ///   path                                   reading                    then
    ///   optimizer.load_state_dict              byPositionVerdict          flagsAtStep, classMiss, dtensorsAtStep
    ///   set_optimizer_state_dict (and strict=False: the same)
    ///                                          integer keys: the above;   groupWithoutHyperparameters;
    ///                                          names: byNameVerdict,      dsdInitStep (raises at load),
    ///                                          classMiss, dtensorsAtStep  differentiable at step
    ///   fsdp1.optim_state_dict_to_load         fsdp1Verdict               classMiss
    ///   model.load_state_dict                  modelVerdict               -
    void verdicts(const VerdictFacts& f, Diagnosis& d) const
    {
        LoadVerdict p1 = byPositionVerdict(f);
        applyFlagsAtStep(f, p1);
        applyClassMiss(f, p1);
        applyDTensorsAtStep(f, p1);
        d.verdicts.push_back(p1);

        LoadVerdict p2;
        if (allIntegerKeys(f.v)) {
            p2 = p1;
            p2.path = LoadPath::SetOptimizerStateDict;
            p2.why = "integer-keyed state is handed to optimizer.load_state_dict unchanged";
        } else {
            p2 = byNameVerdict(f);
            applyClassMiss(f, p2);
            applyDTensorsAtStep(f, p2);
            applyGroupWithoutHyperparameters(f, p2);
        }
        applyDsdInitStep(f, p2);
        if (p2.outcome == LoadOutcome::Loads && differentiable(f.v)) p2.stepAfterLoad = "RuntimeError";
        d.verdicts.push_back(p2);
        LoadVerdict p3 = p2; // strict applies to the model only
        p3.path = LoadPath::SetOptimizerStateDictNonStrict;
        d.verdicts.push_back(p3);

        LoadVerdict pf = fsdp1Verdict(f);
        applyClassMiss(f, pf);
        d.verdicts.push_back(pf);

        d.verdicts.push_back(modelVerdict());
    }

    /// optimizer.load_state_dict: group count, group sizes, then pairs by position (no names, no shapes)
    LoadVerdict byPositionVerdict(const VerdictFacts& f) const
    {
        const LoadPath path = LoadPath::OptimizerLoadStateDict;
        if (f.v.flattened)
            return LoadVerdict::raises(
                path, "KeyError", "'param_groups'", "the flattened format has no \"param_groups\" key");
        if (!f.groupError.empty())
            return LoadVerdict::raises(
                path, "ValueError", f.groupError, "param groups differ from the target optimizer's");
        int withState = 0;
        for (const ParamRow* r : f.listed)
            withState += r->param != nullptr;
        return LoadVerdict::loads(path, withState, static_cast<int>(m_exp->fqns.size()),
            f.wrongByPosition.empty() ? "ok" : "RuntimeError", "state pairs with the target's parameters by position");
    }

    /// set_optimizer_state_dict of FQN-keyed state: each trainable model parameter's state looked up by its name
    /// (wrappers stripped), KeyError when absent
    LoadVerdict byNameVerdict(const VerdictFacts& f) const
    {
        const LoadPath path = LoadPath::SetOptimizerStateDict;
        std::set<std::string> stateKeys, listedNoState;
        for (const auto& p : f.v.params)
            stateKeys.insert(p.key);
        for (const ParamRow* r : f.listed)
            if (!r->param) listedNoState.insert(r->id);
        int withState = 0;
        std::string firstMissing;
        for (const auto& fqn : m_exp->fqns) {
            const std::string key = normalizeFqn(fqn).fqn;
            // the target holds it without state: frozen there, and DSD's _split_optim_state_dict looks up state
            // only for parameters that require grad: it gets none, whether the file holds some or not
            if (m_frozenInTarget.count(key)) continue;
            if (stateKeys.count(key)) {
                ++withState;
                continue;
            }
            if (listedNoState.count(key)) continue; // no state saved: frozen there, taken as frozen here too
            if (firstMissing.empty()) firstMissing = key;
        }
        if (!firstMissing.empty())
            return LoadVerdict::raises(path, "KeyError",
                f.v.flattened ? "'state." + firstMissing + "." + firstStateName(f.v) + "'" : "'" + firstMissing + "'",
                "the model parameter '" + firstMissing + "' has no state under that name");
        return LoadVerdict::loads(path, withState, static_cast<int>(m_exp->fqns.size()),
            namedStateMisfits(f.v, f.listed, f.kind) ? "RuntimeError" : "ok",
            "every trainable model parameter has state under its name");
    }

    /// FSDP1 (use_orig_params=True): integer keys are refused; every saved name must be a model parameter, then the
    /// positional group checks of load_state_dict apply
    LoadVerdict fsdp1Verdict(const VerdictFacts& f) const
    {
        const LoadPath path = LoadPath::Fsdp1OptimStateDictToLoad;
        const OptimizerView& v = f.v;
        if (v.flattened) // _optim_utils._optim_state_dict_to_load_impl checks the nested format's keys first
            return LoadVerdict::raises(path, "ValueError",
                "`optim_state_dict` must have the keys \"state\"to be a valid optimizer state dict",
                "FSDP1 reads the nested {state, param_groups} format only");
        if (v.idKeyed && v.params.empty() && !v.groupParams().empty())
            // no state to trip over: the param_groups' integer ids are looked up as names
            // (_rekey_sharded_optim_state_dict), and a KeyError of an int prints without quotes
            return LoadVerdict::raises(
                path, "KeyError", v.groupParams().front(), "FSDP1 expects FQN keys; the param_groups list integer ids");
        if (v.idKeyed)
            return LoadVerdict::raises(
                path, "AttributeError", "'int' object has no attribute 'unflat_param_names'", "FSDP1 expects FQN keys");
        std::set<std::string> modelNames;
        for (const auto& fqn : m_exp->fqns)
            modelNames.insert(normalizeFqn(fqn).fqn);
        for (const auto& p : v.params)
            if (!modelNames.count(p.key))
                return LoadVerdict::raises(path, "KeyError", "'" + p.key + "'",
                    "the saved parameter '" + p.key + "' is not a parameter of the model");
        if (!f.groupError.empty())
            return LoadVerdict::raises(
                path, "ValueError", f.groupError, "param groups differ from the target optimizer's");
        // _rekey_sharded_optim_state_dict pairs the state with the target's parameters by name, not by position: a
        // target that lists them in another order steps fine
        return LoadVerdict::loads(path, static_cast<int>(v.params.size()), static_cast<int>(m_exp->fqns.size()),
            namedStateMisfits(v, f.listed, f.kind) ? "RuntimeError" : "ok",
            "every saved name is a model parameter; state is paired by name");
    }

    /// model.load_state_dict of the model saved beside the optimizer
    LoadVerdict modelVerdict() const
    {
        LoadVerdict p;
        p.path = LoadPath::ModelLoadStateDict;
        const ModelParams& exp = *m_exp;
        if (!m_table.modelInFile) {
            p.why = "the file holds no model state dict";
            return p;
        }
        if (exp.fromOptimizer) {
            p.why = "the reference is an optimizer: the model's keys are not known";
            return p;
        }
        const ModelParams& part = *m_table.modelInFile;
        std::vector<std::string> missing, unexpected, sizes;
        keyDifference(part, exp, missing, unexpected);
        // a DTensor into a plain tensor of the same shape: copy_ raises, and load_state_dict collects it
        const bool dtensorsIntoPlainModel = m_model && !m_model->fromOptimizer && m_model->tensorClassesKnown
            && m_model->dtensors.empty() && !part.dtensors.empty();
        // in the model's order, as _load_from_state_dict meets them (the file's when the model's is not known)
        for (const auto& k : exp.keys.empty() ? part.keys : exp.keys) {
            if (!part.shapes.count(k) || !exp.shapes.count(k)) continue;
            if (part.shapes.at(k) != exp.shapes.at(k))
                sizes.push_back("size mismatch for " + k + ": copying a param with shape "
                    + torchSizeText(part.shapes.at(k)) + " from checkpoint, the shape in current model is "
                    + torchSizeText(exp.shapes.at(k)) + ".");
            else if (dtensorsIntoPlainModel && part.dtensors.count(k))
                sizes.push_back("While copying the parameter named \"" + k + "\", whose dimensions in the model are "
                    + torchSizeText(exp.shapes.at(k)) + " and whose dimensions in the checkpoint are "
                    + torchSizeText(part.shapes.at(k))
                    + ", an exception occurred : ('aten.copy_.default: " + kMixedDTensor + "',).");
        }
        if (missing.empty() && unexpected.empty() && sizes.empty()) {
            p.outcome = LoadOutcome::Loads;
            p.why = "same keys and shapes";
            return p;
        }
        return LoadVerdict::raises(p.path, "RuntimeError", modelLoadMessage(missing, unexpected, sizes),
            std::to_string(missing.size()) + " missing, " + std::to_string(unexpected.size()) + " unexpected, "
                + std::to_string(sizes.size()) + " of another shape");
    }

    /// the saved groups' flags that come back with them, and float8 parameters: the first step() raises
    void applyFlagsAtStep(const VerdictFacts& f, LoadVerdict& p) const
    {
        if (p.outcome != LoadOutcome::Loads) return;
        if (capturable(f.v)) {
            p.stepAfterLoad = "AssertionError";
            p.why += "; capturable=True comes back with the param groups and cannot step on a CPU target";
        }
        if (differentiable(f.v)) {
            p.stepAfterLoad = "RuntimeError";
            p.why += "; differentiable=True comes back with the param groups: step() updates the leaf parameters "
                     "in place with autograd on";
        }
        if (!float8Param().empty()) {
            p.stepAfterLoad = "RuntimeError";
            p.why += "; the model's parameters are float8, for which torch.optim has no kernels";
        }
    }

    /// another class's state (or a group without a key the class reads): the load or the first step misses it
    void applyClassMiss(const VerdictFacts& f, LoadVerdict& p) const
    {
        const auto miss = targetClassMiss(f.oi);
        if (!miss || p.outcome != LoadOutcome::Loads) return;
        const std::string cls = optimizerKindName(loadingClass(f.oi));
        if (miss->atLoad) {
            p = LoadVerdict::raises(p.path, "KeyError", "'" + miss->key + "'",
                cls + "'s __setstate__ reads '" + miss->key + "' from every saved state, which has none");
        } else {
            p.stepAfterLoad = "KeyError";
            p.why += "; " + cls + "'s step() reads '" + miss->key + "', which the saved "
                + (miss->groupKey ? "param groups lack" : "state lacks");
        }
    }

    /// DTensor states into plain parameters: they load; the step mixes the two (FSDP1's loader converts them)
    void applyDTensorsAtStep(const VerdictFacts& f, LoadVerdict& p) const
    {
        if (dtensorStatesIntoPlain(f.oi).empty() || p.outcome != LoadOutcome::Loads || p.stepAfterLoad != "ok") return;
        p.stepAfterLoad = "RuntimeError";
        p.why += "; the saved state is DTensors and the model's parameters are plain: step() mixes them";
    }

    /// a target group that no saved group's hyperparameters reach (DSD gives each to the last target group holding one
    /// of its parameters): its first step() misses them
    void applyGroupWithoutHyperparameters(const VerdictFacts& f, LoadVerdict& p) const
    {
        if (const int g = targetGroupWithoutHyperparameters(f.v); g >= 0 && p.outcome == LoadOutcome::Loads) {
            p.stepAfterLoad = "KeyError";
            p.why += "; the target's param group " + std::to_string(g)
                + " gets no saved group's hyperparameters (each goes to the last target group holding one of its "
                  "parameters), so its first step() misses them";
        }
    }

    /// set_optimizer_state_dict first steps the fresh optimizer with zero gradients (_init_optim_state) whatever the
    /// file holds: what that step raises is the load's error
    void applyDsdInitStep(const VerdictFacts& f, LoadVerdict& p) const
    {
        std::optional<PythonError> e
            = dsdInitError(m_target && m_target->kind != OptimizerKind::Unknown ? m_target->kind : f.kind, f.v);
        if (const std::string fp8 = float8Param(); !e && !fp8.empty()) e = float8StepError(*modelDtype(fp8));
        if (e)
            p = LoadVerdict::raises(p.path, e->type, e->message,
                "set_optimizer_state_dict first calls optimizer.step() with zero gradients (_init_optim_state)");
    }

    static bool allIntegerKeys(const OptimizerView& v)
    {
        if (v.flattened) return false;
        for (const auto& p : v.params)
            if (p.key.empty() || !std::all_of(p.key.begin(), p.key.end(), ::isdigit)) return false;
        return true;
    }

    /// a boolean hyperparameter (capturable, differentiable) that some param group sets to True
    static bool groupFlag(const OptimizerView& v, const char* name)
    {
        for (const auto& g : v.groups)
            if (auto it = g.hyperparams.find(name); it != g.hyperparams.end() && !it->second->isTensor()
                && it->second->value && it->second->value->kind == PyKind::Bool && it->second->value->boolean)
                return true;
        return false;
    }
    static bool capturable(const OptimizerView& v) { return groupFlag(v, "capturable"); }

    /// differentiable=True: step() runs with autograd on and updates the parameters in place, which autograd refuses
    /// for leaf tensors that require grad (model.parameters()): every optimizer's step raises (torch 2.6, checked
    /// for each torch.optim class that has the flag)
    static bool differentiable(const OptimizerView& v) { return groupFlag(v, "differentiable"); }
    /// what the zero-gradient step set_optimizer_state_dict runs first raises, for optimizers built like the saved one
    /// on a CPU target (none when it works)
    static std::optional<PythonError> dsdInitError(OptimizerKind kind, const OptimizerView& v)
    {
        if (kind == OptimizerKind::LBFGS) return PythonError {"TypeError", "'NoneType' object is not callable"};
        if (kind == OptimizerKind::SparseAdam)
            return PythonError {
                "RuntimeError", "SparseAdam does not support dense gradients, please consider Adam instead"};
        if (capturable(v))
            return PythonError {"AssertionError",
                "If capturable=True, params and state_steps must be on supported devices: "
                "['cuda', 'xpu', 'hpu', 'privateuseone', 'xla']."};
        // Adagrad makes its state in __init__: DSD then skips its first step, and the error comes at the user's
        if (differentiable(v) && kind != OptimizerKind::Adagrad)
            return PythonError {
                "RuntimeError", "a leaf Variable that requires grad is being used in an in-place operation."};
        return std::nullopt;
    }

    static std::string firstStateName(const OptimizerView& v)
    {
        for (const auto& p : v.params)
            if (!p.states.empty()) return p.states.begin()->first;
        return "step";
    }

    /// the model given (m_exp is restricted to the optimizer's parameters under the frozen reading)
    const ModelParams* expectedModel() const { return m_model; }

    /// No target optimizer, and the saved one holds a subset of the model's parameters that its names (or shapes)
    /// place: the training script gave the optimizer only the trainable parameters (a frozen backbone, LoRA, a
    /// frozen layer). Diagnosed as loaded by the same script (an optimizer over the trainable ones, which loads), with
    /// a warning that gives the other reading (an optimizer over model.parameters(), which raises)
    void frozenReading(const ModelParams& model, Diagnosis& d) const
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

    /// the model with only the parameters the target optimizer holds, when it holds fewer than the model has (the
    /// loaders look up and count those only; model.load_state_dict still wants every key). Without a target, the
    /// saved optimizer itself when it holds fewer parameters than the model and they place in it (@p frozenReading)
    static std::optional<ModelParams> optimizerParams(const Checkpoint& cp, const ModelParams* model,
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

    /// the first optimizer's parameter names as the file records them (FQN keys, param_names); empty if it does not
    static std::vector<std::string> savedNames(const Checkpoint& cp)
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

    const Checkpoint& m_cp;
    const TargetOptimizer* m_target;
    const Progress& m_progress;
    std::string m_targetNote;
    mutable std::map<std::string, const std::vector<int64_t>*> m_shapeByCanon; ///< modelShape's index
    mutable std::map<std::string, DType> m_dtypeByCanon; ///< modelDtype's index
    bool m_frozenReading = false; ///< m_optimizerParams is the saved optimizer's subset of the model (no target)
    std::optional<ModelParams> m_optimizerParams;
    const ModelParams* m_model; ///< the model given
    const ModelParams* m_exp;
    ParamTable m_table;
    /// the target's parameters without state after its step (TargetOptimizer::frozenNames): frozen when it loads
    std::set<std::string> m_frozenInTarget;
    bool m_reportedModelPart = false;
};

/// a loading run on @p loadWorldSize data-parallel ranks. DeepSpeed v0.19.5 (read in its source, not run):
/// engine.py _load_zero_checkpoint raises before it opens any optimizer file when the saved dp_world_size is not the
/// current one, whatever the stage, BF16_Optimizer included, elastic_checkpoint or not; _load_checkpoint has by then
/// loaded the weights, the lr scheduler and global_steps. At ZeRO-3 a rank without a model states file of its own
/// (rank >= the saved size) fails before that, in state_dict_factory.py's check_ckpt_list (a bare assert).
void worldSizeFindings(const Checkpoint& cp, int loadWorldSize, Diagnosis& d)
{
    if (loadWorldSize <= 0) return;
    const std::string m = std::to_string(loadWorldSize);
    const int saved = cp.savedDataParallelSize;
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
            "saved by " + n + " data-parallel ranks (ZeRO stage " + std::to_string(cp.zeroStage) + "), loaded on " + m
                + ": DeepSpeed's load_checkpoint raises before it reads any optimizer state, after it has already "
                  "loaded the weights, the lr scheduler and the step counters");
        const std::string text = "ZeRORuntimeException: The checkpoint being loaded used a DP world size of " + n
            + " but the current world size is " + m
            + ". Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not currently "
              "supported.";
        f.pytorchError = cp.zeroStage == 3 && loadWorldSize > saved
            ? (loadWorldSize - saved == 1 ? "rank " + n : "ranks " + n + " to " + std::to_string(loadWorldSize - 1))
                + " (no zero_pp_rank_R model states file of their own): AssertionError (DeepSpeed's "
                  "SDLoaderBase.check_ckpt_list: assert len(self.ckpt_list) > 0); the others: "
                + text
            : text;
        const std::string tag = cp.files ? std::filesystem::path(cp.files->rootDir()).filename().string() : "TAG";
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

Diagnosis diagnoseCheckpoint(const Checkpoint& optim, const ModelParams* expected, const Progress& progress,
    const TargetOptimizer* target, int loadWorldSize)
{
    Diagnosis d = Diagnoser(optim, expected, target, progress).run();
    worldSizeFindings(optim, loadWorldSize, d);
    return d;
}

} // namespace optscope
