// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/optim/fsdp1_optim.h"
#include "optscope/base/error.h"
#include "optscope/optim/fqn_normalizer.h"
#include "optscope/optim/optimizer_view.h"
#include "optscope/optim/param_table.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_values.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace optscope {

namespace {

bool underPrefix(const std::string& fqn, const std::string& prefix)
{
    return prefix.empty()
        || (fqn.size() > prefix.size() && fqn.compare(0, prefix.size(), prefix) == 0 && fqn[prefix.size()] == '.');
}

std::string listText(const std::vector<std::string>& v, size_t max = 6)
{
    std::string t = "[";
    for (size_t i = 0; i < v.size() && i < max; ++i)
        t += (i ? ", '" : "'") + v[i] + "'";
    if (v.size() > max) t += ", ...";
    return t + "]";
}

/// the one optimizer of a raw rank file
const OptimizerView& rawOptimizer(const Checkpoint& cp, std::vector<OptimizerView>& keep)
{
    keep = findOptimizers(cp);
    if (keep.empty()) throw Error(ErrorKind::Format, cp.path, "holds no optimizer state dict (no param_groups found)");
    const OptimizerView& v = keep.front();
    if (v.flattened || !v.idKeyed)
        throw Error(ErrorKind::Format, cp.path,
            "is not a raw FSDP1 optimizer state: its parameters are keyed by name, not by flat-parameter id (it may "
            "already be unflattened)");
    return v;
}

} // namespace

Fsdp1Model Fsdp1Model::fromCheckpoint(const Checkpoint& model, const std::vector<std::string>& unitPrefixes)
{
    // shapes of every tensor the model file knows, by FQN relative to its "model" part (or the whole file)
    // (the one rule for where a model state dict sits in a checkpoint: ModelParams::modelPartOf)
    std::map<std::string, std::vector<int64_t>> shapes;
    std::vector<std::string> tensorOrder;
    std::string under;
    if (const auto part = ModelParams::modelPartOf(model)) {
        shapes = part->shapes;
        // a weight tied to another (head.weight sharing embed.weight's storage, which torch.save keeps) is one
        // parameter: FSDP1 flattens it once, under its first name
        for (const auto& k : part->keys)
            if (!part->tiedTo.count(k)) tensorOrder.push_back(k);
        if (!part->root.empty()) under = " under '" + joinKeyPath(part->root) + "'";
    }

    Fsdp1Model m;
    std::vector<std::string> params;
    for (const auto& v : findOptimizers(model)) {
        if (v.idKeyed) continue;
        params = v.groupParams();
        // shapes may also come from the optimizer state itself
        for (const auto& p : v.params)
            for (const auto& [name, entry] : p.states)
                if (entry->isTensor() && !entry->tensor->shape.empty()) shapes.emplace(p.key, entry->tensor->shape);
        m.notes.push_back("parameter order and names from the param_groups of '" + v.rootKey() + "' in " + model.path);
        break;
    }
    if (!params.empty()) {
        for (const auto& fqn : tensorOrder) {
            auto it = shapes.find(fqn);
            if (!isKnownBufferName(fqn) && it != shapes.end()) m.stateDictOrdered.emplace_back(fqn, it->second);
        }
    }
    if (params.empty()) {
        for (const auto& fqn : tensorOrder)
            if (!isKnownBufferName(fqn)) params.push_back(fqn);
        m.notes.push_back(
            "parameters from the tensors of " + model.path + under + " in file order (known buffers skipped)");
    }
    if (params.empty())
        throw Error(ErrorKind::Format, model.path,
            "names no model parameters (no tensors under 'model', no FQN-keyed optimizer)");

    // units: the root "" and the given prefixes; each parameter belongs to the longest prefix it is under
    std::vector<std::string> prefixes {""};
    for (const auto& p : unitPrefixes)
        if (!p.empty() && std::find(prefixes.begin(), prefixes.end(), p) == prefixes.end()) prefixes.push_back(p);
    std::map<std::string, Unit> byPrefix;
    std::map<std::string, size_t> firstPosition;
    for (size_t i = 0; i < params.size(); ++i) {
        const std::string& fqn = params[i];
        auto it = shapes.find(fqn);
        if (it == shapes.end()) throw Error(ErrorKind::Format, model.path, "has no shape for parameter '" + fqn + "'");
        std::string best;
        for (const auto& p : prefixes)
            if (underPrefix(fqn, p) && p.size() >= best.size()) best = p;
        byPrefix[best].prefix = best;
        byPrefix[best].params.emplace_back(fqn, it->second);
        m.ordered.emplace_back(fqn, it->second);
        for (const auto& p : prefixes)
            if (underPrefix(fqn, p) && !firstPosition.count(p)) firstPosition[p] = i;
    }
    for (const auto& p : unitPrefixes)
        if (!p.empty() && !firstPosition.count(p))
            throw Error(ErrorKind::Usage, model.path, "no parameter lies under the unit prefix '" + p + "'");
    // flat-parameter order: module pre-order, so a unit comes before the units inside it, and the root first
    std::vector<std::string> order;
    for (const auto& [p, u] : byPrefix)
        order.push_back(p);
    std::sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
        if (a.empty() != b.empty()) return a.empty();
        if (underPrefix(b, a)) return true;
        if (underPrefix(a, b)) return false;
        return firstPosition[a] < firstPosition[b];
    });
    for (const auto& p : order)
        m.units.push_back(std::move(byPrefix[p]));
    return m;
}

