// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The one optimizer model: per optimizer state dict in a checkpoint, a table of its parameters (integer id <-> FQN <->
// normalised FQN <-> FSDP1 flat parameter/offset <-> shape <-> states present <-> param group), built once from any
// format and used by check, diagnose, fix, diff, the `map` command and the GUI's FQN panel. How an id becomes an FQN
// is decided here and nowhere else:
//   1. FQN-keyed state (DSD, FSDP): the key is the name
//   2. `param_names` in every param group (optimizers built from named_parameters(), PyTorch >= 2.6)
//   3. raw FSDP1 flat-parameter state with a model known: the FlatParamLayout that reproduces the shard sizes
//   4. a model state dict in the same file, with as many parameters: by position (model.parameters() order)
//   5. a reference (--model), with as many parameters: by position
//   6. with two groups and a model: the Hugging Face Trainer's split (Trainer.get_decay_parameter_names: no
//      weight decay for names matching bias / layernorm / rmsnorm / norm / _norm, nor for nn.LayerNorm modules),
//      each group in named_parameters() order without frozen parameters, kept only when every state shape agrees
// A model whose parameter order is not recorded (safetensors sorts tensors by dtype and name) is matched by shapes:
// within a group, the k-th state of a shape gets the k-th parameter of that shape in module order as the names
// suggest it (numeric indices numerically, a module's own parameters before its children's, weight before bias).
// Each row says how sure that is (Confidence). Otherwise the row has no FQN, and a note says why.

#include "optscope/model/checkpoint.h"
#include "optscope/optim/optimizer_kind.h"
#include "optscope/optim/optimizer_view.h"

#include <nlohmann/json_fwd.hpp> // the full header (25k lines) only where JSON is built

#include <iosfwd>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace optscope {

/// The model side: parameter FQNs in order, shapes, and param groups when the source is an optimizer.
struct ModelParams
{
    std::string source; ///< where it came from, for messages
    KeyPath root; ///< where the model state dict sits in its file ({"model"}); empty: the whole file
    std::vector<std::string> fqns; ///< parameters in order (known buffers left out)
    std::vector<std::string> buffers; ///< tensors that are buffers (running_mean, ...)
    /// tied weights (lm_head.weight = embed.weight): a parameter saved as the same tensor as an earlier one, to that
    /// one's name. Left out of fqns, as model.parameters() and named_parameters() list a shared parameter once (a
    /// torch.save file shows the sharing; DCP and safetensors store such tensors twice or once, and do not)
    std::map<std::string, std::string> tiedTo;
    std::vector<std::string> keys; ///< every tensor key in state-dict order (parameters and buffers interleaved)
    std::map<std::string, std::vector<int64_t>> shapes; ///< every tensor's shape, buffers included
    /// every tensor's dtype, when the source holds the model's tensors (not an optimizer's names or an FQN list)
    std::map<std::string, DType> dtypes;
    std::vector<std::vector<std::string>> groups; ///< param_groups of a reference optimizer (names); else empty
    bool fromOptimizer = false; ///< names, order and groups come from an optimizer's param_groups
    /// fqns are in the model's named_parameters() order; false when the file does not record it (safetensors): fqns
    /// are then in the order moduleOrderLess guesses from the names
    bool orderKnown = true;
    /// the source stores what class each tensor is (a pickle: torch.save, a Trainer folder; safetensors holds plain
    /// tensors only), so a plain tensor there is a plain tensor; DCP stores no class
    bool tensorClassesKnown = false;
    /// tensors saved as DTensors (a fully_shard or tensor-parallel model's state dict, torch.save'd)
    std::set<std::string> dtensors;

    /// a model state dict (file or DCP, or the model part of a training checkpoint), or an optimizer checkpoint whose
    /// parameters are named; throws Error(Format) when it names no parameters
    static ModelParams fromCheckpoint(const Checkpoint& model);
    /// the model state dict inside a checkpoint ("model", "state_dict" (Lightning), "model_state_dict", "module"
    /// (DeepSpeed), or top-level tensors of a file without optimizer); nullopt if there is none
    static std::optional<ModelParams> modelPartOf(const Checkpoint& checkpoint);
    /// the same, for a caller that has found the checkpoint's optimizers already (findOptimizers is a pass over
    /// every entry: 1M values took a second more)
    static std::optional<ModelParams> modelPartOf(const Checkpoint& checkpoint, bool holdsOptimizer);
    /// a text file (or object) with one FQN per line ('#' comments; optional whitespace-separated shape "3,4")
    static ModelParams fromFqnList(const std::string& location);
    /// whether a file's first bytes @p head are such a list's: text (no control characters but tab, CR and LF), not
    /// JSON. No checkpoint file is: a zip starts "PK\x03\x04", a pickle "\x80\x02", safetensors with a length
    /// whose high bytes are NUL
    static bool looksLikeFqnList(const uint8_t* head, size_t size);
};

