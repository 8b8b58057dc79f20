// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/diagnosis.h"
#include "optscope/error.h"
#include "optscope/fqn_normalizer.h"
#include "optscope/optimizer_view.h"
#include "optscope/shard_layout.h"
#include "optscope/tensor_values.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace optscope {

bool Diagnosis::fixable() const
{
    for (const auto& f : findings)
        if (!f.actions.empty()) return true;
    return false;
}

nlohmann::ordered_json Diagnosis::toJson() const
{
    using json = nlohmann::ordered_json;
    json j;
    j["path"] = path;
    j["expected"] = expectedSource.empty() ? json(nullptr) : json(expectedSource);
    j["fixable"] = fixable();
    j["findings"] = json::array();
    for (const auto& f : findings) {
        json a = json::array();
        for (const auto& x : f.actions)
            a.push_back({{"kind", x.kind}, {"from", x.from}, {"to", x.to}, {"description", x.description}});
        j["findings"].push_back({{"code", f.code}, {"severity", f.severity}, {"message", f.message},
            {"pytorch_error", f.pytorchError.empty() ? json(nullptr) : json(f.pytorchError)},
            {"fix", f.fix.empty() ? json(nullptr) : json(f.fix)}, {"optimizer", f.optimizer}, {"keys", f.keys},
            {"actions", a}});
    }
    return j;
}

namespace {

std::string quoteList(const std::vector<std::string>& v, size_t max = 5)
{
    std::string s;
    for (size_t i = 0; i < v.size() && i < max; ++i)
        s += (i ? ", \"" : "\"") + v[i] + "\"";
    if (v.size() > max) s += ", ... (" + std::to_string(v.size()) + " in all)";
    return s;
}

std::vector<std::string> head(const std::vector<std::string>& v, size_t n = 8)
{
    return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size()))};
}

/// how PyTorch prints a shape in its error messages
std::string torchSizeText(const std::vector<int64_t>& s)
{
    return "torch.Size(" + shapeText(s) + ")";
}

/// the parameter FQNs an optimizer names, with how they were found (ids are mapped through param_names if present)
struct OptimizerParams
{
    std::vector<std::string> fqns; ///< in param_groups order (or state order if there are no groups)
    bool fromIds = false;
    std::vector<std::string> ids;
    std::map<std::string, std::string> stateKeyOf; ///< fqn -> key used in "state"
};

OptimizerParams namesOf(const OptimizerView& v)
{
    OptimizerParams out;
    std::vector<std::string> names;
    bool haveNames = true;
    for (const auto& g : v.groups) {
        if (g.paramNames.size() != g.params.size()) haveNames = false;
        names.insert(names.end(), g.paramNames.begin(), g.paramNames.end());
    }
    const std::vector<std::string> listed = v.groupParams();
    if (v.idKeyed) {
        out.fromIds = true;
        out.ids = listed;
        if (haveNames && names.size() == listed.size()) {
            out.fqns = names;
            for (size_t i = 0; i < names.size(); ++i)
                out.stateKeyOf[names[i]] = listed[i];
        }
        return out;
    }
    out.fqns = listed;
    for (const auto& p : v.params)
        if (std::find(out.fqns.begin(), out.fqns.end(), p.key) == out.fqns.end())
            out.fqns.push_back(p.key); // state for a parameter no group lists
    for (const auto& f : out.fqns)
        out.stateKeyOf[f] = f;
    return out;
}

/// the plain leading prefix ("model.", "backbone.", ...) that, added to or removed from every name on one side, makes
/// the sets agree best (wrapper prefixes are handled before, by normalising both sides)
struct PrefixMatch
{
    std::string prefix;
    bool optimizerHasIt = false; ///< true: the optimizer's names carry the prefix the model lacks
    size_t matched = 0;
};