bool isOrigParamsRankSlices(
    const OptimizerView& view, const std::vector<std::vector<int64_t>>& shapes, bool keepsAllStateOnFirstParam)
{
    if (!view.idKeyed || view.flattened || view.params.empty() || keepsAllStateOnFirstParam) return false;
    const std::vector<std::string> ids = view.groupParams();
    if (ids.size() != shapes.size()) return false;
    bool sliced = false;
    for (size_t k = 0; k < ids.size(); ++k) {
        const OptimizerParam* p = view.param(ids[k]);
        if (!p) continue;
        int64_t numel = 1;
        for (const int64_t d : shapes[k])
            numel *= d;
        for (const auto& [name, e] : p->states) {
            if (!e->isTensor() || e->tensor->shape.empty()) continue;
            if (e->tensor->shape.size() != 1 || e->tensor->shape[0] > numel) return false;
            sliced = sliced || e->tensor->shape[0] < numel || shapes[k].size() > 1;
        }
    }
    return sliced;
}

namespace {

/// a parameter's state names in FSDP's order (positive-dim tensors, 0-dim, non-tensors), each kind sorted by name
/// (_optim_utils._unflatten_optim_state's sorted_items: RMSprop's grad_avg, momentum_buffer, square_avg, then step)
struct StateNames
{
    std::vector<std::string> tensors, scalars, values;

    static StateNames of(const OptimizerParam& p)
    {
        StateNames n;
        for (const auto& [name, e] : p.states) {
            if (e->isTensor() && !e->tensor->shape.empty())
                n.tensors.push_back(name);
            else if (e->isTensor())
                n.scalars.push_back(name);
            else
                n.values.push_back(name);
        }
        for (auto* names : {&n.tensors, &n.scalars, &n.values})
            std::sort(names->begin(), names->end());
        return n;
    }
};

using OrderedParams = std::vector<std::pair<std::string, std::vector<int64_t>>>;

/// FSDP1's raw per-rank optimizer files into one FQN-keyed optimizer state dict, step by step: the ranks' flat
/// parameter ids, then either the original parameters' slices (use_orig_params=True) or each flat parameter's
/// members (use_orig_params=False), then the param groups
class Fsdp1Unflattener
{
public:
    Fsdp1Unflattener(const std::vector<CheckpointPtr>& ranks, const Fsdp1Model& model)
        : m_ranks(ranks)
        , m_model(model)
        , m_world(static_cast<int>(ranks.size()))
        , m_keep(ranks.size())
    {
        if (ranks.empty()) throw Error(ErrorKind::Usage, {}, "unflatten needs at least one rank file");
        for (size_t r = 0; r < ranks.size(); ++r)
            m_opts.push_back(&rawOptimizer(*ranks[r], m_keep[r]));
        m_flatIds = m_opts[0]->groupParams();
    }

