// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/optim/optimizer_view.h"

#include <algorithm>
#include <unordered_map>

namespace optscope {

const OptimizerParam* OptimizerView::param(const std::string& key) const
{
    if (paramIndex.size() == params.size()) {
        auto it = paramIndex.find(key);
        return it == paramIndex.end() ? nullptr : &params[it->second];
    }
    for (const auto& p : params)
        if (p.key == key) return &p;
    return nullptr;
}

std::vector<std::string> OptimizerView::groupParams() const
{
    std::vector<std::string> out;
    for (const auto& g : groups)
        out.insert(out.end(), g.params.begin(), g.params.end());
    return out;
}

namespace {

bool startsWith(const std::string& s, const char* prefix)
{
    return s.rfind(prefix, 0) == 0;
}

bool isInteger(const std::string& s)
{
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<std::string> stringList(const Entry* e)
{
    std::vector<std::string> out;
    if (!e || e->isTensor() || !e->value || !e->value->isSequence()) return out;
    for (const auto* v : e->value->items())
        out.push_back(pyStr(v));
    return out;
}

struct Builder
{
    OptimizerView view;
    bool hasGroups = false;
    std::unordered_map<std::string, size_t> paramIndex;
    std::map<int64_t, OptimizerGroup> nestedGroups;
    // flattened: per fqn, hyperparameters in order
    std::vector<std::pair<std::string, std::map<std::string, const Entry*>>> flatGroups;
    std::unordered_map<std::string, size_t> flatGroupIndex;

    OptimizerParam& param(const std::string& key)
    {
        // a parameter's states come one after the other (step, exp_avg, exp_avg_sq): the last one asked, first
        if (!view.params.empty() && view.params[lastParam].key == key) return view.params[lastParam];
        auto it = paramIndex.find(key);
        if (it == paramIndex.end()) {
            it = paramIndex.emplace(key, view.params.size()).first;
            view.params.push_back({key, {}});
        }
        lastParam = it->second;
        return view.params[lastParam];
    }
    size_t lastParam = 0;
};

std::string rootText(const KeyPath& path, size_t k)
{
    return joinKeyPath(KeyPath(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(k))) + "#" + std::to_string(k);
}

/// The roots that hold param_groups (nested or flattened): a "state" key counts only under one of them. A
/// trainer's checkpoint can itself be {"state": {"model": ..., "optim": {"state": ..., "param_groups": ...}}}
/// (MosaicML Composer's layout): its outer "state" is not an optimizer's, and the search goes on to the inner.
class ParamGroupRoots
{
public:
    explicit ParamGroupRoots(const Checkpoint& checkpoint)
    {
        for (const Entry& e : checkpoint.entries) {
            const KeyPath& p = e.path;
            for (size_t k = 0; k < p.size(); ++k) {
                if (p[k].isIndex()) continue;
                const std::string_view s = p[k].key.view();
                const bool nested = s == "param_groups" && k + 2 < p.size() && p[k + 1].isIndex();
                if (!nested && !(k + 1 == p.size() && s.rfind("param_groups.", 0) == 0)) continue;
                if (!holds(p, k)) m_roots.emplace_back(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(k));
                break;
            }
        }
    }
    /// whether @p p's first @p k elements are such a root
    bool holds(const KeyPath& p, size_t k) const
    {
        for (const KeyPath& r : m_roots)
            if (r.size() == k && std::equal(r.begin(), r.end(), p.begin())) return true;
        return false;
    }

private:
    std::vector<KeyPath> m_roots;
};

/// The optimizers' views as their entries come in, one per root, in the order first seen
class ViewBuilders
{
public:
    /// the view rooted at @p path's first @p k elements
    Builder& at(const KeyPath& path, size_t k)
    {
        // the entries of one optimizer come one after the other: its root is asked first
        if (m_last && m_last->view.root.size() == k
            && std::equal(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(k), m_last->view.root.begin()))
            return *m_last;
        const std::string id = rootText(path, k);
        auto it = m_builders.find(id);
        if (it == m_builders.end()) {
            m_order.push_back(id);
            it = m_builders.emplace(id, Builder {}).first;
            it->second.view.root.assign(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(k));
        }
        m_last = &it->second;
        return it->second;
    }
    template<typename F> void forEachInOrder(F&& f)
    {
        for (const auto& id : m_order)
            f(m_builders[id]);
    }

private:
    std::map<std::string, Builder> m_builders; // by root
    std::vector<std::string> m_order;
    Builder* m_last = nullptr;
};

/// @p e into the view its key names, by the first element of its path that is an optimizer's: a nested state
/// ("state", id, name...), a nested group's field ("param_groups", index, field), a flattened state key
/// ("state.FQN.name") or a flattened group field ("param_groups.FQN.field")
void addEntry(const Entry& e, const ParamGroupRoots& groupRoots, ViewBuilders& views)
{
    const KeyPath& p = e.path;
    for (size_t k = 0; k < p.size(); ++k) {
        if (p[k].isIndex()) continue;
        const std::string s = p[k].key.str();
        if ((s == "state" || startsWith(s, "state.")) && !groupRoots.holds(p, k)) continue;
        if (s == "state" && k + 2 < p.size()) {
            Builder& b = views.at(p, k);
            std::string name;
            for (size_t j = k + 2; j < p.size(); ++j)
                name += (j > k + 2 ? "." : "") + p[j].key;
            b.param(p[k + 1].key.str()).states.emplace(name, &e);
            b.view.hasStateKey = true;
            return;
        }
        if (s == "param_groups" && k + 2 < p.size() && p[k + 1].isIndex()) {
            Builder& b = views.at(p, k);
            b.hasGroups = true;
            OptimizerGroup& g = b.nestedGroups[p[k + 1].index];
            const std::string field = p[k + 2].key.str();
            if (field == "params")
                g.params = stringList(&e);
            else if (field == "param_names")
                g.paramNames = stringList(&e);
            else
                g.hyperparams.emplace(field, &e);
            return;
        }
        if (k + 1 == p.size() && startsWith(s, "state.")) {
            const auto dot = s.rfind('.');
            if (dot <= 6) return;
            Builder& b = views.at(p, k);
            b.view.flattened = true;
            b.view.hasStateKey = true;
            b.param(s.substr(6, dot - 6)).states.emplace(s.substr(dot + 1), &e);
            return;
        }
        if (k + 1 == p.size() && startsWith(s, "param_groups.")) {
            const auto dot = s.rfind('.');
            if (dot <= 13) return;
            Builder& b = views.at(p, k);
            b.view.flattened = true;
            b.hasGroups = true;
            const std::string fqn = s.substr(13, dot - 13);
            auto it = b.flatGroupIndex.find(fqn);
            if (it == b.flatGroupIndex.end()) {
                it = b.flatGroupIndex.emplace(fqn, b.flatGroups.size()).first;
                b.flatGroups.push_back({fqn, {}});
            }
            b.flatGroups[it->second].second.emplace(s.substr(dot + 1), &e);
            return;
        }
    }
}

/// flattened: a guess at the grouping, parameters with identical hyperparameters form one group (in
/// first-appearance order); a value's repr is made once per parameter, not once per comparison
void guessFlatGroups(Builder& b)
{
    std::map<std::vector<std::string>, size_t> groupOfValues;
    for (auto& [fqn, hps] : b.flatGroups) {
        std::vector<std::string> values;
        bool comparable = true;
        for (const auto& [name, entry] : hps) {
            comparable = comparable && !entry->isTensor();
            values.push_back(name + "=" + pyRepr(entry->value, 4000));
        }
        auto it = comparable ? groupOfValues.find(values) : groupOfValues.end();
        if (it == groupOfValues.end()) {
            b.view.groups.push_back({});
            b.view.groups.back().hyperparams = hps;
            if (comparable) it = groupOfValues.emplace(std::move(values), b.view.groups.size() - 1).first;
        }
        b.view.groups[it == groupOfValues.end() ? b.view.groups.size() - 1 : it->second].params.push_back(fqn);
    }
    b.view.groupsGuessed = !b.flatGroups.empty();
    b.view.flatParamHyperparams = std::move(b.flatGroups);
}

/// the view whole: its groups, and whether it is keyed by integer ids
OptimizerView finishView(Builder& b)
{
    for (auto& [index, g] : b.nestedGroups)
        b.view.groups.push_back(std::move(g));
    guessFlatGroups(b);
    bool ids = !b.view.params.empty() || !b.view.groups.empty();
    for (const auto& p : b.view.params)
        ids = ids && isInteger(p.key);
    for (const auto& g : b.view.groups)
        for (const auto& p : g.params)
            ids = ids && isInteger(p);
    b.view.idKeyed = ids && !b.view.flattened;
    b.view.paramIndex = std::move(b.paramIndex);
    return std::move(b.view);
}

} // namespace

std::vector<OptimizerView> findOptimizers(const Checkpoint& checkpoint)
{
    const ParamGroupRoots groupRoots(checkpoint);
    ViewBuilders views;
    for (const Entry& e : checkpoint.entries)
        addEntry(e, groupRoots, views);
    std::vector<OptimizerView> out;
    views.forEachInOrder([&](Builder& b) {
        if (b.hasGroups) out.push_back(finishView(b)); // (only roots with param_groups take states: kept as a guard)
    });
    std::stable_sort(out.begin(), out.end(),
        [](const OptimizerView& a, const OptimizerView& b) { return a.root.size() < b.root.size(); });
    return out;
}

} // namespace optscope
