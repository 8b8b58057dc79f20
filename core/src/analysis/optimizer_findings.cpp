// SPDX-License-Identifier: GPL-3.0-or-later
// The findings about one optimizer on its own, shared by check and diagnose.
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/analysis/finding_text.h"
#include "optscope/base/error.h"
#include "optscope/formats/format_registry.h"
#include "optscope/tensor/tensor_values.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace optscope {

namespace {

std::string numberText(double v)
{
    std::ostringstream o;
    o << v;
    return o.str();
}

/// how a row is named in messages: its FQN when known, else "id N"
std::string label(const ParamRow& r)
{
    return r.fqn.empty() ? "id " + r.id : r.fqn;
}

} // namespace

std::string idKeyedMessage(const std::string& rootKey, NameSource namedBy)
{
    std::string message = optimizerText(rootKey)
        + " is keyed by integer parameter ids (optimizer.state_dict()): loading pairs them with the optimizer's "
          "parameters by position, and nothing checks names";
    if (namedBy != NameSource::None) message += "; named here by " + std::string(nameSourceText(namedBy));
    return message;
}

namespace {

/// The rules about one optimizer of a checkpoint, each adding its findings to out, in the order they are reported
struct OptimizerReview
{
    const Checkpoint& cp;
    const ParamTable& table;
    size_t oi;
    std::vector<Finding>& out;
    const OptimizerView& v = table.optimizers[oi];
    const OptimizerKind kind = table.kinds[oi];
    const std::string root = v.rootKey();
    const std::string where = optimizerText(root);
    const std::vector<const ParamRow*> rows = table.rowsOf(static_cast<int>(oi));
    const std::vector<std::string> listed = v.groupParams();
    /// per group: its optimizer keeps no state (SGD without momentum), so its parameters have none by design
    std::vector<bool> keepsNone = groupsKeepingNoState();

    std::vector<bool> groupsKeepingNoState() const
    {
        std::vector<bool> none(v.groups.size());
        for (size_t g = 0; g < v.groups.size(); ++g)
            none[g] = groupKeepsNoState(kind, cp, v.groups[g]);
        return none;
    }
    bool keepsNoState(const ParamRow& r) const
    {
        return r.group >= 0 && static_cast<size_t>(r.group) < keepsNone.size()
            && keepsNone[static_cast<size_t>(r.group)];
    }

    /// no state at all though the groups list parameters: the only finding then (true)
    bool emptyState()
    {
        const bool allKeepNone
            = !keepsNone.empty() && std::all_of(keepsNone.begin(), keepsNone.end(), [](bool b) { return b; });
        if (v.params.empty() && !listed.empty() && !allKeepNone) {
            Finding f(FindingCode::EmptyState,
                where + " lists " + std::to_string(listed.size())
                    + " parameters in param_groups but has no state for any of them: it was saved before the first "
                      "step, or while the state was empty (DCP saves an empty optimizer when gradients were still "
                      "set, pytorch#140898)",
                root);
            f.fix = "save after optimizer.step(), and check that get_optimizer_state_dict returns state";
            f.keys = head(listed);
            out.push_back(std::move(f));
            return true;
        }
        return false;
    }

    /// DSD's flattened format, which optimizer.load_state_dict cannot read
    void flattenedFormat()
    {
        if (v.flattened) {
            Finding f(FindingCode::FlattenedFormat,
                where
                    + " uses DSD's flattened format (\"state.<fqn>.<name>\", \"param_groups.<fqn>.<hp>\"), written "
                      "with StateDictOptions(flatten_optimizer_state_dict=True): optimizer.load_state_dict cannot read "
                      "it",
                root);
            f.pytorchError = "KeyError: 'param_groups'";
            // the format stores no grouping: converting it needs the loading code's optimizer (diagnose with a
            // target adds the conversion); the groups shown are parameters with equal hyperparameters, a guess
            const std::string guessed = std::to_string(v.groups.size())
                + " group(s) shown are a guess (parameters with equal hyperparameters): the format does not store "
                  "the param groups, and set_optimizer_state_dict takes them from the live optimizer";
            f.fix = "load it with set_optimizer_state_dict; to convert it to the nested format for "
                    "optimizer.load_state_dict, give `optscope-cli fix` the training script's optimizer "
                    "(--target-optim: torch.save(optimizer.state_dict()) once it is built). The "
                + guessed;
            f.fixNeutral = "load it with set_optimizer_state_dict; to convert it to the nested format for "
                           "optimizer.load_state_dict, give the training script's optimizer as the target. The "
                + guessed;
            out.push_back(std::move(f));
        }
    }