    UnflattenResult run()
    {
        checkSameFlatIds();
        m_result.origParams = m_orig;
        m_result.flatParams = m_orig ? 0 : m_flatIds.size();
        if (m_orig)
            origParamItems();
        else
            for (size_t k = 0; k < m_flatIds.size(); ++k)
                flatParamItems(k);
        paramGroupItems();
        m_result.notes.insert(m_result.notes.begin(), m_model.notes.begin(), m_model.notes.end());
        return std::move(m_result);
    }

private:
    const OptimizerView& o0() const { return *m_opts[0]; }
    const Checkpoint& cp0() const { return *m_ranks[0]; }

    /// every rank lists rank 0's flat parameter ids; their count says which form the files are in
    void checkSameFlatIds()
    {
        for (size_t r = 1; r < m_ranks.size(); ++r)
            if (m_opts[r]->groupParams() != m_flatIds)
                throw Error(ErrorKind::Format, m_ranks[r]->path,
                    "lists flat parameters " + listText(m_opts[r]->groupParams()) + " but rank 0 lists "
                        + listText(m_flatIds));
        const size_t modelParams = m_model.ordered.size();
        // one id per parameter of the model, not one per unit: FSDP1 with use_orig_params=True keeps the original
        // parameters, and each rank's state of a parameter is its slice of the rank's flat shard
        m_orig = m_flatIds.size() != m_model.units.size() && m_flatIds.size() == modelParams;
        if (!m_orig && m_flatIds.size() != m_model.units.size()) {
            std::string units;
            for (const auto& u : m_model.units)
                units += (units.empty() ? "'" : ", '") + u.prefix + "'";
            throw Error(ErrorKind::Format, cp0().path,
                "has " + std::to_string(m_flatIds.size()) + " flat parameters, but the model gives "
                    + std::to_string(m_model.units.size()) + " FSDP units (" + units + ") and "
                    + std::to_string(modelParams)
                    + " parameters; pass the wrapped module prefixes with --units (use_orig_params=False files hold "
                      "one flat parameter per unit, use_orig_params=True files one per parameter)");
        }
    }

    KeyPath path(std::initializer_list<KeyPathElem> rest) const
    {
        KeyPath p = o0().root;
        p.insert(p.end(), rest.begin(), rest.end());
        return p;
    }

    KeyPath statePath(const std::string& fqn, const std::string& name) const
    {
        return path({KeyPathElem::fromKey("state"), KeyPathElem::fromKey(fqn), KeyPathElem::fromKey(name)});
    }

    /// 0-dim and plain state: one value per parameter (flat or original), from the given rank
    void copyScalars(const StateNames& names, const Checkpoint& cp, const OptimizerParam& from, const std::string& fqn)
    {
        for (const auto& name : names.scalars) {
            const Entry* e = from.states.at(name);
            TensorToWrite w;
            w.dtype = e->tensor->dtype;
            w.shape.clear();
            w.produce = [&cp, e](const ByteSink& sink) { TensorAssembler(cp, *e).stream(sink); };
            m_result.tree.setTensor(statePath(fqn, name), std::move(w));
        }
        for (const auto& name : names.values)
            m_result.tree.setValue(statePath(fqn, name), from.states.at(name)->value);
    }

    /// use_orig_params=True, per id: the ranks holding it, and how many elements they hold together
    struct Held
    {
        int first = -1; ///< first rank with state; -1: no state anywhere (never stepped, frozen)
        int64_t numel = 0;
        StateNames names;
    };

