// SPDX-License-Identifier: GPL-3.0-or-later
// What each load path does with the checkpoint (diagnoser.h)
#include "optscope/analysis/diagnoser.h"

#include <algorithm>

namespace optscope {

const std::vector<Diagnoser::VerdictPipeline>& Diagnoser::verdictPipelines()
{
    // path                              reading                          then
    static const std::vector<VerdictPipeline> pipelines {
        {LoadPath::OptimizerLoadStateDict, &Diagnoser::byPositionVerdict,
            {&Diagnoser::applyFlagsAtStep, &Diagnoser::applyClassMiss, &Diagnoser::applyDTensorsAtStep}},
        {LoadPath::SetOptimizerStateDict, &Diagnoser::setOptimizerStateDictReading,
            {&Diagnoser::applyDsdInitStep, &Diagnoser::applyDifferentiableAtStep}},
        // strict applies to the model only
        {LoadPath::SetOptimizerStateDictNonStrict, nullptr, {}, LoadPath::SetOptimizerStateDict},
        // what FSDP1's loader returns goes to optimizer.load_state_dict, the saved groups' flags with it
        {LoadPath::Fsdp1OptimStateDictToLoad, &Diagnoser::fsdp1Verdict,
            {&Diagnoser::applyFlagsAtStep, &Diagnoser::applyClassMiss}},
        {LoadPath::ModelLoadStateDict, &Diagnoser::modelVerdict, {}},
    };
    return pipelines;
}

LoadVerdict Diagnoser::verdictOf(const VerdictPipeline& pipeline, const VerdictFacts& f) const
{
    LoadVerdict p = (this->*pipeline.reading)(f);
    for (const VerdictRule rule : pipeline.rules)
        (this->*rule)(f, p);
    return p;
}

void Diagnoser::verdicts(const VerdictFacts& f, Diagnosis& d) const
{
    const auto first = static_cast<std::ptrdiff_t>(d.verdicts.size());
    for (const VerdictPipeline& pipeline : verdictPipelines()) {
        if (pipeline.sameAs) {
            const auto same = std::find_if(d.verdicts.begin() + first, d.verdicts.end(),
                [&](const LoadVerdict& v) { return v.path == *pipeline.sameAs; });
            LoadVerdict p = *same; // the table lists it before
            p.path = pipeline.path;
            d.verdicts.push_back(std::move(p));
            continue;
        }
        d.verdicts.push_back(verdictOf(pipeline, f));
    }
}

LoadVerdict Diagnoser::setOptimizerStateDictReading(const VerdictFacts& f) const
{
    if (allIntegerKeys(f.v)) {
        LoadVerdict p = verdictOf(verdictPipelines().front(), f);
        p.path = LoadPath::SetOptimizerStateDict;
        p.why = "integer-keyed state is handed to optimizer.load_state_dict unchanged";
        return p;
    }
    static const VerdictPipeline byName {LoadPath::SetOptimizerStateDict, &Diagnoser::byNameVerdict,
        {&Diagnoser::applyClassMiss, &Diagnoser::applyDTensorsAtStep, &Diagnoser::applyGroupWithoutHyperparameters}};
    return verdictOf(byName, f);
}

LoadVerdict Diagnoser::byPositionVerdict(const VerdictFacts& f) const
{
    const LoadPath path = LoadPath::OptimizerLoadStateDict;
    if (f.v.flattened)
        return LoadVerdict::raises(
            path, "KeyError", "'param_groups'", "the flattened format has no \"param_groups\" key");
    if (!f.groupError.empty())
        return LoadVerdict::raises(path, "ValueError", f.groupError, "param groups differ from the target optimizer's");
    int withState = 0;
    for (const ParamRow* r : f.listed)
        withState += r->param != nullptr;
    return LoadVerdict::loads(path, withState, static_cast<int>(m_exp->fqns.size()),
        f.wrongByPosition.empty() ? "ok" : "RuntimeError", "state pairs with the target's parameters by position");
}

LoadVerdict Diagnoser::byNameVerdict(const VerdictFacts& f) const
{
    const LoadPath path = LoadPath::SetOptimizerStateDict;
    std::set<std::string> stateKeys, listedNoState;
    for (const auto& p : f.v.params)
        stateKeys.insert(p.key);
    for (const ParamRow* r : f.listed)
        if (!r->param) listedNoState.insert(r->id);
    int withState = 0;
    std::string firstMissing;
    std::vector<std::string> assumedFrozen;
    for (const auto& fqn : m_exp->fqns) {
        const std::string key = normalizeFqn(fqn).fqn;
        // the target holds it without state: frozen there, and DSD's _split_optim_state_dict looks up state
        // only for parameters that require grad: it gets none, whether the file holds some or not
        if (m_frozenInTarget.count(key)) continue;
        if (stateKeys.count(key)) {
            ++withState;
            continue;
        }
        // no state saved: frozen there, taken as frozen here too unless the target trains it (then DSD looks its
        // state up: KeyError); without a target that stepped, an assumption the verdict states (a parameter that
        // never got a gradient is saved so too, and trainable it raises)
        if (listedNoState.count(key) && !m_trainableInTarget.count(key)) {
            if (!m_frozenInTarget.count(key)) assumedFrozen.push_back(key);
            continue;
        }
        if (firstMissing.empty()) firstMissing = key;
    }
    if (!firstMissing.empty())
        return LoadVerdict::raises(path, "KeyError", missingStateKeyText(f.v, firstMissing),
            "the model parameter '" + firstMissing + "' has no state under that name");
    // DSD's _split_optim_state_dict gives a shared parameter (tied weights) every one of its names that the saved
    // param_groups list: saved apart and tied in the target, two names for one parameter, and
    // optimizer.load_state_dict refuses the group's size
    if (m_model && !f.v.flattened) {
        std::set<std::string> listed;
        for (const auto& name : f.v.groupParams())
            listed.insert(normalizeFqn(name).fqn);
        for (const auto& [alias, to] : m_model->tiedTo)
            if (listed.count(normalizeFqn(alias).fqn) && listed.count(normalizeFqn(to).fqn))
                return LoadVerdict::raises(path, "ValueError",
                    "loaded state dict contains a parameter group that doesn't match the size of optimizer's group",
                    "the target ties '" + alias + "' to '" + to
                        + "', which the checkpoint lists apart: both names go to one parameter");
    }
    LoadVerdict loads = LoadVerdict::loads(path, withState, static_cast<int>(m_exp->fqns.size()),
        namedStateMisfits(f.v, f.listed, f.kind) ? "RuntimeError" : "ok",
        "every trainable model parameter has state under its name");
    if (!assumedFrozen.empty()) {
        // (the KeyError names the first of them that is trainable there: this one when all are)
        loads.ifTrainableException = "KeyError";
        loads.ifTrainableMessage = missingStateKeyText(f.v, assumedFrozen.front());
        loads.assumedFrozen = std::move(assumedFrozen);
    }
    return loads;
}

LoadVerdict Diagnoser::fsdp1Verdict(const VerdictFacts& f) const
{
    const LoadPath path = LoadPath::Fsdp1OptimStateDictToLoad;
    const OptimizerView& v = f.v;
    // wrapping the model comes first: FSDP1 refuses a 0-dim parameter (_init_utils._verify_managed_params, the
    // first in named_parameters() order; 2.6's text, its typo included)
    if (!m_exp->fromOptimizer)
        for (const auto& fqn : m_exp->fqns)
            if (const auto it = m_exp->shapes.find(fqn); it != m_exp->shapes.end() && it->second.empty()) {
                return LoadVerdict::raises(path, "ValueError",
                    "FSDP doesn't support salar parameters. Change " + fqn + " to a 1D tensor with numel equal to 1.",
                    "FSDP1 cannot wrap a model with a 0-dim parameter (FullyShardedDataParallel(model) raises)");
            }
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
    // _rekey_sharded_optim_state_dict then looks up every name the saved param_groups list, state or not
    for (const auto& name : v.groupParams())
        if (!modelNames.count(normalizeFqn(name).fqn))
            return LoadVerdict::raises(path, "KeyError", "'" + name + "'",
                "the saved param_groups list '" + name + "', which is not a parameter of the model");
    if (!f.groupError.empty())
        return LoadVerdict::raises(path, "ValueError", f.groupError, "param groups differ from the target optimizer's");
    // _rekey_sharded_optim_state_dict pairs the state with the target's parameters by name, not by position: a
    // target that lists them in another order steps fine
    return LoadVerdict::loads(path, static_cast<int>(v.params.size()), static_cast<int>(m_exp->fqns.size()),
        namedStateMisfits(v, f.listed, f.kind) ? "RuntimeError" : "ok",
        "every saved name is a model parameter; state is paired by name");
}

LoadVerdict Diagnoser::modelVerdict(const VerdictFacts&) const
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
                + torchSizeText(part.shapes.at(k)) + ", an exception occurred : ('aten.copy_.default: " + kMixedDTensor
                + "',).");
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

