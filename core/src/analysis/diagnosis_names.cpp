// SPDX-License-Identifier: GPL-3.0-or-later
// The optimizer's names against the model's (diagnoser.h)
#include "optscope/analysis/diagnoser.h"
#include <functional>

#include <algorithm>

namespace optscope {

namespace {

/// the plain leading prefix ("model.", "backbone.") that, added to or removed from the optimizer's names, makes the
/// most of them model names (wrapper prefixes are handled before, by normalising)
struct PrefixMatch
{
    std::string prefix;
    bool optimizerHasIt = false;
    size_t matched = 0;
};

PrefixMatch bestPrefix(const std::vector<std::string>& optim, const std::set<std::string>& model)
{
    PrefixMatch best;
    auto count = [&](const std::function<std::string(const std::string&)>& f) {
        size_t n = 0;
        for (const auto& x : optim)
            n += model.count(f(x)) > 0;
        return n;
    };
    const size_t base = count([](const std::string& x) { return x; });
    std::set<std::string> candidates;
    for (const auto& x : optim)
        if (auto dot = x.find('.'); dot != std::string::npos) candidates.insert(x.substr(0, dot + 1));
    for (const auto& x : model)
        if (auto dot = x.find('.'); dot != std::string::npos) candidates.insert(x.substr(0, dot + 1));
    for (const auto& p : candidates) {
        const size_t strip = count([&](const std::string& x) { return x.rfind(p, 0) == 0 ? x.substr(p.size()) : x; });
        if (strip > std::max(base, best.matched)) best = {p, true, strip};
        const size_t add = count([&](const std::string& x) { return p + x; });
        if (add > std::max(base, best.matched)) best = {p, false, add};
    }
    return best;
}

} // namespace

void Diagnoser::flattenedToNested(Diagnosis& d) const
{
    if (!m_target) return;
    for (auto& f : d.findings) {
        if (f.code != FindingCode::FlattenedFormat) continue;
        const OptimizerView* v = nullptr;
        for (const auto& view : m_table.optimizers)
            if (view.rootKey() == f.key && view.flattened) v = &view;
        if (!v) continue;
        std::vector<std::string> saved; // the parameters in file order
        std::map<std::string, std::string> savedByCanon;
        for (const auto& [fqn, hps] : v->flatParamHyperparams) {
            saved.push_back(fqn);
            savedByCanon.emplace(normalizeFqn(fqn).fqn, fqn);
        }
        size_t total = 0;
        for (const size_t n : m_target->groupSizes)
            total += n;
        std::string problem;
        std::vector<std::vector<std::string>> groups;
        if (total != saved.size()) {
            problem = "the target optimizer holds " + std::to_string(total) + " parameters, the flattened one "
                + std::to_string(saved.size());
        } else {
            const bool byName = m_target->names.size() == total;
            size_t pos = 0;
            std::set<std::string> used;
            for (const size_t n : m_target->groupSizes) {
                groups.emplace_back();
                for (size_t i = 0; i < n && problem.empty(); ++i, ++pos) {
                    std::string fqn = saved[pos];
                    if (byName) {
                        const auto it = savedByCanon.find(normalizeFqn(m_target->names[pos]).fqn);
                        if (it == savedByCanon.end()) {
                            problem = "the target optimizer's parameter '" + m_target->names[pos]
                                + "' is not in the flattened one";
                            break;
                        }
                        fqn = it->second;
                    }
                    used.insert(fqn);
                    groups.back().push_back(fqn);
                }
            }
            if (problem.empty() && used.size() != saved.size())
                problem = "the target optimizer names a parameter twice";
        }
        if (!problem.empty()) {
            f.fix += "; " + m_target->source + " cannot group it: " + problem;
            continue;
        }
        // groups whose parameters were saved with other hyperparameters take the first one's, as DSD does
        std::map<std::string, const std::map<std::string, const Entry*>*> hyperparamsOf;
        for (const auto& [fqn, hps] : v->flatParamHyperparams)
            hyperparamsOf.emplace(fqn, &hps);
        size_t mixed = 0;
        for (const auto& g : groups)
            for (const auto& fqn : g) {
                const auto& a = *hyperparamsOf.at(g.front());
                const auto& b = *hyperparamsOf.at(fqn);
                bool same = a.size() == b.size();
                for (auto ia = a.begin(), ib = b.begin(); same && ia != a.end(); ++ia, ++ib)
                    same = ia->first == ib->first && !ia->second->isTensor() && !ib->second->isTensor()
                        && pyRepr(ia->second->value, 4000) == pyRepr(ib->second->value, 4000);
                mixed += !same;
            }
        const std::string how = std::to_string(groups.size()) + " param group(s) of " + m_target->source
            + (m_target->names.size() == total ? " (by name)" : " (by position)");
        f.fix = "load it with set_optimizer_state_dict, or let `optscope-cli fix` convert it to the nested format "
                "for optimizer.load_state_dict, with the "
            + how;
        f.fixNeutral = "load it with set_optimizer_state_dict, or apply the fix, which converts it to the nested "
                       "format for optimizer.load_state_dict, with the "
            + how;
        if (mixed)
            f.fix += "; " + std::to_string(mixed) + " parameter(s) were saved with other hyperparameters than "
                + "the first of their target group, whose values the group takes (as set_optimizer_state_dict "
                  "does)";
        FixAction a {FixAction::Kind::UnflattenFormat, "flattened", "nested",
            "convert to the nested {state, param_groups} format with the target's " + std::to_string(groups.size())
                + " param groups",
            std::move(groups)};
        f.actions.push_back(std::move(a));
    }
}

void Diagnoser::wrapperPrefixHints(Diagnosis& d) const
{
    for (size_t oi = 0; oi < m_table.optimizers.size(); ++oi) {
        std::set<std::string> prefixes;
        std::vector<std::string> names;
        for (const ParamRow* r : m_table.rowsOf(static_cast<int>(oi))) {
            if (r->fqn.empty() || r->fqn == r->normalized) continue;
            for (const auto& p : normalizeFqn(r->fqn).stripped)
                prefixes.insert(p);
            names.push_back(r->fqn);
        }
        if (names.empty()) continue;
        std::string list;
        for (const auto& p : prefixes)
            list += (list.empty() ? "'" : ", '") + p + "'";
        const OptimizerView& v = m_table.optimizers[oi];
        const std::string root = v.rootKey();
        Finding f(FindingCode::WrapperPrefix,
            std::to_string(names.size()) + " parameter name(s) of "
                + (root.empty() ? std::string("the optimizer") : "optimizer '" + root + "'")
                + " carry the wrapper prefix " + list
                + " ('_orig_mod.': torch.compile; 'module.': DDP; '_fsdp_wrapped_module.': FSDP1): they match the "
                  "wrapped module they were saved from. A plain model raises Missing/Unexpected key(s) for such "
                  "keys in model.load_state_dict",
            root);
        f.fix = "diagnose against the model it will load into (--model): the findings then say what PyTorch does, "
                "and `optscope-cli fix` renames the keys";
        f.fixNeutral = "diagnose against the model it will load into (Model / reference): the findings then say "
                       "what PyTorch does, and the fix renames the keys";
        for (size_t i = 0; i < names.size() && i < 8; ++i)
            f.keys.push_back(names[i]);
        d.findings.push_back(std::move(f));
    }
}

void Diagnoser::positionFindings(const std::vector<const ParamRow*>& listed, const Names& names, bool sameOrder,
    const std::string& where, const std::string& root, bool shapesFit, Diagnosis& d) const
{
    const ModelParams& exp = *m_exp;
    std::vector<std::string> targetNames;
    // a target without names over one group holds model.parameters(): the model's order
    const bool modelOrder = m_target ? m_target->names.empty() && m_target->groupSizes.size() == 1 : !sameOrder;
    if (m_target && m_target->names.size() == listed.size())
        targetNames = m_target->names;
    else if (modelOrder && !m_frozenReading && !exp.fromOptimizer && exp.orderKnown && exp.fqns.size() == listed.size())
        targetNames = exp.fqns;
    if (targetNames.empty()) return;
    std::set<std::string> targetSet;
    for (const auto& n : targetNames)
        targetSet.insert(canon(n));
    std::vector<std::string> pairs, keys;
    for (size_t i = 0; i < listed.size(); ++i) {
        const ParamRow& r = *listed[i];
        // names the file records, or the order of the model saved beside it (the saving run's own)
        const bool known = r.confidence == Confidence::Stored
            || (r.source == NameSource::ModelInFile && r.confidence == Confidence::Exact);
        if (!known || r.fqn.empty()) continue;
        const auto renamed = names.rename.find(r.fqn);
        const std::string saved = canon(renamed == names.rename.end() ? r.fqn : renamed->second);
        const std::string target = canon(targetNames[i]);
        if (saved == target || !targetSet.count(saved)) continue; // the same, or not a permutation of names
        pairs.push_back(target + " <- " + saved);
        keys.push_back(target);
    }
    if (pairs.empty()) return;
    Finding f(FindingCode::ParamOrderMismatch,
        where + " lists its parameters in another order than " + (m_target ? m_target->source : exp.source) + ": "
            + std::to_string(pairs.size())
            + " position(s) pair a parameter with another's state under optimizer.load_state_dict, which pairs "
              "by position: "
            + quoteList(pairs, 4)
            + (shapesFit ? " (their shapes agree: it loads and trains on the wrong moments without a word)"
                         : " (the first step() fails where the shapes differ)"),
        root);
    f.pytorchError = shapesFit ? "none: optimizer.load_state_dict loads each state into the parameter at its position"
                               : "RuntimeError: The size of tensor a must match the size of tensor b (at the first "
                                 "optimizer.step() after loading)";
    f.fix = "load it with set_optimizer_state_dict, which pairs by name, or build the optimizer's param groups in "
            "the saved order";
    f.keys = head(keys);
    d.findings.push_back(std::move(f));
}

void Diagnoser::coverageFindings(const OptimizerReading& reading, const Names& names, Diagnosis& d) const
{
    const OptimizerView& v = *reading.view;
    const ModelParams& exp = *m_exp;
    std::set<std::string> expected; // the names DSD looks up
    for (const auto& n : exp.fqns)
        expected.insert(canon(n));
    std::vector<std::string> missing, extra;
    std::set<std::string> covered;
    for (const auto& n : names.opt) {
        const auto it = names.rename.find(n);
        const std::string to = it == names.rename.end() ? n : it->second;
        if (expected.count(to))
            covered.insert(to);
        else
            extra.push_back(n);
    }
    // in the target without state after its step: frozen in the loading run as when it was saved
    std::vector<std::string> frozenHere;
    for (const auto& n : exp.fqns)
        if (!covered.count(canon(n))) (m_frozenInTarget.count(canon(n)) ? frozenHere : missing).push_back(n);
    // a frozen-params warning: "<count> parameter(s) <what>: <the names>"
    const auto frozenFinding = [&](const std::vector<std::string>& names, const std::string& what, const char* fix) {
        Finding f(FindingCode::FrozenParams,
            std::to_string(names.size()) + " parameter(s) " + what + ": " + quoteList(names), reading.root);
        f.fix = fix;
        f.keys = head(names);
        d.findings.push_back(std::move(f));
    };
    if (!frozenHere.empty())
        frozenFinding(frozenHere,
            "of " + exp.source + " are not in " + reading.where + ", and " + m_target->source
                + " holds them without state after its step: frozen (requires_grad=False) when it was saved "
                  "and when it loads",
            "nothing to do while they stay frozen (set_optimizer_state_dict looks up state only for "
            "parameters that require grad); one made trainable starts with empty state");
    // saved with state, frozen in the target: set_optimizer_state_dict drops that state without a word
    std::vector<std::string> dropped;
    if (!v.idKeyed)
        for (const ParamRow* r : reading.listed)
            if (r->param && m_frozenInTarget.count(canon(r->fqn))) dropped.push_back(r->fqn);
    if (!dropped.empty())
        frozenFinding(dropped,
            "have saved state in " + reading.where + ", but " + m_target->source
                + " holds them without state after its step: frozen (requires_grad=False) where it loads. "
                  "set_optimizer_state_dict looks up state only for parameters that require grad and drops "
                  "theirs",
            "make them trainable before loading if their state should carry over; "
            "optimizer.load_state_dict of the same file keeps it");
    if (!missing.empty() && reading.trainer) {
        // the Trainer puts requires_grad=False parameters in no group: they were frozen when it saved
        frozenFinding(missing,
            "of " + exp.source + " are in neither of the Trainer's param groups of " + reading.where
                + ": frozen (requires_grad=False) when it was saved",
            "nothing to do if they are still frozen; a parameter trainable now starts with empty state "
            "(and the Trainer's groups then differ in size: optimizer.load_state_dict raises)");
    } else if (!missing.empty()) {
        Finding f(FindingCode::MissingState,
            std::to_string(missing.size()) + " parameter(s) of " + exp.source + " are not in " + reading.where + ": "
                + quoteList(missing),
            reading.root);
        f.fix = "the optimizer was saved for a different model, or before these layers were added; if they "
                "are new, build the optimizer state for them from zero: load with optimizer.load_state_dict "
                "after rebuilding the param groups, or drop them from the model before loading";
        f.keys = head(missing);
        d.findings.push_back(std::move(f));
    }
    if (!extra.empty()) {
        Finding f(FindingCode::ExtraParams,
            std::to_string(extra.size()) + " parameter(s) of " + reading.where + " are not in " + exp.source + ": "
                + quoteList(extra)
                + "; set_optimizer_state_dict ignores them silently, optimizer.load_state_dict pairs by "
                  "position and counts them",
            reading.root);
        f.fix = "check that the model is the one this optimizer was trained with";
        f.keys = head(extra);
        d.findings.push_back(std::move(f));
    }
}

void Diagnoser::nameFindings(
    int oi, const std::string& where, const std::vector<const ParamRow*>& listed, Names& names, Diagnosis& d)
{
    const ModelParams& exp = *m_exp;
    const std::string root = m_table.optimizers[static_cast<size_t>(oi)].rootKey();
    std::set<std::string> expected; // what set_optimizer_state_dict looks up: model names without wrappers
    for (const auto& n : exp.fqns)
        expected.insert(canon(n));
    // 1. wrapper prefixes on the optimizer's names (module., _orig_mod., ...): DSD's names have none, and it strips
    // the model's own wrappers, so the canonical name is the fix (a wrapper only on the model side is no problem)
    std::set<std::string> stripped;
    for (const auto& n : names.opt) {
        if (expected.count(n)) continue;
        const NormalizedFqn nn = normalizeFqn(n);
        if (nn.stripped.empty() || !expected.count(nn.fqn)) continue;
        names.rename[n] = nn.fqn;
        stripped.insert(nn.stripped.begin(), nn.stripped.end());
    }
    std::string prefixText;
    if (names.rename.empty()) {
        // 2. a plain leading prefix on one side ("model.", "backbone.")
        const PrefixMatch pm = bestPrefix(names.opt, expected);
        if (pm.matched > 0 && pm.matched * 2 >= names.opt.size()) {
            for (const auto& n : names.opt) {
                const std::string to
                    = pm.optimizerHasIt ? (n.rfind(pm.prefix, 0) == 0 ? n.substr(pm.prefix.size()) : n) : pm.prefix + n;
                if (to != n && expected.count(to) && !expected.count(n)) names.rename[n] = to;
            }
            prefixText = (pm.optimizerHasIt ? "the optimizer's names carry '" : "the model's names carry '") + pm.prefix
                + "' that the other side lacks";
        }
    } else {
        std::string t;
        for (const auto& x : stripped)
            t += (t.empty() ? "'" : ", '") + x + "'";
        prefixText = "the optimizer's names carry the wrapper prefix " + t
            + " (saved from the wrapped model); set_optimizer_state_dict looks names up without wrappers";
    }
    // integer-keyed state loads by position: its names are param_names, or derived from a model by position; the
    // derived ones are not in the optimizer, so there is nothing of it to rename (the model's keys are another
    // finding)
    const bool idKeyed = m_table.optimizers[static_cast<size_t>(oi)].idKeyed;
    const bool namesStored = !idKeyed || m_table.sources[static_cast<size_t>(oi)] == NameSource::ParamNames;
    if (!names.rename.empty() && namesStored) {
        size_t matched = 0; // after the renames, not only the renamed ones
        for (const auto& n : names.opt) {
            const auto it = names.rename.find(n);
            matched += expected.count(it == names.rename.end() ? n : it->second) > 0;
        }
        Finding f(idKeyed ? FindingCode::ParamNamesPrefix : FindingCode::PrefixMismatch,
            prefixText + ": " + std::to_string(names.rename.size()) + " of the " + std::to_string(names.opt.size())
                + " parameter names of " + where + " need renaming; once renamed, " + std::to_string(matched) + " of "
                + std::to_string(names.opt.size()) + " match " + exp.source,
            root);
        f.fix = "rename the optimizer's names (`optscope-cli fix` does it), or save with "
                "get_optimizer_state_dict, which writes names without wrappers";
        f.fixNeutral = "rename the optimizer's names (the fix does it), or save with get_optimizer_state_dict, "
                       "which writes names without wrappers";
        for (const auto& n : names.opt)
            if (auto it = names.rename.find(n); it != names.rename.end())
                f.actions.push_back(
                    {FixAction::Kind::RenameParam, n, it->second, "'" + n + "' -> '" + it->second + "'"});
        d.findings.push_back(std::move(f));
    }
    // 3. renamed modules: the unmatched names of one optimizer module and of one model module have the same
    // parameter names and shapes, and no other unmatched model module does (head.* -> lm_head.*): found wherever
    // the param groups put them, which positions are not (a decay / no-decay split reorders them)
    moduleRenameFindings(where, root, listed, expected, names, d);
    // 4. renamed layers: an unmatched optimizer name and an unmatched model name at the same position, same shape
    std::set<std::string> covered;
    for (const auto& n : names.opt)
        covered.insert(names.rename.count(n) ? names.rename.at(n) : n);
    std::vector<std::pair<std::string, std::string>> pairs;
    for (size_t i = 0; i < names.opt.size() && i < exp.fqns.size(); ++i) {
        const std::string& o = names.opt[i];
        const std::string m = canon(exp.fqns[i]);
        if (names.rename.count(o) || expected.count(o) || covered.count(m)) continue;
        const auto* shape = modelShape(exp.fqns[i]);
        if (!shape || !listed[i]->param || listed[i]->shape != *shape) continue;
        pairs.push_back({o, m});
    }
    if (!pairs.empty()) {
        std::string list;
        for (size_t i = 0; i < pairs.size() && i < 4; ++i)
            list += (i ? ", '" : "'") + pairs[i].first + "' -> '" + pairs[i].second + "'";
        if (pairs.size() > 4) list += ", ...";
        Finding f(FindingCode::RenamedParams,
            std::to_string(pairs.size()) + " parameter(s) of " + where
                + " are not in the model, but the model parameter at the same position has the same shape and "
                  "no state: probably renamed: "
                + list,
            root);
        f.fix = "`optscope-cli fix` applies these renames; to rename a whole module use `optscope-cli fix "
                "--rename OLD=NEW` (a module prefix renames every parameter under it)";
        f.fixNeutral = "the fix applies these renames";
        for (const auto& [o, m] : pairs) {
            f.actions.push_back({FixAction::Kind::RenameParam, o, m, "'" + o + "' -> '" + m + "'"});
            names.rename[o] = m;
        }
        d.findings.push_back(std::move(f));
    }
}

void Diagnoser::moduleRenameFindings(const std::string& where, const std::string& root,
    const std::vector<const ParamRow*>& listed, const std::set<std::string>& expected, Names& names, Diagnosis& d)
{
    const ModelParams& exp = *m_exp;
    // parameter name in its module -> its shape (null: unknown) and its position (in the param groups; in the model)
    struct Leaf
    {
        const std::vector<int64_t>* shape = nullptr;
        size_t position = 0;
    };
    using Leaves = std::map<std::string, Leaf>;
    auto splitModule = [](const std::string& n) {
        const auto dot = n.rfind('.');
        return dot == std::string::npos ? std::make_pair(std::string(), n)
                                        : std::make_pair(n.substr(0, dot + 1), n.substr(dot + 1));
    };
    std::set<std::string> covered;
    for (const auto& n : names.opt)
        covered.insert(names.rename.count(n) ? names.rename.at(n) : n);
    std::map<std::string, Leaves> fromModules, toModules;
    for (size_t i = 0; i < names.opt.size() && i < listed.size(); ++i) {
        const std::string& o = names.opt[i];
        if (o.empty() || names.rename.count(o) || expected.count(o)) continue;
        const auto [module, leaf] = splitModule(o);
        fromModules[module][leaf] = {listed[i]->param && !listed[i]->shape.empty() ? &listed[i]->shape : nullptr, i};
    }
    for (size_t i = 0; i < exp.fqns.size(); ++i) {
        const std::string m = canon(exp.fqns[i]);
        if (covered.count(m)) continue;
        const auto [module, leaf] = splitModule(m);
        toModules[module][leaf] = {modelShape(exp.fqns[i]), i};
    }
    // the same parameter names, and the same shapes where both sides know one; where neither leaf's shape is known on
    // the optimizer's side (LBFGS keeps all its state, flat, on the first parameter), the same positions instead:
    // the optimizer lists the module's parameters where the model has the other's
    auto fits = [](const Leaves& a, const Leaves& b) {
        if (a.size() != b.size()) return false;
        bool anyShape = false, samePositions = true;
        for (const auto& [leaf, info] : a) {
            const auto it = b.find(leaf);
            if (it == b.end()) return false;
            samePositions = samePositions && info.position == it->second.position;
            if (info.shape && it->second.shape) {
                if (*info.shape != *it->second.shape) return false;
                anyShape = true;
            }
        }
        return anyShape || samePositions;
    };
    std::vector<std::pair<std::string, std::string>> modules; // from -> to, each side used once
    std::map<std::string, int> toUses;
    for (const auto& [from, leaves] : fromModules) {
        if (from.empty()) continue;
        std::string only;
        int matches = 0;
        for (const auto& [to, toLeaves] : toModules)
            if (!to.empty() && fits(leaves, toLeaves)) {
                only = to;
                ++matches;
            }
        if (matches == 1) {
            modules.emplace_back(from, only);
            ++toUses[only];
        }
    }
    std::vector<std::pair<std::string, std::string>> pairs;
    std::string list;
    for (const auto& [from, to] : modules) {
        if (toUses[to] != 1) continue; // two optimizer modules fit one model module: which was renamed?
        list += (list.empty() ? "'" : ", '") + from.substr(0, from.size() - 1) + "' -> '" + to.substr(0, to.size() - 1)
            + "'";
        for (const auto& [leaf, shape] : fromModules[from])
            pairs.emplace_back(from + leaf, to + leaf);
    }
    if (pairs.empty()) return;
    Finding f(FindingCode::RenamedParams,
        std::to_string(pairs.size()) + " parameter(s) of " + where
            + " are not in the model, but a module of the model that has no state has the same parameter names "
              "and shapes (or, where the state gives no shapes, the same names at the same positions): probably "
              "renamed modules: "
            + list,
        root);
    f.fix = "`optscope-cli fix` applies these renames (or `optscope-cli fix --rename OLD=NEW` for a module)";
    f.fixNeutral = "the fix applies these renames";
    for (const auto& [o, m] : pairs) {
        f.actions.push_back({FixAction::Kind::RenameParam, o, m, "'" + o + "' -> '" + m + "'"});
        names.rename[o] = m;
    }
    d.findings.push_back(std::move(f));
}

} // namespace optscope
