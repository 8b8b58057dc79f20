// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/optim/optimizer_kind.h"

#include "optscope/base/error.h"
#include "optscope/tensor/tensor_values.h"

#include <algorithm>
#include <set>

namespace optscope {

const char* optimizerKindName(OptimizerKind kind)
{
    switch (kind) {
    case OptimizerKind::Unknown:
        return "unknown";
    case OptimizerKind::Adam:
        return "Adam/AdamW";
    case OptimizerKind::NAdam:
        return "NAdam";
    case OptimizerKind::RAdam:
        return "RAdam";
    case OptimizerKind::Adamax:
        return "Adamax";
    case OptimizerKind::Adagrad:
        return "Adagrad";
    case OptimizerKind::Adadelta:
        return "Adadelta";
    case OptimizerKind::Adafactor:
        return "Adafactor";
    case OptimizerKind::ASGD:
        return "ASGD";
    case OptimizerKind::LBFGS:
        return "LBFGS";
    case OptimizerKind::RMSprop:
        return "RMSprop";
    case OptimizerKind::Rprop:
        return "Rprop";
    case OptimizerKind::SGD:
        return "SGD";
    case OptimizerKind::SparseAdam:
        return "SparseAdam";
    }
    return "?";
}

OptimizerKind detectOptimizerKind(const OptimizerView& view)
{
    std::set<std::string> hp, st;
    for (const auto& g : view.groups)
        for (const auto& [name, e] : g.hyperparams)
            hp.insert(name);
    for (const auto& p : view.params)
        for (const auto& [name, e] : p.states)
            st.insert(name.substr(0, name.find('.')));
    auto has = [](const std::set<std::string>& s, const char* n) { return s.count(n) > 0; };
    // hyperparameter names that only one torch.optim class has (2.6)
    if (has(hp, "history_size") || has(hp, "line_search_fn") || has(st, "func_evals")) return OptimizerKind::LBFGS;
    if (has(hp, "beta2_decay") || has(st, "row_var") || has(st, "col_var")) return OptimizerKind::Adafactor;
    if (has(hp, "lambd") || has(hp, "t0") || has(st, "eta")) return OptimizerKind::ASGD;
    if (has(hp, "etas") || has(hp, "step_sizes") || has(st, "step_size")) return OptimizerKind::Rprop;
    if (has(hp, "rho") || has(st, "acc_delta")) return OptimizerKind::Adadelta;
    if (has(hp, "centered") || has(st, "square_avg")) return OptimizerKind::RMSprop;
    if (has(hp, "lr_decay") || has(hp, "initial_accumulator_value") || has(st, "sum")) return OptimizerKind::Adagrad;
    if (has(hp, "momentum_decay") || has(st, "mu_product")) return OptimizerKind::NAdam;
    if (has(st, "exp_inf")) return OptimizerKind::Adamax;
    if (has(hp, "amsgrad")) return OptimizerKind::Adam;
    if (has(hp, "decoupled_weight_decay")) return OptimizerKind::RAdam;
    // Adamax saved before its first step (no exp_inf yet): betas and capturable without Adam's amsgrad, NAdam's
    // momentum_decay or RAdam's decoupled_weight_decay (2.1 and later, when both gained capturable)
    // (and no state of Adam's: an Adam file whose groups lost amsgrad stays Adam; found by a review hunt)
    if (has(hp, "betas") && has(hp, "capturable") && has(hp, "weight_decay") && !has(st, "exp_avg"))
        return OptimizerKind::Adamax;
    if (has(hp, "nesterov") || has(hp, "dampening") || has(st, "momentum_buffer")) return OptimizerKind::SGD;
    if (has(hp, "betas") && !has(hp, "weight_decay")) return OptimizerKind::SparseAdam;
    if (has(st, "exp_avg")) return OptimizerKind::Adam;
    return OptimizerKind::Unknown;
}

namespace {

/// a state the step reads when a group flag is set (Adam's max_exp_avg_sq with amsgrad), or always (no flag)
struct StateRead
{
    const char* name;
    const char* flag = nullptr; ///< group key whose truthy value (True, a nonzero number) makes the step read it
};

/// What one torch.optim class reads of its param groups and states, as torch 2.6's sources do (torch/optim/*.py:
/// __setstate__, step, _init_group); the one table firstMissForClass reads.
struct ClassReads
{
    OptimizerKind kind;
    std::vector<const char*> setstateDefaults; ///< group keys __setstate__ fills in (group.setdefault)
    std::vector<const char*> setstateStates; ///< states __setstate__ reads from every non-empty saved state
    std::vector<const char*> groupKeysFirst; ///< group keys step() reads before a parameter's state
    std::vector<StateRead> states; ///< states _init_group reads with state[...] from a non-empty state, in order
    std::vector<const char*> groupKeysThen; ///< group keys step() reads after them
    std::vector<const char*> pairs = {}; ///< of those group keys, the ones step() unpacks into two ("beta1, beta2 =")
    bool stateMadeAtInit = false; ///< __init__ makes every parameter's state; a saved empty one replaces it
};

const std::vector<ClassReads>& classReads()
{
    using K = OptimizerKind;
    static const std::vector<ClassReads> t = {
        {K::Adam, {"amsgrad", "maximize", "foreach", "capturable", "differentiable", "fused"}, {"step"}, {"betas"},
            {{"exp_avg"}, {"exp_avg_sq"}, {"max_exp_avg_sq", "amsgrad"}, {"step"}}, {"lr", "weight_decay", "eps"},
            {"betas"}},
        {K::NAdam, {"maximize", "foreach", "capturable", "differentiable", "decoupled_weight_decay"},
            {"step", "mu_product"}, {"betas"}, {{"exp_avg"}, {"exp_avg_sq"}, {"mu_product"}, {"step"}},
            {"lr", "weight_decay", "momentum_decay", "eps"}, {"betas"}},
        {K::RAdam, {"foreach", "maximize", "differentiable", "decoupled_weight_decay", "capturable"}, {"step"},
            {"betas"}, {{"exp_avg"}, {"exp_avg_sq"}, {"step"}}, {"lr", "weight_decay", "eps"}, {"betas"}},
        {K::Adamax, {"foreach", "maximize", "differentiable", "capturable"}, {"step"},
            {"betas", "eps", "lr", "weight_decay"}, {{"exp_avg"}, {"exp_inf"}, {"step"}}, {}, {"betas"}},
        {K::Adagrad, {"foreach", "maximize", "differentiable", "fused"}, {"step"}, {}, {{"sum"}, {"step"}},
            {"lr", "weight_decay", "lr_decay", "eps"}, {}, true},
        {K::Adadelta, {"foreach", "maximize", "differentiable", "capturable"}, {"step"},
            {"lr", "rho", "eps", "weight_decay"}, {{"square_avg"}, {"acc_delta"}, {"step"}}, {}},
        {K::ASGD, {"foreach", "maximize", "differentiable", "capturable"}, {"step", "eta", "mu"}, {},
            {{"mu"}, {"ax"}, {"eta"}, {"step"}}, {"lambd", "lr", "t0", "alpha", "weight_decay"}},
        {K::RMSprop, {"momentum", "centered", "foreach", "maximize", "differentiable", "capturable"}, {"step"}, {},
            {{"square_avg"}, {"step"}, {"momentum_buffer", "momentum"}, {"grad_avg", "centered"}},
            {"lr", "alpha", "eps", "weight_decay"}},
        {K::Rprop, {"foreach", "maximize", "differentiable", "capturable"}, {"step"}, {"etas", "step_sizes"},
            {{"prev"}, {"step_size"}, {"step"}}, {}, {"etas", "step_sizes"}},
        // _init_group reads group["momentum"] per parameter, and the momentum buffer with state.get (never missing)
        {K::SGD, {"nesterov", "maximize", "foreach", "differentiable", "fused"}, {}, {"momentum"}, {},
            {"weight_decay", "lr", "dampening"}},
        // row_var / col_var / variance are read with state.get
        {K::Adafactor, {"foreach"}, {"step"}, {"eps"}, {{"step"}},
            {"d", "lr", "beta2_decay", "weight_decay", "maximize"}, {"eps"}},
    };
    return t;
}

bool truthy(const Checkpoint& checkpoint, const Entry* e)
{
    if (!e) return false;
    if (!e->isTensor() && e->value && e->value->kind == PyKind::Bool) return e->value->boolean;
    try {
        const std::optional<double> v = readScalar(checkpoint, *e);
        return v && *v != 0.0;
    } catch (const Error&) {
        return false;
    }
}

/// @p e, a group value step() unpacks into two (beta1, beta2 = group["betas"]): false when it can be; else fills
/// @p miss with what Python says (a float: cannot unpack; a tuple of three: too many values)
bool unpacksAsNoPair(const Entry* e, ClassReadMiss& miss)
{
    if (!e || e->isTensor() || !e->value) return false; // a tensor of two unpacks; other tensors: not modelled
    const PyValue& v = *e->value;
    switch (v.kind) {
    case PyKind::Tuple:
    case PyKind::List:
        if (v.size() == 2) return false;
        miss.unpackedLength = static_cast<int64_t>(v.size());
        return true;
    case PyKind::Float:
    case PyKind::Int:
    case PyKind::BigInt:
    case PyKind::Bool:
    case PyKind::None:
        miss.nonIterableType = v.kind == PyKind::Float ? "float"
            : v.kind == PyKind::Bool                   ? "bool"
            : v.kind == PyKind::None                   ? "NoneType"
                                                       : "int";
        return true;
    default:
        return false;
    }
}

} // namespace

std::string ClassReadMiss::exception() const
{
    return !nonIterableType.empty() ? "TypeError" : unpackedLength >= 0 ? "ValueError" : "KeyError";
}

std::string ClassReadMiss::message() const
{
    if (!nonIterableType.empty()) return "cannot unpack non-iterable " + nonIterableType + " object";
    if (unpackedLength > 2) return "too many values to unpack (expected 2)";
    if (unpackedLength >= 0)
        return "not enough values to unpack (expected 2, got " + std::to_string(unpackedLength) + ")";
    return "'" + key + "'";
}

std::optional<ClassReadMiss> firstMissForClass(
    OptimizerKind target, const Checkpoint& checkpoint, const OptimizerView& saved)
{
    const auto& table = classReads();
    const auto rules = std::find_if(table.begin(), table.end(), [&](const ClassReads& r) { return r.kind == target; });
    if (rules == table.end() || saved.groups.empty()) return std::nullopt;
    const auto has = [](const std::vector<const char*>& keys, const std::string& k) {
        return std::any_of(keys.begin(), keys.end(), [&](const char* x) { return k == x; });
    };
    const auto stateOf = [&](const std::string& p) -> const std::map<std::string, const Entry*>* {
        const OptimizerParam* s = saved.param(p);
        return s && !s->states.empty() ? &s->states : nullptr;
    };
    // load_state_dict: __setstate__ fills in its defaults, then reads from every non-empty state
    for (size_t g = 0; g < saved.groups.size(); ++g)
        for (const auto& p : saved.groups[g].params)
            if (const auto* st = stateOf(p))
                for (const char* k : rules->setstateStates)
                    if (!st->count(k)) return ClassReadMiss {true, false, k, g, p, {}, -1};
    // the first step(), group by group
    for (size_t g = 0; g < saved.groups.size(); ++g) {
        const auto& hp = saved.groups[g].hyperparams;
        const auto groupMiss = [&](const std::vector<const char*>& keys) -> std::optional<ClassReadMiss> {
            for (const char* k : keys) {
                const auto it = hp.find(k);
                if (it == hp.end() && !has(rules->setstateDefaults, k))
                    return ClassReadMiss {false, true, k, g, {}, {}, -1};
                if (it == hp.end() || !has(rules->pairs, k)) continue;
                ClassReadMiss notPair {false, true, k, g, {}, {}, -1};
                if (unpacksAsNoPair(it->second, notPair)) return notPair;
            }
            return std::nullopt;
        };
        if (auto m = groupMiss(rules->groupKeysFirst)) return m;
        for (const auto& p : saved.groups[g].params) {
            const auto* st = stateOf(p);
            // an empty state is made fresh by the step, but one __init__ made is replaced by the saved empty one
            if (!st && rules->stateMadeAtInit && !rules->states.empty())
                return ClassReadMiss {false, false, rules->states.front().name, g, p, {}, -1};
            if (!st) continue;
            for (const StateRead& r : rules->states) {
                if (r.flag) {
                    const auto f = hp.find(r.flag);
                    if (f == hp.end() || !truthy(checkpoint, f->second)) continue;
                }
                if (!st->count(r.name)) return ClassReadMiss {false, false, r.name, g, p, {}, -1};
            }
        }
        if (auto m = groupMiss(rules->groupKeysThen)) return m;
    }
    return std::nullopt;
}

bool groupKeepsNoState(OptimizerKind kind, const Checkpoint& checkpoint, const OptimizerGroup& group)
{
    if (kind != OptimizerKind::SGD) return false;
    const auto it = group.hyperparams.find("momentum");
    if (it == group.hyperparams.end()) return false;
    try {
        const std::optional<double> momentum = readScalar(checkpoint, *it->second);
        return momentum && *momentum == 0.0;
    } catch (const Error&) {
        return false; // unreadable: the structural checks say so
    }
}

bool isScalarState(const std::string& name)
{
    static const std::set<std::string> scalars = {"step", "eta", "mu", "mu_product"};
    return scalars.count(name) > 0;
}

bool isStepCounterKey(const std::string& key, int64_t numel)
{
    // under an optimizer's "state" (optim.state.<fqn>.step, state.<id>.step): a model buffer named step is not one
    static const std::string suffix = ".step";
    const bool endsWithStep
        = key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
    const bool underState = key.rfind("state.", 0) == 0 || key.find(".state.") != std::string::npos;
    return numel <= 1 && endsWithStep && underState;
}

bool keepsAllStateOnFirstParam(OptimizerKind kind)
{
    return kind == OptimizerKind::LBFGS;
}

bool savesStepAsTensor(OptimizerKind kind)
{
    return kind != OptimizerKind::SparseAdam;
}

std::optional<std::vector<int64_t>> expectedStateShape(
    OptimizerKind kind, const std::string& name, const std::vector<int64_t>& param)
{
    if (kind == OptimizerKind::LBFGS) return std::nullopt; // flat directions over all parameters, lists, scalars
    if (isScalarState(name)) return std::nullopt;
    if (kind == OptimizerKind::Adafactor && param.size() >= 2) {
        // factored second moment: row_var has the last dim 1, col_var the second to last (torch/optim/_adafactor.py)
        std::vector<int64_t> s = param;
        if (name == "row_var") {
            s.back() = 1;
            return s;
        }
        if (name == "col_var") {
            s[s.size() - 2] = 1;
            return s;
        }
    }
    return param;
}

std::vector<int64_t> paramShapeFromState(OptimizerKind kind, const OptimizerParam& param)
{
    if (kind == OptimizerKind::LBFGS) return {};
    auto shapeOf = [&](const char* name) -> const std::vector<int64_t>* {
        auto it = param.states.find(name);
        return it != param.states.end() && it->second->isTensor() ? &it->second->tensor->shape : nullptr;
    };
    if (kind == OptimizerKind::Adafactor) {
        const auto* row = shapeOf("row_var");
        const auto* col = shapeOf("col_var");
        if (row && col && row->size() == col->size() && row->size() >= 2) {
            std::vector<int64_t> s = *row;
            s.back() = col->back();
            return s;
        }
        if (const auto* v = shapeOf("variance")) return *v;
    }
    for (const auto& [name, e] : param.states)
        if (e->isTensor() && !e->tensor->shape.empty() && expectedStateShape(kind, name, e->tensor->shape))
            return e->tensor->shape;
    return {};
}

bool paramIsZeroDimByState(OptimizerKind kind, const OptimizerParam& param)
{
    // a custom class's 0-dim state may be a scalar of its own; LBFGS's are scalars and flat directions
    if (kind == OptimizerKind::Unknown || kind == OptimizerKind::LBFGS || !paramShapeFromState(kind, param).empty())
        return false;
    for (const auto& [name, e] : param.states)
        if (e->isTensor() && e->tensor->shape.empty() && expectedStateShape(kind, name, {})) return true;
    return false;
}

} // namespace optscope