    std::vector<Held> heldPerId() const
    {
        std::vector<Held> held(m_flatIds.size());
        for (size_t k = 0; k < m_flatIds.size(); ++k) {
            Held& h = held[k];
            for (int r = 0; r < m_world; ++r) {
                const OptimizerParam* p = m_opts[r]->param(m_flatIds[k]);
                if (!p) continue;
                if (h.first < 0) {
                    h.first = r;
                    h.names = StateNames::of(*p);
                }
                int64_t len = -1;
                for (const auto& name : h.names.tensors) {
                    auto it = p->states.find(name);
                    if (it == p->states.end() || !it->second->isTensor() || it->second->tensor->shape.size() != 1
                        || (len >= 0 && it->second->tensor->shape[0] != len))
                        throw Error(ErrorKind::Format, m_ranks[r]->path,
                            "parameter " + m_flatIds[k] + " has no 1-D tensor '" + name
                                + "' of the length its other states have, as use_orig_params=True files hold");
                    len = it->second->tensor->shape[0];
                }
                h.numel += std::max<int64_t>(len, 0);
            }
        }
        return held;
    }

    /// why the ids cannot follow @p order: some parameter has not the elements the ranks hold of its id
    std::string orderMismatch(const OrderedParams& order, const std::vector<Held>& held) const
    {
        if (order.size() != m_flatIds.size()) return "the model has " + std::to_string(order.size()) + " parameters";
        for (size_t k = 0; k < order.size(); ++k) {
            int64_t numel = 1;
            for (const int64_t d : order[k].second)
                numel *= d;
            if (held[k].first < 0 || held[k].names.tensors.empty() || held[k].numel == numel) continue;
            std::ostringstream msg;
            msg << "parameter " << m_flatIds[k] << " holds " << held[k].numel << " elements over the " << m_world
                << " rank files, but parameter " << k << " of the model, '" << order[k].first << "' "
                << shapeText(order[k].second) << ", has " << numel;
            return msg.str();
        }
        return {};
    }

    /// use_orig_params=True: the ranks' 1-D slices in rank order are the flattened parameter. The ids follow the
    /// model's own order, or the model state dict's key order (an optimizer's param_groups in the model file may
    /// list them in FSDP1's flat order)
    void origParamItems()
    {
        const std::vector<Held> held = heldPerId();
        m_origOrder = &m_model.ordered;
        std::string why = orderMismatch(m_model.ordered, held);
        if (!why.empty() && !m_model.stateDictOrdered.empty()
            && orderMismatch(m_model.stateDictOrdered, held).empty()) {
            m_origOrder = &m_model.stateDictOrdered;
            why.clear();
            m_result.notes.push_back("parameter ids paired with the model state dict's parameters in its key order");
        }
        if (!why.empty())
            throw Error(ErrorKind::Format, cp0().path,
                why
                    + ": the optimizer does not list the parameters in the model's order (param groups in another "
                      "order?), or rank files are missing");

        for (size_t k = 0; k < m_flatIds.size(); ++k) {
            const Held& h = held[k];
            if (h.first < 0) continue;
            const auto& [fqn, shape] = (*m_origOrder)[k];
            const OptimizerParam& first = *m_opts[h.first]->param(m_flatIds[k]);
            ++m_result.params;
            for (const auto& name : h.names.tensors) {
                TensorToWrite w;
                w.dtype = first.states.at(name)->tensor->dtype;
                w.shape = shape;
                std::vector<std::pair<const Checkpoint*, const Entry*>> sources;
                for (int r = 0; r < m_world; ++r)
                    if (const OptimizerParam* p = m_opts[r]->param(m_flatIds[k]))
                        sources.push_back({m_ranks[r].get(), p->states.at(name)});
                w.produce = [sources](const ByteSink& sink) {
                    for (const auto& [cp, e] : sources)
                        TensorAssembler(*cp, *e).stream(sink);
                };
                m_result.tree.setTensor(statePath(fqn, name), std::move(w));
            }
            copyScalars(h.names, *m_ranks[h.first], first, fqn);
        }
    }

