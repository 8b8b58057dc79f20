// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Which torch.optim optimizer wrote a state dict, from its hyperparameter and state names, and what its state looks
// like: which states have the parameter's shape (exp_avg), which are factored (Adafactor's row_var/col_var), which are
// scalars (step, eta, mu), and whether all state sits under one parameter (LBFGS).

#include "optscope/optim/optimizer_view.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace optscope {

enum class OptimizerKind {
    Unknown,
    Adam, ///< Adam and AdamW (same state; amsgrad adds max_exp_avg_sq)
    NAdam,
    RAdam,
    Adamax,
    Adagrad,
    Adadelta,
    Adafactor,
    ASGD,
    LBFGS,
    RMSprop,
    Rprop,
    SGD,
    SparseAdam,
};
const char* optimizerKindName(OptimizerKind kind);

/// detected from param_groups' hyperparameter names first (unique per class), then from state names
OptimizerKind detectOptimizerKind(const OptimizerView& view);

/// LBFGS keeps its whole state (d, t, old_dirs, ...) under the first parameter; the others have none, by design
bool keepsAllStateOnFirstParam(OptimizerKind kind);

/// The shape state @p name must have for a parameter of shape @p param; nullopt when the state has no fixed relation
/// to the parameter's shape (scalars like step/eta/mu, LBFGS's flat history).
std::optional<std::vector<int64_t>> expectedStateShape(
    OptimizerKind kind, const std::string& name, const std::vector<int64_t>& param);

/// A param group whose optimizer creates no state at all: torch.optim.SGD with momentum 0 (its default) keeps none,
/// however many steps it took, so parameters without state are its design, not a save before the first step
bool groupKeepsNoState(OptimizerKind kind, const Checkpoint& checkpoint, const OptimizerGroup& group);

/// The scalar states optimizers keep beside the parameter-shaped ones: step, and ASGD's eta and mu, NAdam's
/// mu_product
bool isScalarState(const std::string& name);

/// The optimizer's step counter: a state key ending in "step" ("optim.state.fc.weight.step"), a number or a 1-element
/// tensor. It
/// moves by the steps between two checkpoints, which says nothing about the values (Watch leaves it out of its chart)
bool isStepCounterKey(const std::string& key, int64_t numel);

/// The parameter's shape as its state shows it: the first parameter-shaped state (exp_avg, momentum_buffer, ...), or
/// for Adafactor's factored second moment row_var [..., r, 1] and col_var [..., 1, c] together; empty when unknown.
std::vector<int64_t> paramShapeFromState(OptimizerKind kind, const OptimizerParam& param);

} // namespace optscope