PrefixMatch bestPrefix(const std::vector<std::string>& optim, const std::set<std::string>& model)
{
    PrefixMatch best;
    auto count = [&](const std::vector<std::string>& names, const std::function<std::string(const std::string&)>& f) {
        size_t n = 0;
        for (const auto& x : names)
            n += model.count(f(x)) > 0;
        return n;
    };
    size_t base = count(optim, [](const std::string& x) { return x; });
    std::set<std::string> candidates(wrapperPrefixes().begin(), wrapperPrefixes().end());
    // common leading segments of either side (e.g. "model.", "backbone.", "chained_0.")
    for (const auto& x : optim)
        if (auto dot = x.find('.'); dot != std::string::npos) candidates.insert(x.substr(0, dot + 1));
    for (const auto& x : model)
        if (auto dot = x.find('.'); dot != std::string::npos) candidates.insert(x.substr(0, dot + 1));
    for (const auto& p : candidates) {
        const size_t strip
            = count(optim, [&](const std::string& x) { return x.rfind(p, 0) == 0 ? x.substr(p.size()) : x; });
        if (strip > std::max(base, best.matched)) best = {p, true, strip};
        const size_t add = count(optim, [&](const std::string& x) { return p + x; });
        if (add > std::max(base, best.matched)) best = {p, false, add};
    }
    return best;
}

std::string applyPrefix(const std::string& x, const PrefixMatch& m)
{
    if (m.optimizerHasIt) return x.rfind(m.prefix, 0) == 0 ? x.substr(m.prefix.size()) : x;
    return m.prefix + x;
}

class Diagnoser
{
public:
    Diagnoser(const Checkpoint& cp, const ExpectedParams* expected, const Progress& progress)
        : m_cp(cp)
        , m_expected(expected)
        , m_progress(progress)
    { }

    Diagnosis run()
    {
        Diagnosis d;
        d.path = m_cp.path;
        d.expectedSource = m_expected ? m_expected->source : std::string();
        const auto views = findOptimizers(m_cp);
        shards(d);
        if (views.empty()) {
            d.findings.push_back({"empty-state", "error",
                "no optimizer state dict was found in " + m_cp.path + " (nothing with \"state\" and \"param_groups\")",
                "KeyError: 'state'", "point the loader at the optimizer part of the checkpoint", "", {}, {}});
            return d;
        }
        for (const auto& v : views) {
            m_progress.checkCancelled();
            optimizer(v, d);
        }
        return d;
    }

private:
    void add(Diagnosis& d, DiagnosisFinding f) { d.findings.push_back(std::move(f)); }

    void shards(Diagnosis& d)
    {
        for (const auto& e : m_cp.entries) {
            if (!e.isTensor()) continue;
            const ShardLayout L = ShardLayout::of(e.tensor);
            if (!L.gaps.empty() || !L.gapsExact) {
                std::string where = L.gaps.empty() ? std::string("part of it") : boxText(L.gaps.front());
                add(d,
                    {"shard-gap", "error",
                        "no chunk holds " + where + " of '" + e.key + "' ("
                            + std::to_string(L.totalElements - L.coveredElements) + " of "
                            + std::to_string(L.totalElements) + " elements missing)",
                        "", "the checkpoint is incomplete: re-save it, or restore the missing rank's file", "", {e.key},
                        {}});
            }
            if (!L.overlaps.empty()) {
                const auto& o = L.overlaps.front();
                const int ra = L.ranks[o.first], rb = L.ranks[o.second];
                const std::string who = ra == rb
                    ? "two chunks (both stored by rank " + std::to_string(ra) + ")"
                    : "chunks of ranks " + std::to_string(ra) + " and " + std::to_string(rb);
                add(d,
                    {"shard-overlap", "error",
                        who + " of '" + e.key + "' overlap at " + boxText(o.region) + " ("
                            + std::to_string(L.overlaps.size())
                            + " overlapping pair(s)); DCP's own save validation refuses this, and a loader takes one "
                              "of them silently",
                        "", "run `optscope-cli check` and `diff --ranks` to see whether the copies agree; re-save", "",
                        {e.key}, {}});
            }
        }
    }