    /// use_orig_params=False: every rank must hold a padded 1-D shard of exactly layout.shardNumel elements
    std::vector<const OptimizerParam*> checkedShards(
        size_t k, const FlatParamLayout& layout, const std::vector<std::string>& tensorNames) const
    {
        const Fsdp1Model::Unit& unit = m_model.units[k];
        std::vector<const OptimizerParam*> perRank;
        for (int r = 0; r < m_world; ++r) {
            const OptimizerParam* p = m_opts[r]->param(m_flatIds[k]);
            if (!p)
                throw Error(ErrorKind::Format, m_ranks[r]->path,
                    "has no state for flat parameter " + m_flatIds[k] + " but rank 0 does");
            for (const auto& name : tensorNames) {
                auto it = p->states.find(name);
                if (it == p->states.end() || !it->second->isTensor())
                    throw Error(ErrorKind::Format, m_ranks[r]->path,
                        "flat parameter " + m_flatIds[k] + " has no tensor '" + name + "'");
                const TensorEntry& t = *it->second->tensor;
                if (t.shape.size() != 1 || t.shape[0] != layout.shardNumel) {
                    std::vector<std::string> members;
                    for (const auto& pr : unit.params)
                        members.push_back(pr.first);
                    std::ostringstream msg;
                    msg << "flat parameter " << m_flatIds[k] << " state '" << name << "' is " << shapeText(t.shape)
                        << " on this rank, but unit '" << unit.prefix << "' of the model has " << layout.unpaddedNumel
                        << " elements in " << unit.params.size() << " parameters (" << listText(members)
                        << "), which shard to [" << layout.shardNumel << "] on " << m_world
                        << " ranks; check --units and the number of rank files";
                    throw Error(ErrorKind::Format, m_ranks[r]->path, msg.str());
                }
            }
            perRank.push_back(p);
        }
        return perRank;
    }

    /// use_orig_params=False: flat parameter @p k's layout; each member's state is its range of the padded shards
    void flatParamItems(size_t k)
    {
        const FlatParamLayout layout = FlatParamLayout::compute(m_model.units[k].params, m_world, 0);
        const OptimizerParam* state0 = o0().param(m_flatIds[k]);
        if (!state0) return; // never stepped (frozen unit): no state, as get_state_dict reports it
        const StateNames names = StateNames::of(*state0);
        const std::vector<const OptimizerParam*> perRank = checkedShards(k, layout, names.tensors);
        for (const auto& member : layout.members) {
            ++m_result.params;
            for (const auto& name : names.tensors) {
                TensorToWrite w;
                w.dtype = state0->states.at(name)->tensor->dtype;
                w.shape = member.shape;
                std::vector<std::pair<const Checkpoint*, const Entry*>> sources;
                for (int r = 0; r < m_world; ++r)
                    sources.push_back({m_ranks[r].get(), perRank[r]->states.at(name)});
                const int64_t off = member.offset;
                const int64_t numel = member.numel;
                const int64_t C = layout.shardNumel;
                w.produce = [sources, off, numel, C](const ByteSink& sink) {
                    // the member's elements, from the ranks whose shards cover them
                    for (int64_t pos = off; pos < off + numel;) {
                        const int64_t r = pos / C;
                        const int64_t end = std::min(off + numel, (r + 1) * C);
                        const auto& [cp, e] = sources[static_cast<size_t>(r)];
                        TensorAssembler(*cp, *e).streamBox({pos - r * C}, {end - pos}, sink);
                        pos = end;
                    }
                };
                m_result.tree.setTensor(statePath(member.fqn, name), std::move(w));
            }
            copyScalars(names, cp0(), *state0, member.fqn); // rank 0's, as FSDP does
        }
    }

    /// the FQNs an id of param_groups stands for
    std::vector<std::string> fqnsOf(size_t pos) const
    {
        std::vector<std::string> f;
        if (m_orig)
            f.push_back((*m_origOrder)[pos].first);
        else
            for (const auto& pr : m_model.units[pos].params)
                f.push_back(pr.first);
        return f;
    }