    /// keyed by integer ids: loading pairs by position; the fix re-keys by FQN when the names are known
    void idKeyed()
    {
        if (v.idKeyed && !v.params.empty()) {
            Finding f(FindingCode::IdKeyed, idKeyedMessage(root, table.sources[oi]), root);
            // only names the file or the user vouch for (param_names, --model); the model saved beside it may be
            // another wrapper's
            size_t assumed = 0; // names shapes could not decide (a model file without its order): never re-key by them
            for (const ParamRow* r : rows)
                assumed += r->position >= 0 && r->confidence == Confidence::OrderAssumed;
            if (table.rankSlices[oi]) {
                // re-keying one rank's slices by FQN would not make them load anywhere else
                f.fix = "re-keying cannot help one rank's slices: unflatten all ranks' files (`optscope-cli "
                        "unflatten`)";
                f.fixNeutral = "re-keying cannot help one rank's slices: unflatten all ranks' files";
            } else if (assumed && table.sources[oi] == NameSource::ReferenceOrder) {
                f.fix = std::to_string(assumed) + " of the names rest on an assumed order (parameters of one shape, "
                    + "and the model file does not store its order): give the model in its real order (a torch.save "
                      "of model.state_dict()) to name and re-key the ids";
            } else if (table.sources[oi] == NameSource::ParamNames || table.sources[oi] == NameSource::ReferenceOrder) {
                // names known: re-keying by FQN makes every loader check names instead of trusting the order
                for (const ParamRow* r : rows)
                    if (r->position >= 0 && !r->fqn.empty())
                        f.actions.push_back({FixAction::Kind::RekeyIds, r->id, r->fqn,
                            "state[" + r->id + "] -> state['" + r->fqn + "']"});
                if (!f.actions.empty())
                    f.fix = "re-key the state by FQN (what get_optimizer_state_dict produces) so that loading no "
                            "longer depends on parameter order (`optscope-cli fix` does it)";
                f.fixNeutral = "re-key the state by FQN (what get_optimizer_state_dict produces) so that loading no "
                               "longer depends on parameter order (the fix does it)";
            } else {
                f.fix = "to name the ids by position, give the model they belong to (--model, in its parameter order), "
                        "and the loading code's optimizer (--target-optim) when it holds only some of the model's "
                        "parameters";
                f.fixNeutral = "to name the ids by position, give the model they belong to (a model checkpoint or a "
                               "list of its FQNs), and the target optimizer when it holds only some of the model's "
                               "parameters";
            }
            out.push_back(std::move(f));
        }
    }

    /// parameters listed in the groups without state: frozen, or never given a gradient (LBFGS keeps all its state
    /// on the first one)
    void statelessParams()
    {
        std::vector<std::string> stateless;
        // (one rank's FSDP1 use_orig_params=True slices: parameters wholly on other ranks have none here)
        if (!v.params.empty() && !keepsAllStateOnFirstParam(kind) && !table.rankSlices[oi])
            for (const ParamRow* r : rows)
                if (r->position >= 0 && !r->param && r->source != NameSource::Fsdp1Layout && !keepsNoState(*r))
                    stateless.push_back(label(*r));
        if (!stateless.empty()) {
            Finding f(FindingCode::FrozenParams,
                std::to_string(stateless.size()) + " of the " + std::to_string(listed.size())
                    + " parameters in the param_groups of " + where + " have no state: " + quoteList(stateless)
                    + ". Either they are frozen (requires_grad=False: nothing is lost, and every loader accepts "
                      "this as long as they are frozen in the model you load into too), or they never received a "
                      "gradient before saving (their moments restart from zero, and set_optimizer_state_dict "
                      "raises KeyError for them if they are trainable there)",
                root);
            f.fix = "nothing, if they are frozen; otherwise save after a step in which they got gradients";
            f.keys = head(stateless);
            out.push_back(std::move(f));
        }
    }