void Diagnoser::applyFlagsAtStep(const VerdictFacts& f, LoadVerdict& p) const
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

void Diagnoser::applyDifferentiableAtStep(const VerdictFacts& f, LoadVerdict& p) const
{
    if (p.outcome == LoadOutcome::Loads && differentiable(f.v)) p.stepAfterLoad = "RuntimeError";
}

void Diagnoser::applyClassMiss(const VerdictFacts& f, LoadVerdict& p) const
{
    const auto miss = targetClassMiss(f.oi);
    if (!miss || p.outcome != LoadOutcome::Loads) return;
    const std::string cls = optimizerKindName(loadingClass(f.oi));
    if (miss->atLoad) {
        p = LoadVerdict::raises(p.path, miss->exception(), miss->message(),
            cls + "'s __setstate__ reads '" + miss->key + "' from every saved state, which has none");
    } else if (miss->exception() != "KeyError") {
        p.stepAfterLoad = miss->exception();
        p.why += "; " + cls + "'s step() unpacks the saved param groups' '" + miss->key
            + "' into two: " + miss->message();
    } else {
        p.stepAfterLoad = "KeyError";
        p.why += "; " + cls + "'s step() reads '" + miss->key + "', which the saved "
            + (miss->groupKey ? "param groups lack" : "state lacks");
    }
}