    /// param_groups: rank 0's fields in file order, "params" (and "param_names") as the FQNs the group's ids stand
    /// for
    void paramGroupItems()
    {
        m_result.arena = std::make_shared<PyArena>();
        const OptimizerView& o = o0();
        for (size_t g = 0; g < o.groups.size(); ++g) {
            const auto gi = static_cast<int64_t>(g);
            const KeyPath groupPath = path({KeyPathElem::fromKey("param_groups"), KeyPathElem::fromIndex(gi)});
            PyValue* fqns = m_result.arena->makeContainer(PyKind::List);
            for (const auto& id : o.groups[g].params) {
                const auto pos = std::find(m_flatIds.begin(), m_flatIds.end(), id) - m_flatIds.begin();
                for (const auto& fqn : fqnsOf(static_cast<size_t>(pos)))
                    fqns->container->items.push_back(m_result.arena->makeStr(fqn, true));
            }
            for (const Entry& e : cp0().entries) {
                if (e.path.size() < groupPath.size() + 1
                    || !std::equal(groupPath.begin(), groupPath.end(), e.path.begin()))
                    continue;
                KeyPath p = groupPath;
                p.insert(p.end(), e.path.begin() + static_cast<std::ptrdiff_t>(groupPath.size()), e.path.end());
                const std::string_view field = e.path[groupPath.size()].key;
                if (field == "params" || field == "param_names") {
                    m_result.tree.setValue(p, fqns);
                    continue;
                }
                if (e.isTensor())
                    throw Error(ErrorKind::Unsupported, cp0().path,
                        "a tensor-valued hyperparameter ('" + e.key + "') cannot be unflattened");
                m_result.tree.setValue(p, e.value);
            }
        }
    }

    const std::vector<CheckpointPtr>& m_ranks;
    const Fsdp1Model& m_model;
    const int m_world;
    std::vector<std::vector<OptimizerView>> m_keep; ///< each rank's optimizers, which m_opts point into
    std::vector<const OptimizerView*> m_opts;
    std::vector<std::string> m_flatIds; ///< flat parameter ids in the order rank 0's optimizer lists them
    bool m_orig = false; ///< use_orig_params=True: one id per model parameter
    const OrderedParams* m_origOrder = nullptr; ///< m_orig: the order of the model's parameters the ids follow
    UnflattenResult m_result;
};

} // namespace

UnflattenResult unflattenFsdp1(const std::vector<CheckpointPtr>& ranks, const Fsdp1Model& model)
{
    return Fsdp1Unflattener(ranks, model).run();
}

namespace {

/// elements [begin, end) of the row-major tensor, streamed (the rest of the tensor is read and skipped)
void streamFlatRange(const Checkpoint& cp, const Entry& e, int64_t begin, int64_t end, const ByteSink& sink)
{
    const size_t elem = dtypeSize(e.tensor->dtype);
    const uint64_t lo = static_cast<uint64_t>(begin) * elem;
    const uint64_t hi = static_cast<uint64_t>(end) * elem;
    uint64_t pos = 0;
    TensorAssembler(cp, e).stream([&](const uint8_t* p, size_t n) {
        const uint64_t a = std::max(pos, lo);
        const uint64_t b = std::min(pos + n, hi);
        if (a < b) sink(p + (a - pos), static_cast<size_t>(b - a));
        pos += n;
    });
}

void zeros(const ByteSink& sink, uint64_t bytes)
{
    static const uint8_t z[4096] = {};
    while (bytes > 0) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes, sizeof z));
        sink(z, n);
        bytes -= n;
    }
}

std::string valuesText(const std::vector<std::string>& v)
{
    std::string t = "{";
    std::set<std::string> uniq(v.begin(), v.end());
    for (const auto& x : uniq)
        t += (t.size() > 1 ? ", " : "") + x;
    return t + "}";
}

} // namespace

