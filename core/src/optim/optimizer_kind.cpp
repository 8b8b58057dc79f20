// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/optim/optimizer_kind.h"

#include "optscope/base/error.h"
#include "optscope/tensor/tensor_values.h"

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
    if (has(hp, "nesterov") || has(hp, "dampening") || has(st, "momentum_buffer")) return OptimizerKind::SGD;
    if (has(hp, "betas") && !has(hp, "weight_decay")) return OptimizerKind::SparseAdam;
    if (has(st, "exp_avg")) return OptimizerKind::Adam;
    return OptimizerKind::Unknown;
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

} // namespace optscope