void Diagnoser::applyDTensorsAtStep(const VerdictFacts& f, LoadVerdict& p) const
{
    if (dtensorStatesIntoPlain(f.oi).empty() || p.outcome != LoadOutcome::Loads || p.stepAfterLoad != "ok") return;
    p.stepAfterLoad = "RuntimeError";
    p.why += "; the saved state is DTensors and the model's parameters are plain: step() mixes them";
}

void Diagnoser::applyGroupWithoutHyperparameters(const VerdictFacts& f, LoadVerdict& p) const
{
    if (const int g = targetGroupWithoutHyperparameters(f.v); g >= 0 && p.outcome == LoadOutcome::Loads) {
        p.stepAfterLoad = "KeyError";
        p.why += "; the target's param group " + std::to_string(g)
            + " gets no saved group's hyperparameters (each goes to the last target group holding one of its "
              "parameters), so its first step() misses them";
    }
}

void Diagnoser::applyDsdInitStep(const VerdictFacts& f, LoadVerdict& p) const
{
    std::optional<PythonError> e
        = dsdInitError(m_target && m_target->kind != OptimizerKind::Unknown ? m_target->kind : f.kind, f.v);
    if (const std::string fp8 = float8Param(); !e && !fp8.empty()) e = float8StepError(*modelDtype(fp8));
    if (e)
        p = LoadVerdict::raises(p.path, e->type, e->message,
            "set_optimizer_state_dict first calls optimizer.step() with zero gradients (_init_optim_state)");
}

bool Diagnoser::allIntegerKeys(const OptimizerView& v)
{
    if (v.flattened) return false;
    for (const auto& p : v.params)
        if (p.key.empty() || !std::all_of(p.key.begin(), p.key.end(), ::isdigit)) return false;
    return true;
}

bool Diagnoser::groupFlag(const OptimizerView& v, const char* name)
{
    for (const auto& g : v.groups)
        if (auto it = g.hyperparams.find(name); it != g.hyperparams.end() && !it->second->isTensor()
            && it->second->value && it->second->value->kind == PyKind::Bool && it->second->value->boolean)
            return true;
    return false;
}

std::optional<PythonError> Diagnoser::dsdInitError(OptimizerKind kind, const OptimizerView& v)
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

std::string Diagnoser::firstStateName(const OptimizerView& v)
{
    // the first in the order the optimizer made them (its save's order: Adam's step, then exp_avg), which DSD looks
    // them up in; the map's alphabetical first (exp_avg) named the wrong key (found by a hunt)
    for (const auto& p : v.params) {
        const std::pair<const std::string, const Entry*>* first = nullptr;
        for (const auto& s : p.states)
            if (!first || std::less<const Entry*>()(s.second, first->second)) first = &s;
        if (first) return first->first;
    }
    return "step";
}

std::string Diagnoser::missingStateKeyText(const OptimizerView& v, const std::string& fqn)
{
    // DSD looks the state up by name: the flattened format's first state key of it, the nested one's name
    return v.flattened ? "'state." + fqn + "." + firstStateName(v) + "'" : "'" + fqn + "'";
}

} // namespace optscope
