// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The missing/unexpected-key debugger: what is wrong between an optimizer checkpoint and the model it should load
// into, what PyTorch 2.6 does on each load path (loads, or the exception it raises, with its text), and a fix that can
// be applied (checkpoint_fix.h). Built on the one optimizer model (param_table.h) and the one finding type
// (finding.h); check's structural and self-consistency findings are part of every diagnosis.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"
#include "optscope/model/finding.h"
#include "optscope/optim/param_table.h"

#include <nlohmann/json_fwd.hpp> // the full header (25k lines) only where JSON is built

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace optscope {

/// the model side of a diagnosis (historical name)
using ExpectedParams = ModelParams;
using DiagnosisFinding = Finding;

/// How the user's code builds the optimizer it loads into: param group sizes (and names when known). Without it the
/// optimizer is taken to be built over model.parameters() in one group.
struct TargetOptimizer
{
    std::string source;
    OptimizerKind kind = OptimizerKind::Unknown; ///< the class that saved it (its names and states tell)
    std::vector<size_t> groupSizes;
    /// per position in param_groups order: the parameter's shape (from its state), empty when unknown; groups may
    /// reorder parameters (Hugging Face Trainer: decay, then no-decay), so position i is not model.parameters()[i]
    std::vector<std::vector<int64_t>> shapes;
    /// per position: the empty shape is known, a 0-dim parameter (paramIsZeroDimByState); else empty means unknown
    std::vector<bool> zeroDim;
    /// per position: the parameter's name when the saved target records it (param_names, FQN keys); else empty
    std::vector<std::string> names;
    /// per position: the saved target holds state for it (saved after a step: one without is frozen, or unused)
    std::vector<bool> withState;
    /// the names of the positions without state, when the target records names and holds state for some: saved
    /// after a step, those were frozen (requires_grad=False) in the loading run. Empty otherwise
    std::set<std::string> frozenNames() const;
    /// the parameters with state after the target's step, by canonical name: trainable there (empty when unknown)
    std::set<std::string> trainableNames() const;
    static TargetOptimizer fromCheckpoint(const Checkpoint& optimizer);
    /// The model parameters the target optimizer holds, in its order: all of @p model's when it holds as many, else
    /// the ones its names give, else @p savedNames (the saved optimizer's) when their shapes are the target's, else
    /// the subsequence of the model's parameters whose shapes are the target's (an optimizer over the trainable
    /// parameters only: frozen backbone, LoRA adapters), the last fit in model order when several fit (frozen layers
    /// usually come first). Empty when none fits. @p note says how they were chosen; @p unique is false when shapes
    /// alone chose among several fits.
    std::vector<std::string> paramsOf(
        const ModelParams& model, const std::vector<std::string>& savedNames, std::string& note, bool& unique) const;
};

/// The load paths a user may take, as PyTorch 2.6 implements them.
enum class LoadPath {
    OptimizerLoadStateDict, ///< optimizer.load_state_dict(osd)
    SetOptimizerStateDict, ///< torch.distributed.checkpoint.state_dict.set_optimizer_state_dict(model, optim, osd)
    SetOptimizerStateDictNonStrict, ///< the same with StateDictOptions(strict=False)
    Fsdp1OptimStateDictToLoad, ///< FSDP.optim_state_dict_to_load(fsdp_model, optim, osd) (use_orig_params=True)
    ModelLoadStateDict, ///< model.load_state_dict(the model state dict saved beside the optimizer)
};
const char* loadPathName(LoadPath path);

enum class LoadOutcome { Loads, Raises, NotApplicable };

struct LoadVerdict
{
    LoadPath path = LoadPath::OptimizerLoadStateDict;
    LoadOutcome outcome = LoadOutcome::NotApplicable;
    std::string exception; ///< "ValueError", "KeyError", "RuntimeError"
    std::string message; ///< str(e) as PyTorch formats it; the model's class name is written <Model>
    int paramsWithState = -1; ///< Loads: parameters of the target optimizer that get state
    int paramsTotal = -1;
    std::string stepAfterLoad; ///< Loads: "ok", or the exception type the first step() raises ("RuntimeError")
    std::string why; ///< NotApplicable: why; otherwise what decided it
    /// Loads on an assumption the files cannot settle: these parameters, saved without state, are taken as frozen
    /// in the model (requires_grad=False: no state is looked up for them); were one trainable there, the load
    /// raises @c ifTrainableException instead, naming the first of them trainable there (@c ifTrainableMessage: when
    /// all are). A target optimizer that stepped, saved with names, says which
    std::vector<std::string> assumedFrozen;
    std::string ifTrainableException, ifTrainableMessage;
    nlohmann::ordered_json toJson() const;
    /// the outcome in words, as the CLI and the GUI show it: "loads (27 of 27 parameters get state); the first
    /// step() raises RuntimeError", "raises ValueError: ...", "n/a (why)"
    std::string outcomeText() const;

    static LoadVerdict raises(LoadPath path, std::string exception, std::string message, std::string why);
    static LoadVerdict loads(LoadPath path, int withState, int total, std::string stepAfterLoad, std::string why);
};

struct Diagnosis
{
    std::string path;
    std::string expectedSource;
    std::string optimizerKind; ///< of the first optimizer
    std::vector<Finding> findings;
    std::vector<LoadVerdict> verdicts; ///< for one optimizer against the model; empty without a model
    /// the optimizer the verdicts are for (its key path, "" for a file that is one), when the file holds several:
    /// the first that fits the model
    std::optional<std::string> verdictsFor;
    std::vector<std::string> notes; ///< how the diagnosis read the inputs (which parameters the target holds, ...)
    /// "what PyTorch 2.6 does with it", or "... with optimizer 'disc_opt'" when the file holds several
    std::string verdictsTitle() const;
    bool fixable() const; ///< some finding has actions
    bool hasProblems() const; ///< some finding is an error or a warning
    nlohmann::ordered_json toJson() const;
};

/// What a fix did, told by finding code (errors and warnings only): the codes the original's diagnosis had that the
/// fixed copy's (against the same model) no longer has, those it still has, and any it has that the original had not.
/// Keys are not compared: the fix renames them. The app and `optscope-cli fix` both say it after writing a fix.
struct DiagnosisChange
{
    struct CodeCount
    {
        FindingCode code;
        size_t before = 0; ///< findings of this code in the original
        size_t after = 0; ///< in the fixed copy
        /// how many, as the app and the CLI say it: "1 of 3" while some remain, else the one count ("2")
        std::string countText() const;
    };
    std::vector<CodeCount> resolved; ///< after == 0
    std::vector<CodeCount> remaining; ///< before > 0 and after > 0
    std::vector<CodeCount> added; ///< before == 0
    /// the fixed copy's verdicts for the load paths the original loaded on and the copy does not: a fix that makes
    /// a loader fail is not a fix for who loads that way (re-keying by name for a target that trains a parameter
    /// saved without state)
    std::vector<LoadVerdict> broken;
    /// no error is left in the fixed copy (remaining or added), and no load path broke
    bool noErrorsLeft() const;
    /// the broken paths as the CLI and the app say them: "set_optimizer_state_dict raises KeyError: 'fc1.weight'"
    std::string brokenText() const;
    /// {"resolved": [{"code", "before", "after"}], "remaining": [...], "added": [...], "broken": [verdict...],
    /// "no_errors_left": bool}
    nlohmann::ordered_json toJson() const;
};
DiagnosisChange compareDiagnoses(const Diagnosis& before, const Diagnosis& after);

/// What a diagnosis checks against, as the CLI's --model and the app's reference take it: a checkpoint (a model, a
/// training checkpoint, a reference optimizer whose parameters are named) or a text file of FQNs (a file no format
/// takes by name whose first bytes are text: ModelParams::looksLikeFqnList), local or remote.
ExpectedParams expectedParamsFrom(const std::string& location, const Progress& progress = {});

/// Diagnoses @p optim (any checkpoint holding one or more optimizer state dicts) against @p expected (may be null:
/// then only the structure and self-consistency are checked). @p target (may be null) says how the loading code
/// builds its optimizer's param groups. @p loadWorldSize (0: not given) is the number of data-parallel ranks the
/// loading run uses: a DeepSpeed ZeRO checkpoint loads only on the world size it was saved by.
Diagnosis diagnoseCheckpoint(const Checkpoint& optim, const ModelParams* expected, const Progress& progress = {},
    const TargetOptimizer* target = nullptr, int loadWorldSize = 0);

} // namespace optscope