enum class NameSource {
    StateKey,
    FlattenedKey,
    ParamNames,
    Fsdp1Layout,
    ModelInFile,
    ReferenceOrder,
    TrainerGroups, ///< Hugging Face Trainer: decay group then no-decay (get_decay_parameter_names), checked by shapes
    None
};
const char* nameSourceText(NameSource source);

/// How sure a derived name is.
enum class Confidence {
    Stored, ///< the file names the parameter (FQN state key, param_names)
    Exact, ///< derived from a model whose order is known, every shape agrees
    ShapeUnique, ///< the model's order is unknown, but it is the only parameter of its shape in its group
    IndexOrder, ///< its group's other parameters of its shape differ from it only in numeric path items
                ///< (layers.0 / layers.1): ordered by index, as nn.ModuleList / nn.Sequential register them
    OrderAssumed, ///< several parameters of its group share its shape (or frozen ones were skipped): which of them
                  ///< is which follows the guessed module order, shapes cannot tell
    None, ///< not named
};
const char* confidenceText(Confidence c);

/// a guess of named_parameters() order from names alone: numeric path items numerically, a module's own parameters
/// before its children's, "weight" before "bias", otherwise alphabetical
bool moduleOrderLess(const std::string& a, const std::string& b);

/// transformers' Trainer.get_decay_parameter_names by name (>= 4.48): false for names matching "bias", "layernorm",
/// "rmsnorm", "(^|.)norm($|.)", "_norm($|.)" (lower-cased); with @p legacy only "bias" (older versions). Parameters
/// of nn.LayerNorm modules are also excluded by type, which names cannot show (ParamTable tries both).
bool trainerDecaysByName(const std::string& fqn, bool legacy = false);

struct ParamRow
{
    int optimizer = -1; ///< index into ParamTable::optimizers; -1 for a model-only checkpoint's parameters
    int group = -1; ///< param group listing it; -1 if none
    int position = -1; ///< position in param_groups order (what optimizer.state_dict() uses as id); -1 if unlisted
    std::string id; ///< the key in "state"/"params": an integer id as text, or an FQN
    std::string fqn; ///< empty when unknown
    std::string normalized; ///< fqn without wrapper prefixes
    NameSource source = NameSource::None;
    Confidence confidence = Confidence::None;
    std::vector<int64_t> shape; ///< the parameter's shape: the model's when known, else a shaped state's
    int64_t numel = -1;
    std::vector<std::string> states; ///< state names present ("exp_avg", "step", ...); empty: no state
    const OptimizerParam* param = nullptr; ///< its state, or null
    int flatParam = -1; ///< FSDP1: the flat parameter (optimizer id) holding it
    std::string flatUnit; ///< FSDP1: the unit's module prefix
    int64_t flatOffset = -1; ///< FSDP1: first element in the unsharded flat parameter
    std::string note; ///< mismatch or layout details
    std::string jumpKey; ///< the entry key prefix of its state (for "show in tree")
};

struct ParamTableOptions
{
    std::vector<std::string> units; ///< FSDP1 unit prefixes; empty = guess from the model's repeated blocks
    int worldSize = 0; ///< FSDP1 world size; 0 = find the one matching the shard sizes
};

struct ParamTable
{
    std::vector<OptimizerView> optimizers; ///< outermost first
    std::vector<OptimizerKind> kinds; ///< per optimizer
    std::vector<NameSource> sources; ///< per optimizer: how its ids were named
    /// per optimizer: it is one rank's raw FSDP1 use_orig_params=True state (isOrigParamsRankSlices), named by position
    std::vector<char> rankSlices;
    std::vector<ParamRow> rows; ///< per optimizer in param_groups order, then state no group lists
    std::vector<std::string> notes; ///< how names were found, in words
    std::optional<ModelParams> modelInFile; ///< the model state dict beside the optimizer, if any

    ParamTable() = default;
    ParamTable(ParamTable&&) = default;
    ParamTable& operator=(ParamTable&&) = default;
    ParamTable(const ParamTable&) = delete; ///< rows point into optimizers
    ParamTable& operator=(const ParamTable&) = delete;

    /// @p reference (may be null) names id-keyed parameters by position; @p referenceCheckpoint (may be null) is the
    /// model checkpoint it came from, needed to map raw FSDP1 flat parameters
    static ParamTable build(const Checkpoint& checkpoint, const ModelParams* reference = nullptr,
        const Checkpoint* referenceCheckpoint = nullptr, const ParamTableOptions& options = {});

    std::vector<const ParamRow*> rowsOf(int optimizer) const;
    /// id (as text) -> FQN for one optimizer's named rows
    std::map<std::string, std::string> idToFqn(int optimizer) const;
    /// FQN per parameter in param_groups order for one optimizer; empty strings where unknown
    std::vector<std::string> fqnsInOrder(int optimizer) const;

    nlohmann::ordered_json toJson() const;
    std::string toCsv() const;
    /// toCsv()'s text, written row by row (`map --csv`)
    void writeCsv(std::ostream& out) const;
};

} // namespace optscope