    void optimizer(const OptimizerView& v, Diagnosis& d)
    {
        const std::string root = v.rootKey();
        const std::string where = root.empty() ? std::string("the optimizer state dict") : "optimizer '" + root + "'";
        const OptimizerParams names = namesOf(v);
        const auto listed = v.groupParams();

        // empty state
        if (v.params.empty()) {
            add(d,
                {"empty-state", "error",
                    where + " has no state at all although param_groups list " + std::to_string(listed.size())
                        + " parameters: it was saved before the first step, or while the state was empty (DCP "
                          "saves an empty optimizer when gradients were still set, pytorch#140898)",
                    "", "save after optimizer.step(), and check that get_optimizer_state_dict returns state", root,
                    head(listed), {}});
        }

        // formats
        if (v.flattened) {
            DiagnosisFinding f {"flattened-format", "warning",
                where
                    + " uses DSD's flattened format (\"state.<fqn>.<name>\", \"param_groups.<fqn>.<hp>\") "
                      "written with StateDictOptions(flatten_optimizer_state_dict=True)",
                "KeyError: 'state'",
                "load it with StateDictOptions(flatten_optimizer_state_dict=True), or let `optscope-cli fix` convert "
                "it "
                "to the nested format",
                root, {},
                {{"unflatten-format", "flattened", "nested", "convert to the nested {state, param_groups} format"}}};
            add(d, std::move(f));
        }
        if (v.idKeyed && !v.params.empty()) {
            DiagnosisFinding f {"id-keyed", "info",
                where + " is keyed by integer parameter ids (optimizer.state_dict()): ids 0.."
                    + std::to_string(listed.size() - 1)
                    + " follow the order of model.parameters() at save time, and nothing checks that order on load",
                "", "", root, head(listed), {}};
            std::vector<std::string> fqns = names.fqns;
            std::string how = "param_names";
            if (fqns.empty() && m_expected && m_expected->fqns.size() == listed.size()) {
                fqns = m_expected->fqns;
                how = "the order of the expected parameters (" + m_expected->source + ")";
            }
            if (fqns.size() == listed.size()) {
                f.message += "; they map to FQNs by " + how + ": " + listed[0] + " -> '" + fqns[0] + "'"
                    + (fqns.size() > 1 ? ", ..., " + listed.back() + " -> '" + fqns.back() + "'" : "");
                f.fix = "re-key the state by FQN (what get_optimizer_state_dict produces) so that loading no longer "
                        "depends on parameter order";
                for (size_t i = 0; i < listed.size(); ++i)
                    f.actions.push_back(
                        {"rekey-ids", listed[i], fqns[i], "state[" + listed[i] + "] -> state['" + fqns[i] + "']"});
                if (m_expected && how == "param_names") {
                    // the names must also match the expected model
                    std::set<std::string> exp(m_expected->fqns.begin(), m_expected->fqns.end());
                    (void)exp;
                }
            } else {
                f.fix = "pass --model with the model's parameters (in model.parameters() order) to map ids to names";
            }
            add(d, std::move(f));
        }

        // per-parameter state checks
        std::vector<std::string> stateless;
        for (size_t i = 0; i < listed.size(); ++i)
            if (!v.param(listed[i]))
                stateless.push_back(names.fromIds && i < names.fqns.size() ? names.fqns[i] : listed[i]);
        std::vector<std::string> orphans;
        for (const auto& p : v.params)
            if (std::find(listed.begin(), listed.end(), p.key) == listed.end()) orphans.push_back(p.key);
        if (!stateless.empty() && !v.params.empty()) {
            const bool named = !v.idKeyed || !names.fqns.empty();
            add(d,
                {"missing-state", "warning",
                    std::to_string(stateless.size()) + " parameter(s) listed in the param_groups of " + where
                        + " have no state: they are frozen (requires_grad=False) or never received a gradient: "
                        + (named ? quoteList(stateless) : "ids " + quoteList(stateless)),
                    // a plain optimizer.load_state_dict accepts this silently; DSD refuses it for trainable params
                    named ? "RuntimeError: Missing optimizer state for parameter '" + stateless.front()
                            + "' in checkpoint. The parameter requires gradients but has no saved optimizer state. To "
                              "load anyway, use StateDictOptions(strict=False)."
                          : std::string(),
                    "if they are trainable, their moments restart from zero on load; load with "
                    "StateDictOptions(strict=False) (DSD), or make sure every trainable parameter gets a gradient "
                    "before saving",
                    root, head(stateless), {}});
        }
        if (!orphans.empty()) {
            add(d,
                {"unexpected-state", "warning",
                    where + " has state for " + std::to_string(orphans.size())
                        + " parameter(s) that no param_group lists: " + quoteList(orphans),
                    "", "they are ignored on load; drop them, or add the parameters to a group", root, head(orphans),
                    {}});
        }

        // step
        std::map<double, std::vector<std::string>> steps;
        std::vector<std::string> oddDtype, onDevice;
        for (const auto& p : v.params) {
            auto it = p.states.find("step");
            if (it == p.states.end()) continue;
            const Entry* e = it->second;
            if (!e->isTensor() || e->tensor.dtype != DType::Float32 || !e->tensor.shape.empty())
                oddDtype.push_back(p.key + " ("
                    + (e->isTensor() ? std::string(dtypeName(e->tensor.dtype)) : pyKindName(e->value->kind)) + ")");
            try {
                if (auto s = readScalar(m_cp, *e)) steps[*s].push_back(p.key);
            } catch (const Error&) { }
        }
        if (steps.size() > 1) {
            std::string detail;
            for (const auto& [value, params] : steps)
                detail += (detail.empty() ? "" : "; ") + std::string("step ") + numberText(value) + ": "
                    + std::to_string(params.size()) + " (" + params.front() + (params.size() > 1 ? ", ..." : "") + ")";
            add(d,
                {"step-inconsistent", "warning",
                    "the parameters of " + where + " are at different steps: " + detail
                        + ". Adam's bias correction uses each parameter's own step, so this resumes as saved, but "
                          "FSDP1 cannot put such parameters into one flat parameter",
                    "ValueError: All unflattened parameters comprising a single flat parameter must have scalar "
                    "state with the same value and dtype but got values {...} for state step",
                    "expected when some parameters skip steps (no gradient); otherwise check which run wrote them",
                    root, head(steps.begin()->second), {}});
        }
        if (!oddDtype.empty()) {
            DiagnosisFinding f {"step-dtype", "warning",
                "step of " + std::to_string(oddDtype.size()) + " parameter(s) in " + where
                    + " is not a 0-dim float32 tensor: " + quoteList(oddDtype)
                    + ". Fused/capturable optimizers force float32 steps and load_state_dict casts them, which "
                      "changes the value silently for large steps (pytorch#173901)",
                "", "store step as a float32 0-dim tensor; `optscope-cli fix` casts it", root, head(oddDtype),
                {{"cast-step", "", "float32", "cast every step to a 0-dim float32 tensor"}}};
            add(d, std::move(f));
        }

        if (!m_expected) return;
        compareWithExpected(v, names, d);
    }

