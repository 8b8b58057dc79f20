// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Inside diagnoseCheckpoint (diagnosis.h): one Diagnoser per diagnosis, its rules in files by what they read:
//
//   diagnosis.cpp             the public types; run(), which says the order the rules run in; the saved optimizer
//                             taken as the target when none is given (optimizerParams, frozenReading)
//   diagnosis_names.cpp       the optimizer's names against the model's: wrapper prefixes, renamed layers, coverage
//                             (missing, extra, frozen), positions, the flattened format
//   diagnosis_state.cpp       one optimizer against the model (compare): FSDP1 flat state, param groups, state
//                             shapes, dtypes, the loading class, DTensors
//   diagnosis_model_part.cpp  the model state dict saved beside the optimizer
//   diagnosis_verdicts.cpp    what each load path does with it: the verdict table
//
// Private to the analysis layer: nothing outside diagnosis*.cpp includes it.

#include "optscope/analysis/checkpoint_check.h"
#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/finding_text.h"
#include "optscope/optim/fqn_normalizer.h"
#include "optscope/optim/optimizer_kind.h"
#include "optscope/optim/param_table.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace optscope {

/// an exception PyTorch raises, its type and str(e) apart (a verdict holds them apart, a finding says "type: message")
struct PythonError
{
    std::string type;
    std::string message;
    std::string text() const { return type + ": " + message; }
};

inline constexpr const char* kGroupCountError = "loaded state dict has a different number of parameter groups";
inline constexpr const char* kGroupSizeError
    = "loaded state dict contains a parameter group that doesn't match the size of optimizer's group";