namespace {

/// One FSDP1 flat parameter (unit) being written: its layout over the ranks, its members' optimizer state (null for a
/// member without state) and FQNs, and the path of its state in the flattened optimizer
struct FlatUnit
{
    FlatParamLayout layout;
    std::vector<const OptimizerParam*> members;
    std::vector<std::string> fqns;
    KeyPath statePath; ///< <root>.state.<flat id>
};

/// the state names every member with state has, the same for all (FSDP1's own check, its text); empty: none has state
std::vector<std::string> unitStateNames(const Checkpoint& full, const FlatUnit& unit)
{
    std::vector<std::string> names;
    for (const auto* p : unit.members) {
        if (!p) continue;
        std::vector<std::string> n;
        for (const auto& [name, e] : p->states)
            n.push_back(name);
        if (names.empty())
            names = n;
        else if (names != n)
            throw Error(ErrorKind::Format, full.path,
                "Differing optimizer state names for the unflattened parameters: " + listText(unit.fqns, 64));
    }
    return names;
}

/// a positive-dim tensor state: the members' tensors concatenated in flat order, a member without state as zeros,
/// cut into the ranks' shards with FSDP's right padding
void flattenTensorState(const Checkpoint& full, const FlatUnit& unit, const std::string& name, const Entry& first,
    int W, std::vector<StateTree>& ranks)
{
    for (const auto* m : unit.members)
        if (m && (!m->states.at(name)->isTensor() || m->states.at(name)->tensor->dtype != first.tensor->dtype))
            throw Error(ErrorKind::Format, full.path,
                "All unflattened parameters comprising a single flat parameter must have positive-dimension "
                "tensor state with the same dtype for state "
                    + name + " and unflattened parameter names " + listText(unit.fqns, 64));
    const DType dtype = first.tensor->dtype;
    const size_t elem = dtypeSize(dtype);
    std::vector<std::pair<const Entry*, FlatParamLayout::Member>> parts;
    for (size_t i = 0; i < unit.members.size(); ++i)
        parts.push_back({unit.members[i] ? unit.members[i]->states.at(name) : nullptr, unit.layout.members[i]});
    for (int r = 0; r < W; ++r) {
        TensorToWrite w;
        w.dtype = dtype;
        w.shape.assign(1, unit.layout.shardNumel);
        const int64_t start = unit.layout.rankStart(r);
        const int64_t stop = start + unit.layout.shardNumel;
        w.produce = [&full, parts, start, stop, elem](const ByteSink& sink) {
            int64_t pos = start;
            for (const auto& [e, m] : parts) {
                const int64_t a = std::max(pos, m.offset);
                const int64_t b = std::min(stop, m.offset + m.numel);
                if (a >= b) continue;
                zeros(sink, static_cast<uint64_t>(a - pos) * elem);
                if (e)
                    streamFlatRange(full, *e, a - m.offset, b - m.offset, sink);
                else
                    zeros(sink, static_cast<uint64_t>(b - a) * elem);
                pos = b;
            }
            zeros(sink, static_cast<uint64_t>(stop - pos) * elem);
        };
        KeyPath p = unit.statePath;
        p.push_back(KeyPathElem::fromKey(name));
        ranks[static_cast<size_t>(r)].setTensor(p, std::move(w));
    }
}

/// a 0-dim tensor or plain value state: one value per flat parameter, which all its members must share (FSDP1's own
/// check, its text), on every rank
void flattenScalarState(const Checkpoint& full, const FlatUnit& unit, const std::string& name, const Entry& first,
    int W, std::vector<StateTree>& ranks)
{
    std::vector<std::string> values, dtypes;
    for (const auto* m : unit.members) {
        if (!m) continue;
        const Entry* e = m->states.at(name);
        if (e->isTensor()) {
            const auto x = readScalar(full, *e);
            std::ostringstream os;
            os << (x ? *x : 0.0);
            values.push_back(os.str());
            dtypes.push_back("torch." + std::string(dtypeName(e->tensor->dtype)));
        } else {
            values.push_back(pyRepr(e->value, 60));
        }
    }
    if (std::set<std::string>(values.begin(), values.end()).size() > 1
        || std::set<std::string>(dtypes.begin(), dtypes.end()).size() > 1)
        throw Error(ErrorKind::Format, full.path,
            "All unflattened parameters comprising a single flat parameter must have scalar state with the same "
            "value and dtype but got values "
                + valuesText(values) + " and dtypes " + valuesText(dtypes) + " for state " + name
                + " and unflattened parameter names " + listText(unit.fqns, 64));
    for (int r = 0; r < W; ++r) {
        KeyPath p = unit.statePath;
        p.push_back(KeyPathElem::fromKey(name));
        if (first.isTensor()) {
            TensorToWrite w;
            w.dtype = first.tensor->dtype;
            const Entry* one = &first;
            w.produce = [&full, one](const ByteSink& sink) { TensorAssembler(full, *one).stream(sink); };
            ranks[static_cast<size_t>(r)].setTensor(p, std::move(w));
        } else {
            ranks[static_cast<size_t>(r)].setValue(p, first.value);
        }
    }
}

/// param_groups: the same hyperparameters; params as the flat-parameter ids of the group's units
void flattenParamGroups(const Checkpoint& full, const OptimizerView& v, const std::map<std::string, size_t>& unitOf,
    const std::vector<PyValue*>& ids, PyArena& arena, std::vector<StateTree>& ranks)
{
    for (size_t g = 0; g < v.groups.size(); ++g) {
        const auto gi = static_cast<int64_t>(g);
        KeyPath groupPath = v.root;
        groupPath.push_back(KeyPathElem::fromKey("param_groups"));
        groupPath.push_back(KeyPathElem::fromIndex(gi));
        PyValue* flatIds = arena.makeContainer(PyKind::List);
        std::set<size_t> added;
        for (const auto& fqn : v.groups[g].params) {
            auto it = unitOf.find(fqn);
            if (it == unitOf.end())
                throw Error(
                    ErrorKind::Format, full.path, "param_groups names '" + fqn + "', which the model does not have");
            if (added.insert(it->second).second) flatIds->container->items.push_back(ids[it->second]);
        }
        for (const Entry& e : full.entries) {
            if (e.path.size() < groupPath.size() + 1 || !std::equal(groupPath.begin(), groupPath.end(), e.path.begin()))
                continue;
            KeyPath p = groupPath;
            p.insert(p.end(), e.path.begin() + static_cast<std::ptrdiff_t>(groupPath.size()), e.path.end());
            const std::string_view field = e.path[groupPath.size()].key;
            if (field == "param_names") continue; // names of original parameters mean nothing for flat parameters
            for (auto& tree : ranks)
                tree.setValue(p, field == "params" ? flatIds : e.value);
        }
    }
}

} // namespace