    static std::string numberText(double v)
    {
        std::ostringstream o;
        o << v;
        return o.str();
    }

    void compareWithExpected(const OptimizerView& v, const OptimizerParams& names, Diagnosis& d)
    {
        const std::string root = v.rootKey();
        const std::string where = root.empty() ? std::string("the optimizer state dict") : "optimizer '" + root + "'";
        const ExpectedParams& exp = *m_expected;
        const std::set<std::string> expected(exp.fqns.begin(), exp.fqns.end());

        // names: direct, or through a prefix
        std::vector<std::string> optNames = names.fqns;
        if (optNames.empty() && v.idKeyed && exp.fqns.size() == v.groupParams().size())
            optNames = exp.fqns; // ids mapped by order: names agree by construction
        if (!optNames.empty()) {
            std::vector<std::string> missing, unexpected;
            for (const auto& n : optNames)
                if (!expected.count(n)) unexpected.push_back(n);
            const std::set<std::string> have(optNames.begin(), optNames.end());
            for (const auto& n : exp.fqns)
                if (!have.count(n)) missing.push_back(n);
            if (!missing.empty() || !unexpected.empty()) {
                // 1. wrapper prefixes on either side or both: names whose normalised forms agree
                std::map<std::string, std::string> expectedByNorm;
                std::set<std::string> ambiguous;
                for (const auto& n : exp.fqns) {
                    const std::string k = normalizeFqn(n).fqn;
                    if (!expectedByNorm.emplace(k, n).second) ambiguous.insert(k);
                }
                std::map<std::string, std::string> rename;
                std::set<std::string> strippedOpt, strippedExp;
                for (const auto& n : optNames) {
                    if (expected.count(n)) continue;
                    const NormalizedFqn nn = normalizeFqn(n);
                    auto it = expectedByNorm.find(nn.fqn);
                    if (it == expectedByNorm.end() || ambiguous.count(nn.fqn)) continue;
                    rename[n] = it->second;
                    strippedOpt.insert(nn.stripped.begin(), nn.stripped.end());
                    for (const auto& s2 : normalizeFqn(it->second).stripped)
                        strippedExp.insert(s2);
                }
                // 2. otherwise a plain leading prefix ("model.", "backbone.", ...) on one side
                std::string prefixText;
                bool optimizerSide = true;
                if (rename.empty()) {
                    const PrefixMatch pm = bestPrefix(optNames, expected);
                    if (pm.matched > 0 && pm.matched * 2 >= optNames.size()) {
                        for (const auto& n : optNames) {
                            const std::string to = applyPrefix(n, pm);
                            if (to != n && expected.count(to)) rename[n] = to;
                        }
                        prefixText = "'" + pm.prefix + "'";
                        optimizerSide = pm.optimizerHasIt;
                    }
                } else {
                    auto join = [](const std::set<std::string>& v) {
                        std::string t;
                        for (const auto& x : v)
                            t += (t.empty() ? "'" : ", '") + x + "'";
                        return t;
                    };
                    if (!strippedOpt.empty() && !strippedExp.empty())
                        prefixText = join(strippedOpt) + " (optimizer) and " + join(strippedExp) + " (model)";
                    else
                        prefixText = join(strippedOpt.empty() ? strippedExp : strippedOpt);
                    optimizerSide = !strippedOpt.empty();
                    if (!strippedOpt.empty() && !strippedExp.empty())
                        prefixText = "different wrapper prefixes: " + prefixText;
                }
                if (!rename.empty()) {
                    const bool both = prefixText.rfind("different wrapper prefixes", 0) == 0;
                    const std::string side = both ? "both sides carry"
                        : optimizerSide           ? "the optimizer's names carry"
                                                  : "the model's names carry";
                    DiagnosisFinding f {"prefix-mismatch", "error",
                        side + " "
                            + (both ? prefixText.substr(std::string("different wrapper prefixes: ").size())
                                        + " wrapper prefixes"
                                    : "the prefix " + prefixText + " that the other side lacks")
                            + ": " + std::to_string(rename.size()) + " of " + std::to_string(optNames.size())
                            + " parameters of " + where + " match " + exp.source + " once renamed",
                        "", "", root, {}, {}};
                    std::vector<std::string> expMissing, optUnexpected;
                    for (const auto& n : exp.fqns)
                        if (!have.count(n)) expMissing.push_back(n);
                    for (const auto& n : optNames)
                        if (!expected.count(n)) optUnexpected.push_back(n);
                    f.pytorchError = "KeyError: '" + (expMissing.empty() ? std::string("?") : expMissing.front())
                        + "'  "
                          "(set_optimizer_state_dict; the model's own load_state_dict says: Missing key(s) in "
                          "state_dict: "
                        + quoteList(expMissing, 3) + ". Unexpected key(s) in state_dict: " + quoteList(optUnexpected, 3)
                        + ".)";
                    f.keys = head(optUnexpected);
                    for (const auto& [from, to] : rename)
                        f.actions.push_back({"rename-prefix", from, to, "'" + from + "' -> '" + to + "'"});
                    // actions in the optimizer's parameter order
                    std::sort(f.actions.begin(), f.actions.end(), [&](const FixAction& a, const FixAction& b) {
                        return std::find(optNames.begin(), optNames.end(), a.from)
                            < std::find(optNames.begin(), optNames.end(), b.from);
                    });
                    f.fix = both ? "rename the optimizer's keys to the model's names (`optscope-cli fix` does it)"
                        : optimizerSide ? "strip " + prefixText
                            + " from the optimizer's keys (`optscope-cli fix` does it), or "
                              "save from the unwrapped model (model._orig_mod / model.module)"
                                        : "add " + prefixText
                            + " to the optimizer's keys (`optscope-cli fix`), or load into the unwrapped model";
                    add(d, std::move(f));
                    // after the rename, what is still missing or unexpected
                    missing.clear();
                    unexpected.clear();
                    std::set<std::string> renamed;
                    for (const auto& n : optNames)
                        renamed.insert(rename.count(n) ? rename.at(n) : n);
                    for (const auto& n : renamed)
                        if (!expected.count(n)) unexpected.push_back(n);
                    for (const auto& n : exp.fqns)
                        if (!renamed.count(n)) missing.push_back(n);
                }
                if (!missing.empty())
                    add(d,
                        {"missing-state", "error",
                            std::to_string(missing.size()) + " parameter(s) of " + exp.source + " are not in " + where
                                + ": " + quoteList(missing),
                            "KeyError: '" + missing.front() + "'",
                            "the optimizer was saved for a different model (or with frozen parameters left out); load "
                            "with StateDictOptions(strict=False) to start them from zero state",
                            root, head(missing), {}});
                if (!unexpected.empty())
                    add(d,
                        {"unexpected-state", "error",
                            std::to_string(unexpected.size()) + " parameter(s) of " + where + " are not in "
                                + exp.source + ": " + quoteList(unexpected),
                            "RuntimeError: Error(s) in loading state_dict: Unexpected key(s) in state_dict: "
                                + quoteList(unexpected, 3) + ".",
                            "drop them, or check that the model is the one this optimizer was trained with", root,
                            head(unexpected), {}});
            }
        }

        // raw FSDP1 flat-parameter state: fewer (flat) parameters than the model has, all 1-D
        if (v.idKeyed && names.fqns.empty() && !v.params.empty() && v.groupParams().size() < exp.fqns.size()) {
            bool allFlat = true;
            std::vector<std::string> sizes;
            for (const auto& p : v.params)
                for (const auto& [name, e] : p.states)
                    if (e->isTensor() && !e->tensor.shape.empty()) {
                        allFlat = allFlat && e->tensor.shape.size() == 1;
                        if (name == p.states.begin()->first || sizes.size() < v.params.size())
                            sizes.push_back("id " + p.key + ": " + torchSizeText(e->tensor.shape));
                    }
            if (allFlat) {
                add(d,
                    {"shape-mismatch", "error",
                        where + " holds " + std::to_string(v.groupParams().size()) + " flat 1-D parameters for the "
                            + std::to_string(exp.fqns.size()) + " parameters of " + exp.source
                            + ": this is raw FSDP1 flat-parameter state (one rank's padded shard per flat parameter), "
                              "not per-parameter state",
                        "ValueError: loaded state dict contains a parameter group that doesn't match the size of "
                        "optimizer's group",
                        "unflatten it with all ranks' files: `optscope-cli unflatten RANK_FILE... --model MODEL "
                        "--units ...`",
                        root, head(sizes), {}});
                return;
            }
        }

        // shapes
        std::vector<std::string> wrong;
        bool flat = false;
        std::string firstError;
        for (const auto& p : v.params) {
            std::string fqn = p.key;
            if (v.idKeyed) {
                const auto ids = v.groupParams();
                const auto pos = std::find(ids.begin(), ids.end(), p.key) - ids.begin();
                if (!names.fqns.empty() && static_cast<size_t>(pos) < names.fqns.size())
                    fqn = names.fqns[static_cast<size_t>(pos)];
                else if (ids.size() == exp.fqns.size() && static_cast<size_t>(pos) < exp.fqns.size())
                    fqn = exp.fqns[static_cast<size_t>(pos)]; // ids follow the model's parameter order
                else
                    continue;
            }
            auto it = exp.shapes.find(fqn);
            if (it == exp.shapes.end()) it = exp.shapes.find(normalizeFqn(fqn).fqn);
            if (it == exp.shapes.end()) continue;
            for (const auto& [name, e] : p.states) {
                if (!e->isTensor() || e->tensor.shape.empty() || e->tensor.shape == it->second) continue;
                int64_t n = 1;
                for (auto s : it->second)
                    n *= s;
                const bool isFlat = e->tensor.shape.size() == 1 && it->second.size() != 1;
                flat = flat || isFlat;
                wrong.push_back(
                    fqn + "." + name + " " + torchSizeText(e->tensor.shape) + " vs " + torchSizeText(it->second));
                if (firstError.empty())
                    firstError = e->tensor.numel() == n ? "ValueError: Size mismatch between saved "
                            + torchSizeText(e->tensor.shape) + " and current: " + torchSizeText(it->second) + " for "
                            + root + (root.empty() ? "" : ".") + "state." + fqn + "." + name
                                                        : "RuntimeError: The size of tensor a (" + std::to_string(n)
                            + ") must match the size of tensor b (" + std::to_string(e->tensor.numel())
                            + ") at non-singleton dimension 0";
            }
        }
        if (!wrong.empty())
            add(d,
                {"shape-mismatch", "error",
                    std::to_string(wrong.size()) + " state tensor(s) of " + where
                        + " do not have their parameter's shape"
                        + (flat ? " (flat 1-D FSDP state against unflattened parameters)" : "") + ": "
                        + quoteList(wrong, 4),
                    firstError,
                    flat ? "this is raw FSDP1 flat-parameter state: unflatten it first (`optscope-cli unflatten ... "
                           "--model`)"
                         : "the optimizer belongs to a different architecture; it cannot be loaded into this model",
                    root, head(wrong), {}});

        // groups, when the reference is an optimizer
        if (!exp.groups.empty()) {
            // names to compare with: FQNs, or ids mapped through param_names; bare ids can only be counted
            std::vector<std::vector<std::string>> mine;
            bool comparable = !v.idKeyed;
            for (const auto& g : v.groups) {
                if (v.idKeyed && g.paramNames.size() == g.params.size()) {
                    mine.push_back(g.paramNames);
                    comparable = true;
                } else {
                    mine.push_back(g.params);
                }
            }
            if (mine.size() != exp.groups.size()) {
                add(d,
                    {"param-groups-mismatch", "error",
                        where + " has " + std::to_string(mine.size()) + " parameter group(s), " + exp.source + " has "
                            + std::to_string(exp.groups.size()),
                        "ValueError: loaded state dict has a different number of parameter groups",
                        "build the optimizer with the same parameter groups as the run that saved it", root, {}, {}});
            } else {
                for (size_t g = 0; g < mine.size(); ++g) {
                    if (mine[g].size() == exp.groups[g].size()) continue;
                    std::vector<std::string> extra, lacking;
                    const std::set<std::string> a(mine[g].begin(), mine[g].end()),
                        b(exp.groups[g].begin(), exp.groups[g].end());
                    for (const auto& x : mine[g])
                        if (comparable && !b.count(x)) extra.push_back(x);
                    for (const auto& x : exp.groups[g])
                        if (comparable && !a.count(x)) lacking.push_back(x);
                    add(d,
                        {"param-groups-mismatch", "error",
                            "parameter group " + std::to_string(g) + " of " + where + " has "
                                + std::to_string(mine[g].size()) + " parameters, the reference's has "
                                + std::to_string(exp.groups[g].size())
                                + (extra.empty() ? "" : "; only here: " + quoteList(extra))
                                + (lacking.empty() ? "" : "; only in the reference: " + quoteList(lacking)),
                            "ValueError: loaded state dict contains a parameter group that doesn't match the size of "
                            "optimizer's group",
                            "rebuild the optimizer over the same parameter list per group", root,
                            head(extra.empty() ? lacking : extra), {}});
                }
            }
        }
    }