/// a shape as PyTorch prints it in errors: torch.Size([2, 3])
inline std::string torchSizeText(const std::vector<int64_t>& s)
{
    std::string t = "torch.Size([";
    for (size_t i = 0; i < s.size(); ++i)
        t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "])";
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
        , m_trainableInTarget(target ? target->trainableNames() : std::set<std::string>())
    { }

    Diagnosis run();

private:
    static bool hasError(const Diagnosis& d);
    static std::string firstError(const Diagnosis& d);

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
    void flattenedToNested(Diagnosis& d) const;

    void wrapperPrefixHints(Diagnosis& d) const;

    /// the model's parameter dtype for a name (as written, or as DSD names it); nullopt when the model does not say
    std::optional<DType> modelDtype(const std::string& fqn) const;

    static bool isFloat8(DType d);

    /// whether @p to holds every value of @p from as it is (a cast to it rounds nothing)
    static bool holdsAll(DType from, DType to);

    /// The first float8 parameter of the model the optimizer loads into, "" if none: torch.optim (2.6) has no float8
    /// kernels, whatever the checkpoint holds
    std::string float8Param() const;

    /// What the first step() on float8 parameters raises in PyTorch 2.6: the first kernel of the step without a
    /// float8 implementation, which depends on the optimizer and its settings (measured on the CPU with each
    /// torch.optim class at its defaults: Adam, NAdam, RAdam, Adamax lerp_kernel_scalar; AdamW, RMSprop, Adadelta,
    /// ASGD mul_cpu_reduced_float; SGD with momentum add_stub; Adagrad addcmul_cpu_out; Rprop sign_cpu)
    static PythonError float8StepError(DType dtype);

    /// the class that loads the saved optimizer: the target optimizer's when it is given and known, else the saved
    /// one's own (the target built as the saved one was)
    OptimizerKind loadingClass(int oi) const;

    /// what the loading class reads and the saved groups or states lack (another class's state, a group edited by
    /// hand or by a tool)
    std::optional<ClassReadMiss> targetClassMiss(int oi) const;

    void classFindings(
        int oi, OptimizerKind savedKind, const std::string& where, const std::string& root, Diagnosis& d);

    /// the saved optimizer's DTensor states, when the target model is known to hold plain tensors (a torch.save'd,
    /// safetensors or Trainer model file without DTensors): every step mixes the two. Empty otherwise
    std::vector<std::string> dtensorStatesIntoPlain(int oi) const;
    static constexpr const char* kMixedDTensor
        = "got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before calling distributed "
          "operators!";

    void dtensorFindings(int oi, const std::string& where, const std::string& root, Diagnosis& d);

    /// optimizer.load_state_dict (and so every loader) casts each state tensor but "step" to its parameter's dtype
    /// when the parameter is floating point (Optimizer._process_value_according_to_param_policy, torch 2.6): float32
    /// moments into bfloat16 parameters are rounded without a word; into float8 parameters they load, and the first
    /// step raises
    void dtypeFindings(const std::vector<const ParamRow*>& listed, const Names& names, bool byName,
        const std::string& where, const std::string& root, Diagnosis& d) const;

    /// the model's parameter shape for a name (as written, or as DSD names it)
    const std::vector<int64_t>* modelShape(const std::string& fqn) const;

    /// Several optimizers over disjoint parts of the model: each optimizer's parameters, by the shapes its state
    /// gives (in param_groups order), matched in model order among the parameters the optimizers before it did not
    /// take. Every optimizer must find its parameters; model tensors left over are buffers or frozen parameters.
    /// nullopt when they do not fit so.
    std::optional<std::vector<std::vector<std::string>>> partsOfModel(std::string& note, bool& unique) const;

    /// the parameter's shape as its own state gives it (a state that has the parameter's shape: exp_avg,
    /// momentum_buffer, ...), whatever name a table gave the row; nullopt without such a state
    static std::optional<std::vector<int64_t>> stateShape(const ParamRow& row, OptimizerKind kind);

    /// each optimizer against the model restricted to its part (diagnosed as with --target-optim over that part)
    void diagnoseParts(
        const std::vector<std::vector<std::string>>& parts, bool unique, const std::string& note, Diagnosis& d);

    /// first state of @p row whose shape is not what the parameter @p shape needs; "" if none
    /// optimizer.load_state_dict pairs the saved parameters with the target's by position: where both sides record
    /// names (param_names, FQN keys or the model saved beside it; the target's own, or model order for the default
    /// one-group target) and the
    /// saved name at a position is another target parameter's, that parameter gets the other's state, silently where
    /// the shapes agree. @p sameOrder: the target is taken to build the saved groups (a resume, the Trainer)
    void positionFindings(const std::vector<const ParamRow*>& listed, const Names& names, bool sameOrder,
        const std::string& where, const std::string& root, bool shapesFit, Diagnosis& d) const;

    /// DSD's _split_optim_state_dict gives each saved group's hyperparameters to the last of the target's groups that
    /// holds one of its parameters: the first target group left with none (its first step() raises KeyError on a
    /// hyperparameter), or -1. Known only for FQN-keyed state and a target that records its parameters' names
    int targetGroupWithoutHyperparameters(const OptimizerView& v) const;

    /// FQN-keyed state paired with the model's parameters by name (DSD, FSDP1): some state does not fit the shape of
    /// the parameter of its name
    bool namedStateMisfits(
        const OptimizerView& v, const std::vector<const ParamRow*>& listed, OptimizerKind kind) const;

    std::string wrongState(const ParamRow& row, OptimizerKind kind, const std::vector<int64_t>& shape) const;

    std::vector<size_t> targetGroupSizes() const;

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
    void compare(int oi, Diagnosis& d, bool withVerdicts);

    OptimizerReading readOptimizer(int oi, Diagnosis& d) const;

    /// raw FSDP1 flat-parameter state: one rank's slices, or flat parameters
    void flatStateFindings(const OptimizerReading& reading, Diagnosis& d) const;

    /// after the name rules: the model's parameters without saved state (missing, or frozen when saved or where it
    /// loads) and the saved ones the model lacks
    void coverageFindings(const OptimizerReading& reading, const Names& names, Diagnosis& d) const;

    /// the positional loader's group count and sizes; returns the ValueError load_state_dict raises ("" if they fit)
    std::string groupFindings(const OptimizerReading& reading, Diagnosis& d) const;

    /// state tensors whose shape is not their parameter's, by name (set_optimizer_state_dict) and by position
    /// (optimizer.load_state_dict); returns those by position
    std::vector<std::string> shapeFindings(
        const OptimizerReading& reading, const Names& names, const std::string& groupError, Diagnosis& d) const;

    /// what the name findings cost on load: set_optimizer_state_dict's error (strict changes nothing), else the
    /// positional loader's
    static void quoteLoadErrors(const std::vector<LoadVerdict>& verdicts, size_t firstFinding, Diagnosis& d);

    void nameFindings(
        int oi, const std::string& where, const std::vector<const ParamRow*>& listed, Names& names, Diagnosis& d);

    void moduleRenameFindings(const std::string& where, const std::string& root,
        const std::vector<const ParamRow*>& listed, const std::set<std::string>& expected, Names& names, Diagnosis& d);

    void modelPartFindings(const std::map<std::string, std::string>& optimizerRenames, Diagnosis& d);

    /// nn.Module.load_state_dict's lists: missing keys in the model's order, unexpected ones in the file's
    static void keyDifference(const ModelParams& part, const ModelParams& model, std::vector<std::string>& missing,
        std::vector<std::string>& unexpected);

    static std::string modelLoadMessage(const std::vector<std::string>& missing,
        const std::vector<std::string>& unexpected, const std::vector<std::string>& sizes = {});

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

    /// The verdicts, one per load path, as verdictPipelines() lists them (diagnosis_verdicts.cpp): each path's own
    /// reading decides whether it loads and how many parameters get state; then the rules of what the load or the
    /// first step() meets apply, in the table's order.
    void verdicts(const VerdictFacts& f, Diagnosis& d) const;

    using VerdictReading = LoadVerdict (Diagnoser::*)(const VerdictFacts&) const;
    using VerdictRule = void (Diagnoser::*)(const VerdictFacts&, LoadVerdict&) const;
    /// How one load path's verdict is worked out: a reading, then rules in order; or the verdict of another path
    /// (`sameAs`), relabelled
    struct VerdictPipeline
    {
        LoadPath path;
        VerdictReading reading = nullptr;
        std::vector<VerdictRule> rules;
        std::optional<LoadPath> sameAs = std::nullopt;
    };
    /// one row per load path, in the order the verdicts are shown
    static const std::vector<VerdictPipeline>& verdictPipelines();
    LoadVerdict verdictOf(const VerdictPipeline& pipeline, const VerdictFacts& f) const;

    /// set_optimizer_state_dict's reading: integer-keyed state is handed to optimizer.load_state_dict unchanged (its
    /// pipeline, relabelled); FQN-keyed state is looked up by name (byNameVerdict, then the rules of its own pipeline)
    LoadVerdict setOptimizerStateDictReading(const VerdictFacts& f) const;

    /// optimizer.load_state_dict: group count, group sizes, then pairs by position (no names, no shapes)
    LoadVerdict byPositionVerdict(const VerdictFacts& f) const;

    /// set_optimizer_state_dict of FQN-keyed state: each trainable model parameter's state looked up by its name
    /// (wrappers stripped), KeyError when absent
    LoadVerdict byNameVerdict(const VerdictFacts& f) const;

    /// FSDP1 (use_orig_params=True): integer keys are refused; every saved name must be a model parameter, then the
    /// positional group checks of load_state_dict apply
    LoadVerdict fsdp1Verdict(const VerdictFacts& f) const;

    /// model.load_state_dict of the model saved beside the optimizer (the optimizer's facts play no part)
    LoadVerdict modelVerdict(const VerdictFacts& f) const;

    /// the saved groups' flags that come back with them, and float8 parameters: the first step() raises
    void applyFlagsAtStep(const VerdictFacts& f, LoadVerdict& p) const;

    /// another class's state (or a group without a key the class reads): the load or the first step misses it
    void applyClassMiss(const VerdictFacts& f, LoadVerdict& p) const;

    /// DTensor states into plain parameters: they load; the step mixes the two (FSDP1's loader converts them)
    void applyDTensorsAtStep(const VerdictFacts& f, LoadVerdict& p) const;

    /// a target group that no saved group's hyperparameters reach (DSD gives each to the last target group holding one
    /// of its parameters): its first step() misses them
    void applyGroupWithoutHyperparameters(const VerdictFacts& f, LoadVerdict& p) const;

    /// set_optimizer_state_dict first steps the fresh optimizer with zero gradients (_init_optim_state) whatever the
    /// file holds: what that step raises is the load's error
    void applyDsdInitStep(const VerdictFacts& f, LoadVerdict& p) const;

    /// differentiable=True in the saved groups: a load that gets through steps into autograd's in-place refusal
    void applyDifferentiableAtStep(const VerdictFacts& f, LoadVerdict& p) const;

    static bool allIntegerKeys(const OptimizerView& v);

    /// a boolean hyperparameter (capturable, differentiable) that some param group sets to True
    static bool groupFlag(const OptimizerView& v, const char* name);
    static bool capturable(const OptimizerView& v) { return groupFlag(v, "capturable"); }

    /// differentiable=True: step() runs with autograd on and updates the parameters in place, which autograd refuses
    /// for leaf tensors that require grad (model.parameters()): every optimizer's step raises (torch 2.6, checked
    /// for each torch.optim class that has the flag)
    static bool differentiable(const OptimizerView& v) { return groupFlag(v, "differentiable"); }
    /// what the zero-gradient step set_optimizer_state_dict runs first raises, for optimizers built like the saved one
    /// on a CPU target (none when it works)
    static std::optional<PythonError> dsdInitError(OptimizerKind kind, const OptimizerView& v);

    static std::string firstStateName(const OptimizerView& v);
    /// the KeyError's message when set_optimizer_state_dict looks up the state of @p fqn and finds none
    static std::string missingStateKeyText(const OptimizerView& v, const std::string& fqn);

    /// the model given (m_exp is restricted to the optimizer's parameters under the frozen reading)
    const ModelParams* expectedModel() const { return m_model; }

    /// No target optimizer, and the saved one holds a subset of the model's parameters that its names (or shapes)
    /// place: the training script gave the optimizer only the trainable parameters (a frozen backbone, LoRA, a
    /// frozen layer). Diagnosed as loaded by the same script (an optimizer over the trainable ones, which loads), with
    /// a warning that gives the other reading (an optimizer over model.parameters(), which raises)
    void frozenReading(const ModelParams& model, Diagnosis& d) const;

    /// the model with only the parameters the target optimizer holds, when it holds fewer than the model has (the
    /// loaders look up and count those only; model.load_state_dict still wants every key). Without a target, the
    /// saved optimizer itself when it holds fewer parameters than the model and they place in it (@p frozenReading)
    static std::optional<ModelParams> optimizerParams(const Checkpoint& cp, const ModelParams* model,
        const TargetOptimizer* target, std::string& note, bool& frozenReading);

    /// the first optimizer's parameter names as the file records them (FQN keys, param_names); empty if it does not
    static std::vector<std::string> savedNames(const Checkpoint& cp);

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
    /// the target's parameters with state after its step (TargetOptimizer::trainableNames)
    std::set<std::string> m_trainableInTarget;
    bool m_reportedModelPart = false;
};

} // namespace optscope