FlattenResult flattenFsdp1(const Checkpoint& full, const Fsdp1Model& model, int W)
{
    if (W < 1) throw Error(ErrorKind::Usage, full.path, "world size must be at least 1");
    const auto views = findOptimizers(full);
    if (views.empty()) throw Error(ErrorKind::Format, full.path, "holds no optimizer state dict");
    const OptimizerView& v = views.front();
    if (v.idKeyed || v.flattened)
        throw Error(ErrorKind::Format, full.path, "flatten needs a nested optimizer state keyed by parameter FQNs");
    FlattenResult out;
    out.arena = std::make_shared<PyArena>();
    out.ranks.resize(static_cast<size_t>(W));

    // which flat parameter (unit) each FQN belongs to, and each unit's id
    std::map<std::string, size_t> unitOf;
    for (size_t k = 0; k < model.units.size(); ++k)
        for (const auto& [fqn, shape] : model.units[k].params)
            unitOf[fqn] = k;
    std::vector<PyValue*> ids;
    for (size_t k = 0; k < model.units.size(); ++k)
        ids.push_back(out.arena->makeInt(static_cast<int64_t>(k)));

    for (size_t k = 0; k < model.units.size(); ++k) {
        FlatUnit unit;
        unit.layout = FlatParamLayout::compute(model.units[k].params, W, 0);
        for (const auto& [fqn, shape] : model.units[k].params) {
            unit.fqns.push_back(fqn);
            unit.members.push_back(v.param(fqn));
        }
        unit.statePath = v.root;
        unit.statePath.push_back(KeyPathElem::fromKey("state"));
        KeyPathElem id = KeyPathElem::fromKey(std::to_string(k));
        id.keyValue = ids[k];
        unit.statePath.push_back(id);
        for (const auto& name : unitStateNames(full, unit)) {
            const Entry* first = nullptr;
            for (const auto* m : unit.members)
                if (m && !first) first = m->states.at(name);
            if (first->isTensor() && !first->tensor->shape.empty())
                flattenTensorState(full, unit, name, *first, W, out.ranks);
            else
                flattenScalarState(full, unit, name, *first, W, out.ranks);
        }
    }
    flattenParamGroups(full, v, unitOf, ids, *out.arena, out.ranks);
    return out;
}

} // namespace optscope
