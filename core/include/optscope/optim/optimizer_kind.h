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

/// Whether the class keeps its step counter as a tensor (torch >= 1.12, every class with a step but SparseAdam, whose
/// step is still a Python int in 2.6): a number step of such a class is from an older PyTorch or Megatron, and a
/// writer that turns it into the tensor the class saves today keeps dcp.load into today's optimizer working (which
/// needs the same kind on both sides); SparseAdam's int turned into a tensor broke it (found by a hunt)
bool savesStepAsTensor(OptimizerKind kind);

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

/// A key that a torch.optim class reads from what load_state_dict handed it and does not find: load_state_dict
/// replaces the optimizer's param groups by the saved ones (only "params" kept) and takes the saved states as they
/// are, so an optimizer of another class (Adagrad's state into Adam) or a hand-edited group misses what it reads.
struct ClassReadMiss
{
    bool atLoad = false; ///< its __setstate__ (inside load_state_dict) reads it: the load raises; else the first step()
    bool groupKey = false; ///< a param group's hyperparameter ("betas"); else a parameter's state ("exp_avg_sq")
    std::string key;
    size_t group = 0; ///< the saved param group it is read from (a state key: the group of that parameter)
    std::string param; ///< a state key: the saved parameter's key in "state"
    /// a group value there that step() unpacks into two and cannot: its Python type ("float"), or the length of a
    /// tuple or list of other than two; both unset: the key is missing
    std::string nonIterableType;
    int64_t unpackedLength = -1;
    std::string exception() const; ///< "KeyError", or "TypeError" / "ValueError" of an unpacking
    std::string message() const; ///< str(e) as Python gives it: "'exp_avg'", "cannot unpack non-iterable float object"
};

/// The first key that class @p target (torch 2.6) reads and @p saved's groups and states lack, in the order its
/// __setstate__ and then its first step() read them (every parameter given a gradient); nullopt when none is missing.
/// Not modelled: Unknown, LBFGS (its step needs a closure) and SparseAdam (sparse gradients only).
std::optional<ClassReadMiss> firstMissForClass(
    OptimizerKind target, const Checkpoint& checkpoint, const OptimizerView& saved);

/// The parameter's shape as its state shows it: the first parameter-shaped state (exp_avg, momentum_buffer, ...), or
/// for Adafactor's factored second moment row_var [..., r, 1] and col_var [..., 1, c] together; empty when unknown.
std::vector<int64_t> paramShapeFromState(OptimizerKind kind, const OptimizerParam& param);
/// The state of a known optimizer class shows a 0-dim parameter (CLIP's logit_scale): a parameter-shaped state
/// (exp_avg, momentum_buffer, ...) of shape []. paramShapeFromState's empty shape is then known, not unknown.
bool paramIsZeroDimByState(OptimizerKind kind, const OptimizerParam& param);

} // namespace optscope
