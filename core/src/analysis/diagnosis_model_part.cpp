// SPDX-License-Identifier: GPL-3.0-or-later
// The model state dict saved beside the optimizer (diagnoser.h)
#include "optscope/analysis/diagnoser.h"

#include <algorithm>

namespace optscope {

namespace {

/// how nn.Module.load_state_dict lists keys
std::string torchKeyList(const std::vector<std::string>& v)
{
    std::string s;
    for (const auto& k : v)
        s += (s.empty() ? "\"" : ", \"") + k + "\"";
    return s;
}

} // namespace

std::optional<std::vector<std::vector<std::string>>> Diagnoser::partsOfModel(std::string& note, bool& unique) const
{
    const ModelParams& exp = *m_exp;
    const ParamTable bare = ParamTable::build(m_cp); // shapes from the state itself, not from a naming
    if (bare.optimizers.size() != m_table.optimizers.size()) return std::nullopt;
    std::vector<bool> used(exp.fqns.size(), false);
    std::vector<std::vector<std::string>> parts(bare.optimizers.size());
    std::map<std::vector<int64_t>, std::set<size_t>> holders; // shape -> optimizers holding one of that shape
    std::vector<size_t> stateless; // optimizers whose state tells no shape (SGD without momentum)
    std::vector<size_t> counts(bare.optimizers.size(), 0);
    unique = true;
    for (size_t oi = 0; oi < bare.optimizers.size(); ++oi) {
        std::vector<const ParamRow*> listed;
        for (const ParamRow* r : bare.rowsOf(static_cast<int>(oi)))
            if (r->position >= 0) listed.push_back(r);
        std::sort(listed.begin(), listed.end(),
            [](const ParamRow* a, const ParamRow* b) { return a->position < b->position; });
        if (listed.empty()) return std::nullopt;
        counts[oi] = listed.size();
        if (std::none_of(listed.begin(), listed.end(), [&](const ParamRow* r) { return r->param; })) {
            stateless.push_back(oi);
            continue;
        }
        std::vector<std::string> part;
        auto fits = [&](size_t j, const std::vector<int64_t>& shape) {
            return !used[j] && modelShape(exp.fqns[j]) && *modelShape(exp.fqns[j]) == shape;
        };
        size_t from = 0;
        int group = listed.front()->group;
        for (const ParamRow* r : listed) {
            const auto shape = stateShape(*r, bare.kinds[oi]);
            if (!shape) return std::nullopt; // no state tells its shape
            if (r->group != group) group = r->group, from = 0;
            // a group lists its parameters in model order, as module.parameters() gives them: the next free one
            // after the one before; else (a group in another order) the first free one
            size_t j = from;
            while (j < exp.fqns.size() && !fits(j, *shape))
                ++j;
            if (j == exp.fqns.size())
                for (j = 0; j < exp.fqns.size() && !fits(j, *shape);)
                    ++j;
            if (j == exp.fqns.size()) return std::nullopt;
            used[j] = true;
            part.push_back(exp.fqns[j]);
            holders[*shape].insert(oi);
            from = j + 1;
        }
        parts[oi] = std::move(part);
    }
    // one optimizer without any state (SGD without momentum keeps none): the parameters the others left, in model
    // order, when there are as many as it lists (more: some are buffers, and which is a guess)
    if (stateless.size() > 1) return std::nullopt;
    for (const size_t oi : stateless) {
        std::vector<size_t> free;
        for (size_t j = 0; j < exp.fqns.size(); ++j)
            if (!used[j]) free.push_back(j);
        if (free.size() < counts[oi]) return std::nullopt;
        if (free.size() > counts[oi]) unique = false;
        for (size_t k = 0; k < counts[oi]; ++k) {
            used[free[k]] = true;
            parts[oi].push_back(exp.fqns[free[k]]);
            if (modelShape(exp.fqns[free[k]])) holders[*modelShape(exp.fqns[free[k]])].insert(oi);
        }
    }
    // a shape two optimizers hold, or one a tensor in none has: which of them holds which is a guess
    for (const auto& [shape, who] : holders)
        if (who.size() > 1) unique = false;
    std::vector<std::string> rest;
    for (size_t j = 0; j < exp.fqns.size(); ++j) {
        if (used[j]) continue;
        rest.push_back(exp.fqns[j]);
        if (modelShape(exp.fqns[j]) && holders.count(*modelShape(exp.fqns[j]))) unique = false;
    }
    note = std::to_string(parts.size()) + " optimizers over parts of " + exp.source + ", none over all of it: ";
    for (size_t oi = 0; oi < parts.size(); ++oi)
        note += (oi ? "; '" : "'") + m_table.optimizers[oi].rootKey() + "' over " + std::to_string(parts[oi].size())
            + " (" + quoteList(parts[oi], 2) + ")";
    note += unique ? ", the parameters with its shapes in model order"
                   : ", taken in model order by shapes (several fit: the names are a guess)";
    if (!rest.empty())
        note += "; in none: " + quoteList(rest, 3)
            + " (buffers, which a state dict does not tell from parameters, or frozen parameters)";
    note += ". Each is diagnosed against an optimizer over its part, as the training code that built them "
            "(Lightning's configure_optimizers, a GAN's two optimizers) builds them again";
    return parts;
}

void Diagnoser::diagnoseParts(
    const std::vector<std::vector<std::string>>& parts, bool unique, const std::string& note, Diagnosis& d)
{
    d.notes.push_back(note);
    for (size_t oi = 0; oi < parts.size(); ++oi) {
        ModelParams sub = *m_exp;
        sub.fqns = parts[oi];
        if (!unique) sub.orderKnown = false; // names by position rest on the shapes' guess (as optimizerParams)
        sub.source = m_exp->source + " ('" + m_table.optimizers[oi].rootKey() + "''s part)";
        Diagnoser inner(m_cp, &sub, nullptr, m_progress);
        inner.m_reportedModelPart = oi > 0; // the model state dict beside them is compared once
        const std::string root = inner.m_table.optimizers[oi].rootKey();
        for (auto& f : optimizerFindings(m_cp, inner.m_table))
            if (f.key == root) d.findings.push_back(std::move(f));
        Diagnosis one;
        inner.compare(static_cast<int>(oi), one, true);
        for (auto& f : one.findings)
            d.findings.push_back(std::move(f));
        for (auto& n : one.notes)
            d.notes.push_back(std::move(n));
        if (oi == 0) {
            d.verdicts = std::move(one.verdicts);
            d.verdictsFor = root;
            d.optimizerKind = optimizerKindName(inner.m_table.kinds[oi]);
        } else {
            for (const auto& v : one.verdicts)
                if (v.path == LoadPath::OptimizerLoadStateDict)
                    d.notes.push_back("optimizer '" + root + "' into an optimizer over its part: "
                        + std::string(loadPathName(v.path)) + " " + v.outcomeText());
        }
    }
}

void Diagnoser::modelPartFindings(const std::map<std::string, std::string>& optimizerRenames, Diagnosis& d)
{
    if (!m_table.modelInFile || m_exp->fromOptimizer || m_reportedModelPart) return;
    m_reportedModelPart = true;
    const ModelParams& part = *m_table.modelInFile;
    std::vector<std::string> missing, unexpected;
    const std::set<std::string> have(part.keys.begin(), part.keys.end()), want(m_exp->keys.begin(), m_exp->keys.end());
    keyDifference(part, *m_exp, missing, unexpected);
    if (missing.empty() && unexpected.empty()) return;
    Finding f(FindingCode::ModelKeysMismatch,
        "the model state dict saved in " + part.source + " does not have the model's keys: "
            + std::to_string(missing.size()) + " missing, " + std::to_string(unexpected.size()) + " unexpected",
        joinKeyPath(part.root));
    f.pytorchError = "RuntimeError: " + modelLoadMessage(missing, unexpected);
    std::map<std::string, std::string> missingByCanon;
    for (const auto& k : missing)
        missingByCanon.emplace(canon(k), k);
    // the optimizer's renames as module renames (fc1.weight -> fc_in.weight: fc1 -> fc_in), for buffers too
    std::map<std::string, std::string> moduleRenames;
    for (const auto& [from, to] : optimizerRenames) {
        const auto a = from.rfind('.'), b = to.rfind('.');
        if (a != std::string::npos && b != std::string::npos && from.substr(a) == to.substr(b))
            moduleRenames.emplace(from.substr(0, a + 1), to.substr(0, b + 1));
    }
    const std::set<std::string> missingSet(missing.begin(), missing.end());
    for (const auto& k : unexpected) {
        std::string to;
        if (auto it = missingByCanon.find(canon(k)); it != missingByCanon.end()) to = it->second;
        for (const auto& [from, into] : moduleRenames)
            if (to.empty() && k.rfind(from, 0) == 0 && missingSet.count(into + k.substr(from.size())))
                to = into + k.substr(from.size());
        if (!to.empty())
            f.actions.push_back({FixAction::Kind::RenameModelKey, k, to, "model '" + k + "' -> '" + to + "'"});
    }
    f.fix = f.actions.empty() ? "the model saved beside the optimizer is another model"
                              : "rename its keys to the model's (`optscope-cli fix` does it), or load it into the "
                                "module it was saved from (wrapped or not)";
    if (!f.actions.empty())
        f.fixNeutral = "rename its keys to the model's (the fix does it), or load it into the module it was saved "
                       "from (wrapped or not)";
    f.keys = head(unexpected.empty() ? missing : unexpected);
    d.findings.push_back(std::move(f));
}

void Diagnoser::keyDifference(const ModelParams& part, const ModelParams& model, std::vector<std::string>& missing,
    std::vector<std::string>& unexpected)
{
    const std::set<std::string> have(part.keys.begin(), part.keys.end()), want(model.keys.begin(), model.keys.end());
    for (const auto& k : model.keys)
        if (!have.count(k)) missing.push_back(k);
    for (const auto& k : part.keys)
        if (!want.count(k)) unexpected.push_back(k);
}

std::string Diagnoser::modelLoadMessage(const std::vector<std::string>& missing,
    const std::vector<std::string>& unexpected, const std::vector<std::string>& sizes)
{
    // nn.Module.load_state_dict: "Missing" is inserted before "Unexpected"
    std::vector<std::string> msgs;
    if (!missing.empty()) msgs.push_back("Missing key(s) in state_dict: " + torchKeyList(missing) + ". ");
    if (!unexpected.empty()) msgs.push_back("Unexpected key(s) in state_dict: " + torchKeyList(unexpected) + ". ");
    msgs.insert(msgs.end(), sizes.begin(), sizes.end()); // size mismatches are collected first, listed last
    std::string s = "Error(s) in loading state_dict for <Model>:\n\t";
    for (size_t i = 0; i < msgs.size(); ++i)
        s += (i ? "\n\t" : "") + msgs[i];
    return s;
}

} // namespace optscope