    const Checkpoint& m_cp;
    const ExpectedParams* m_expected;
    const Progress& m_progress;
};

} // namespace

ExpectedParams ExpectedParams::fromCheckpoint(const Checkpoint& model)
{
    ExpectedParams e;
    e.source = model.path;
    // a reference optimizer: its param_groups are the truth (names, order, groups)
    for (const auto& v : findOptimizers(model)) {
        const OptimizerParams names = namesOf(v);
        if (names.fqns.empty()) continue;
        e.fqns = names.fqns;
        for (const auto& g : v.groups)
            e.groups.push_back(g.paramNames.size() == g.params.size() && v.idKeyed ? g.paramNames : g.params);
        for (const auto& p : v.params)
            for (const auto& [name, entry] : p.states)
                if (entry->isTensor() && !entry->tensor.shape.empty())
                    e.shapes.emplace(v.idKeyed ? std::string() : p.key, entry->tensor.shape);
        e.shapes.erase(std::string());
        e.source = model.path + " (optimizer '" + v.rootKey() + "')";
        break;
    }
    // a model state dict: tensors under "model" (or at the top), minus known buffers
    bool underModel = false;
    for (const auto& en : model.entries)
        if (en.isTensor() && en.path.size() == 2 && en.path[0].key == "model") underModel = true;
    std::vector<std::string> fqns;
    for (const auto& en : model.entries) {
        if (!en.isTensor()) continue;
        std::string fqn;
        if (underModel && en.path.size() == 2 && en.path[0].key == "model")
            fqn = en.path[1].key;
        else if (!underModel && en.path.size() == 1)
            fqn = en.path[0].key;
        else
            continue;
        e.shapes[fqn] = en.tensor.shape;
        if (!isKnownBufferName(fqn)) fqns.push_back(fqn);
    }
    if (e.fqns.empty()) e.fqns = fqns;
    if (e.fqns.empty())
        throw Error(ErrorKind::Format, model.path, "names no parameters (no model tensors and no FQN-keyed optimizer)");
    return e;
}

ExpectedParams ExpectedParams::fromFqnList(const std::string& path)
{
    std::ifstream in(path);
    if (!in) throw Error(ErrorKind::Io, path, "cannot read the FQN list");
    ExpectedParams e;
    e.source = path;
    std::string line;
    int lineNo = 0;
    while (std::getline(in, line)) {
        ++lineNo;
        if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
        std::istringstream ls(line);
        std::string fqn, shape;
        if (!(ls >> fqn)) continue;
        e.fqns.push_back(fqn);
        if (ls >> shape) {
            std::vector<int64_t> dims;
            std::istringstream ss(shape);
            std::string part;
            while (std::getline(ss, part, ','))
                try {
                    dims.push_back(std::stoll(part));
                } catch (...) {
                    throw Error(
                        ErrorKind::Format, path, "line " + std::to_string(lineNo) + ": bad shape '" + shape + "'");
                }
            e.shapes[fqn] = dims;
        }
    }
    if (e.fqns.empty()) throw Error(ErrorKind::Format, path, "lists no FQNs");
    return e;
}

Diagnosis diagnoseCheckpoint(const Checkpoint& optim, const ExpectedParams* expected, const Progress& progress)
{
    return Diagnoser(optim, expected, progress).run();
}

} // namespace optscope