    /// state for parameters that no group lists
    void orphanState()
    {
        std::vector<std::string> orphans;
        // a Megatron reader that could not tell the groups' members leaves every params list empty and says so
        // (megatron-param-groups): the state is not orphaned, its groups are unknown
        const bool groupsUnknown = listed.empty()
            && std::any_of(cp.warnings.begin(), cp.warnings.end(),
                [](const CheckpointWarning& w) { return w.code == ReaderCode::MegatronParamGroups; });
        for (const ParamRow* r : rows)
            if (r->position < 0 && !groupsUnknown) orphans.push_back(label(*r));
        if (!orphans.empty()) {
            Finding f(FindingCode::UnexpectedState,
                where + " has state for " + std::to_string(orphans.size())
                    + " parameter(s) that no param_group lists: " + quoteList(orphans),
                root);
            f.fix = "they are ignored on load; drop them, or add the parameters to a group";
            f.keys = head(orphans);
            out.push_back(std::move(f));
        }
    }

    /// step: one value per optimizer, a 0-dim float32 tensor
    void steps()
    {
        std::map<double, std::vector<std::string>> steps;
        std::vector<std::string> oddDtype;
        for (const auto& p : v.params) {
            auto it = p.states.find("step");
            if (it == p.states.end()) continue;
            const Entry* e = it->second;
            if (!e->isTensor() || e->tensor->dtype != DType::Float32 || !e->tensor->shape.empty())
                oddDtype.push_back(p.key + " ("
                    + (e->isTensor() ? std::string(dtypeName(e->tensor->dtype)) : pyKindName(e->value->kind)) + ")");
            try {
                if (auto s = readScalar(cp, *e)) steps[*s].push_back(p.key);
            } catch (const Error&) {
                // unreadable data is reported by the structural checks
            }
        }
        if (steps.size() > 1) {
            std::string detail;
            for (const auto& [value, params] : steps)
                detail += (detail.empty() ? "" : "; ") + std::string("step ") + numberText(value) + ": "
                    + std::to_string(params.size()) + " (" + params.front() + (params.size() > 1 ? ", ..." : "") + ")";
            Finding f(FindingCode::StepInconsistent,
                "the parameters of " + where + " are at different steps: " + detail
                    + ". Each parameter's bias correction uses its own step, so this resumes as saved, but FSDP1 "
                      "cannot put such parameters into one flat parameter",
                root);
            f.pytorchError = "ValueError: All unflattened parameters comprising a single flat parameter must have "
                             "scalar state with the same value and dtype (FSDP1 only)";
            f.fix = "expected when some parameters skip steps (no gradient); otherwise check which run wrote them";
            f.keys = head(steps.begin()->second);
            out.push_back(std::move(f));
        }
        // a format whose optimizers count steps per param group (Megatron's) keeps them as Python numbers by design
        if (formatInfo(cp.format).stepsPerParamGroup) oddDtype.clear();
        // SparseAdam counts its steps in a Python int (torch 2.6 sparse_adam.py: state["step"] = 0, += 1), and
        // load_state_dict keeps it one
        if (kind == OptimizerKind::SparseAdam) oddDtype.clear();
        if (!oddDtype.empty()) {
            Finding f(FindingCode::StepDtype,
                "step of " + std::to_string(oddDtype.size()) + " parameter(s) in " + where
                    + " is not a 0-dim float32 tensor: " + quoteList(oddDtype)
                    + ". Fused/capturable optimizers force float32 steps and load_state_dict casts them, which "
                      "changes the value silently for large steps (pytorch#173901)",
                root);
            f.fix = "store step as a float32 0-dim tensor; `optscope-cli fix` casts it";
            f.fixNeutral = "store step as a float32 0-dim tensor; the fix casts it";
            f.keys = head(oddDtype);
            f.actions.push_back(
                {FixAction::Kind::CastStep, "", "float32", "cast every step to a 0-dim float32 tensor"});
            out.push_back(std::move(f));
        }
    }
};

} // namespace

std::vector<Finding> optimizerFindings(const Checkpoint& cp, const ParamTable& table)
{
    std::vector<Finding> out;
    for (size_t oi = 0; oi < table.optimizers.size(); ++oi) {
        OptimizerReview review {cp, table, oi, out};
        if (review.emptyState()) continue;
        review.flattenedFormat();
        review.idKeyed();
        review.statelessParams();
        review.orphanState();
        review.steps();
    }
    return out;
}

} // namespace optscope
