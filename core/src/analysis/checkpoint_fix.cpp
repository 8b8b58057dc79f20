// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/checkpoint_fix.h"
#include "optscope/analysis/reshard.h"
#include "optscope/base/error.h"
#include "optscope/formats/dcp/dcp_writer.h"
#include "optscope/formats/format_registry.h"
#include "optscope/model/read_guard.h"
#include "optscope/optim/optimizer_view.h"
#include "optscope/optim/param_table.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_values.h"

#include <cstring>
#include <functional>
#include <map>
#include <set>

namespace optscope {

namespace {

/// what to do to one optimizer state dict
struct OptimizerRewrite
{
    const OptimizerView* view = nullptr;
    std::map<std::string, std::string> rekey; ///< integer id -> FQN (rekey-ids)
    std::map<std::string, std::string> rename; ///< parameter name -> new name (state keys, params, param_names)
    bool toNested = false;
    std::vector<std::vector<std::string>> nestedGroups; ///< toNested: each group's parameters (the target's grouping)
    bool castStep = false;
};

/// One output item: an entry moved to a new path, possibly with a replaced value or a converted tensor.
struct Item
{
    KeyPath path;
    const Entry* source = nullptr; ///< tensor or value entry
    const PyValue* value = nullptr; ///< replacement value (lists of renamed params), or the entry's value
    bool castToFloat32 = false; ///< step: written as a 0-dim float32 tensor
};

bool startsWith(const KeyPath& path, const KeyPath& prefix)
{
    return path.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), path.begin());
}

KeyPathElem key(const std::string& s)
{
    return KeyPathElem::fromKey(s);
}

} // namespace

UserRename UserRename::parse(const std::string& text)
{
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size() || text.find('=', eq + 1) != std::string::npos)
        throw Error(
            ErrorKind::Usage, "--rename", "expects OLD=NEW (a parameter name or a module prefix), got '" + text + "'");
    return {text.substr(0, eq), text.substr(eq + 1)};
}

std::optional<std::string> UserRename::apply(const std::string& name) const
{
    if (name == from) return to;
    if (name.size() > from.size() && name.compare(0, from.size(), from) == 0 && name[from.size()] == '.')
        return to + name.substr(from.size());
    return std::nullopt;
}

namespace {

/// The fix of one checkpoint, step by step: what each finding's actions and the user's renames ask for
/// (rewrites), the output items each optimizer part becomes, every entry in file order, then the writer
class FixWriter
{
public:
    FixWriter(const Checkpoint& cp, const std::string& output)
        : m_cp(cp)
        , m_views(findOptimizers(cp))
        , m_modelPart(ModelParams::modelPartOf(cp))
    {
        m_result.output = output;
        m_rewrites.resize(m_views.size());
        for (size_t i = 0; i < m_views.size(); ++i)
            m_rewrites[i].view = &m_views[i];
    }

    FixResult run(const Diagnosis& diagnosis, const std::vector<UserRename>& userRenames, const Progress& progress,
        WriteOptions options)
    {
        refuseNothingToDo(diagnosis, userRenames);
        takeDiagnosisActions(diagnosis);
        for (const auto& u : userRenames)
            takeUserRename(u);
        // a format that counts steps per param group (Megatron's) keeps them as Python numbers, which diagnose
        // accepts there; written out as a torch.save file of per-parameter state they would be the step-dtype that
        // torch's optimizers do not count on, so they become 0-dim float32 tensors, as reshard writes them
        if (!fixWritesDcpFolder(m_cp) && formatInfo(m_cp.format).stepsPerParamGroup)
            for (auto& r : m_rewrites)
                r.castStep = true;
        for (const auto& r : m_rewrites)
            optimizerItems(r);
        const std::vector<Item> ordered = inFileOrder();
        refuseCollisions(ordered);
        if (fixWritesDcpFolder(m_cp))
            writeDcpFolder(ordered, progress, options);
        else
            writeTorchSave(ordered, progress, options);
        return m_result;
    }

private:
    void refuseNothingToDo(const Diagnosis& diagnosis, const std::vector<UserRename>& userRenames) const
    {
        if (diagnosis.fixable() || !userRenames.empty()) return;
        for (const auto& f : diagnosis.findings)
            if (f.code == FindingCode::FlattenedFormat)
                throw Error(ErrorKind::Usage, m_cp.path,
                    "the diagnosis proposes nothing that can be applied mechanically: converting the flattened "
                    "optimizer needs the param groups of the optimizer that loads it, which the format does not "
                    "store; give the target optimizer (--target-optim)");
        throw Error(ErrorKind::Usage, m_cp.path, "the diagnosis proposes nothing that can be applied mechanically");
    }

    /// each finding's actions go to the optimizer it is about (its root key) or to the model part
    void takeDiagnosisActions(const Diagnosis& diagnosis)
    {
        for (const auto& f : diagnosis.findings) {
            if (f.actions.empty()) continue;
            for (const auto& a : f.actions)
                if (a.kind == FixAction::Kind::RenameModelKey) m_modelRename[a.from] = a.to;
            for (auto& r : m_rewrites) {
                if (r.view->rootKey() != f.key) continue;
                for (const auto& a : f.actions) {
                    if (a.kind == FixAction::Kind::RenameParam)
                        r.rename[a.from] = a.to;
                    else if (a.kind == FixAction::Kind::RekeyIds)
                        r.rekey[a.from] = a.to;
                    else if (a.kind == FixAction::Kind::UnflattenFormat) {
                        r.toNested = true;
                        r.nestedGroups = a.paramGroups;
                    } else if (a.kind == FixAction::Kind::CastStep)
                        r.castStep = true;
                }
            }
            m_result.applied.push_back(std::string(f.name()) + ": "
                + (f.actions.size() == 1 ? f.actions[0].description : std::to_string(f.actions.size()) + " changes"));
        }
    }

    /// a user's rename: every name of every optimizer, and the model part's keys
    void takeUserRename(const UserRename& u)
    {
        std::set<std::string> matched; // names the rename applies to (also when the diagnosis proposed it already)
        for (auto& r : m_rewrites) {
            std::vector<std::string> names = r.view->groupParams();
            for (const auto& g : r.view->groups)
                names.insert(names.end(), g.paramNames.begin(), g.paramNames.end());
            for (const auto& p : r.view->params)
                names.push_back(p.key);
            for (const auto& n : names)
                if (auto to = u.apply(n)) {
                    r.rename.emplace(n, *to);
                    matched.insert(n);
                }
        }
        if (m_modelPart && !m_modelPart->root.empty())
            for (const auto* list : {&m_modelPart->fqns, &m_modelPart->buffers})
                for (const auto& k : *list)
                    if (auto to = u.apply(k)) {
                        m_modelRename.emplace(k, *to);
                        matched.insert("model:" + k);
                    }
        const size_t hits = matched.size();
        if (!hits)
            throw Error(ErrorKind::Usage, m_cp.path,
                "--rename " + u.from + "=" + u.to + ": no parameter is named '" + u.from + "' or starts with '" + u.from
                    + ".'");
        m_result.applied.push_back("rename: '" + u.from + "' -> '" + u.to + "' (" + std::to_string(hits) + " names)");
    }

    /// a parameter's new name (rekeyed, then renamed), counting each renamed key once
    std::string renamed(const OptimizerRewrite& r, const std::string& k, std::set<std::string>& renamedOnce)
    {
        std::string n = k;
        if (auto it = r.rekey.find(n); it != r.rekey.end()) n = it->second;
        if (auto it = r.rename.find(n); it != r.rename.end()) n = it->second;
        if (n != k && renamedOnce.insert(k).second) ++m_result.renamedKeys;
        return n;
    }

    void optimizerItems(const OptimizerRewrite& r)
    {
        std::set<std::string> renamedOnce;
        stateItems(r, renamedOnce);
        const OptimizerView& v = *r.view;
        if (v.flattened && !r.toNested)
            flatHyperparamItems(r, renamedOnce);
        else if (v.flattened)
            unflattenedGroupItems(r, renamedOnce);
        else
            nestedGroupItems(r, renamedOnce);
    }

    void stateItems(const OptimizerRewrite& r, std::set<std::string>& renamedOnce)
    {
        const OptimizerView& v = *r.view;
        for (const auto& p : v.params) {
            const std::string newKey = renamed(r, p.key, renamedOnce);
            for (const auto& [name, e] : p.states) {
                Item it;
                it.source = e;
                it.value = e->isTensor() ? nullptr : e->value;
                it.castToFloat32 = r.castStep && name == "step";
                if (v.flattened && !r.toNested) {
                    it.path = v.root;
                    it.path.push_back(key("state." + newKey + "." + name));
                } else {
                    it.path = v.root;
                    it.path.push_back(key("state"));
                    it.path.push_back(key(newKey));
                    if (!v.flattened && p.key == newKey) {
                        // keep the original key object (integer ids stay integers)
                        const KeyPath& old = e->path;
                        it.path.back() = old[v.root.size() + 1];
                    }
                    // nested state names (rarely deeper than one level)
                    size_t start = v.flattened ? 0 : v.root.size() + 2;
                    if (v.flattened)
                        it.path.push_back(key(name));
                    else
                        for (size_t k = start; k < e->path.size(); ++k)
                            it.path.push_back(e->path[k]);
                }
                m_items.push_back(std::move(it));
                m_handled.insert(e);
            }
        }
    }

    /// a list of parameter names (renamed), or of integer ids where they stay ids
    PyValue* paramList(const OptimizerRewrite& r, const std::vector<std::string>& keys, bool asInts,
        std::set<std::string>& renamedOnce)
    {
        PyValue* l = m_arena->makeContainer(PyKind::List);
        for (const auto& k : keys) {
            const std::string n = renamed(r, k, renamedOnce);
            if (asInts && n == k)
                l->container->items.push_back(m_arena->makeInt(std::stoll(k)));
            else
                l->container->items.push_back(m_arena->makeStr(n, true));
        }
        return l;
    }

    /// stays flattened: every parameter's hyperparameter entries, renamed
    void flatHyperparamItems(const OptimizerRewrite& r, std::set<std::string>& renamedOnce)
    {
        const OptimizerView& v = *r.view;
        for (const auto& [fqn, hps] : v.flatParamHyperparams)
            for (const auto& [field, e] : hps) {
                Item it;
                it.path = v.root;
                it.path.push_back(key("param_groups." + renamed(r, fqn, renamedOnce) + "." + field));
                it.source = e;
                it.value = e->value;
                m_items.push_back(std::move(it));
                m_handled.insert(e);
            }
    }

    /// to the nested format, grouped as the loading code's optimizer groups them (the diagnosis takes it from the
    /// target optimizer; the format stores no grouping, and a guessed one does not load). As DSD's
    /// _unflatten_optim_state_dict, a group's first parameter's hyperparameters stand for the group
    void unflattenedGroupItems(const OptimizerRewrite& r, std::set<std::string>& renamedOnce)
    {
        const OptimizerView& v = *r.view;
        std::map<std::string, const std::map<std::string, const Entry*>*> hyperparamsOf;
        for (const auto& [fqn, hps] : v.flatParamHyperparams)
            hyperparamsOf.emplace(fqn, &hps);
        if (r.nestedGroups.empty())
            throw Error(ErrorKind::Usage, m_cp.path,
                "converting the flattened optimizer needs its param groups: give the target optimizer "
                "(--target-optim)");
        for (size_t g = 0; g < r.nestedGroups.size(); ++g) {
            const auto& params = r.nestedGroups[g];
            const auto first = params.empty() ? hyperparamsOf.end() : hyperparamsOf.find(params.front());
            if (first == hyperparamsOf.end())
                throw Error(ErrorKind::Format, m_cp.path,
                    "param group " + std::to_string(g) + " of the target optimizer holds "
                        + (params.empty() ? std::string("no parameter") : "'" + params.front() + "'")
                        + ", which has no hyperparameters in " + v.rootKey());
            KeyPath gp = v.root;
            gp.push_back(key("param_groups"));
            gp.push_back(KeyPathElem::fromIndex(static_cast<int64_t>(g)));
            for (const auto& [field, e] : *first->second) {
                Item it;
                it.path = gp;
                it.path.push_back(key(field));
                it.source = e;
                it.value = e->value;
                m_items.push_back(std::move(it));
            }
            Item it;
            it.path = gp;
            it.path.push_back(key("params"));
            it.value = paramList(r, params, false, renamedOnce);
            m_items.push_back(std::move(it));
        }
        for (const auto& [fqn, hps] : v.flatParamHyperparams)
            for (const auto& [field, e] : hps)
                m_handled.insert(e);
    }

    /// nested output: every field of each group, in file order; params (and param_names) rewritten
    void nestedGroupItems(const OptimizerRewrite& r, std::set<std::string>& renamedOnce)
    {
        const OptimizerView& v = *r.view;
        for (size_t g = 0; g < v.groups.size(); ++g) {
            const OptimizerGroup& group = v.groups[g];
            const bool idsStay = v.idKeyed && r.rekey.empty();
            KeyPath gp = v.root;
            gp.push_back(key("param_groups"));
            gp.push_back(KeyPathElem::fromIndex(static_cast<int64_t>(g)));
            std::vector<const Entry*> fields;
            for (const Entry& en : m_cp.entries)
                if (startsWith(en.path, gp) && en.path.size() > gp.size()) fields.push_back(&en);
            for (const Entry* en : fields) {
                Item it;
                it.path = en->path;
                it.source = en;
                it.value = en->value;
                const std::string_view field = en->path[gp.size()].key;
                if (field == "params")
                    it.value = paramList(r, group.params, idsStay, renamedOnce);
                else if (field == "param_names")
                    it.value = paramList(r, group.paramNames, false, renamedOnce);
                m_items.push_back(std::move(it));
                m_handled.insert(en);
            }
        }
    }

    /// everything else, unchanged (the model part's keys renamed), in file order; optimizer parts stay where they
    /// were in the order
    std::vector<Item> inFileOrder()
    {
        std::vector<Item> ordered;
        std::map<const Entry*, std::vector<Item*>> byEntry;
        std::vector<Item*> synthetic;
        for (auto& it : m_items) {
            if (it.source)
                byEntry[it.source].push_back(&it);
            else
                synthetic.push_back(&it);
        }
        std::set<const Item*> placed;
        for (const Entry& e : m_cp.entries) {
            if (!m_handled.count(&e)) {
                Item it;
                it.path = e.path;
                if (m_modelPart && !m_modelPart->root.empty() && e.path.size() == m_modelPart->root.size() + 1
                    && std::equal(m_modelPart->root.begin(), m_modelPart->root.end(), e.path.begin()))
                    if (auto mr = m_modelRename.find(e.path.back().key.str()); mr != m_modelRename.end()) {
                        it.path.back() = key(mr->second);
                        ++m_result.renamedKeys;
                    }
                it.source = &e;
                it.value = e.isTensor() ? nullptr : e.value;
                ordered.push_back(std::move(it));
                continue;
            }
            for (Item* it : byEntry[&e])
                if (placed.insert(it).second) ordered.push_back(*it);
        }
        for (Item* it : synthetic)
            ordered.push_back(*it);
        return ordered;
    }

    /// two entries the renames would put at one key
    void refuseCollisions(const std::vector<Item>& ordered) const
    {
        std::set<std::string> keys;
        for (const auto& it : ordered)
            if (!keys.insert(joinKeyPath(it.path)).second)
                throw Error(
                    ErrorKind::Format, m_cp.path, "the fix would write two entries at '" + joinKeyPath(it.path) + "'");
    }

    std::function<void(const ByteSink&)> stepProducer(const Entry* e) const
    {
        return [&cp = m_cp, e](const ByteSink& sink) {
            writeFloat32Scalar(static_cast<float>(readScalar(cp, *e).value_or(0.0)), sink);
        };
    }

    void writeTorchSave(const std::vector<Item>& ordered, const Progress& progress, WriteOptions options) const
    {
        StateTree tree;
        for (const auto& it : ordered) {
            if (it.source && it.source->isTensor() && !it.castToFloat32) {
                TensorToWrite w;
                w.dtype = it.source->tensor->dtype;
                w.shape = it.source->tensor->shape;
                const Entry* e = it.source;
                w.produce = [&cp = m_cp, e](const ByteSink& sink) { TensorAssembler(cp, *e).stream(sink); };
                tree.setTensor(it.path, std::move(w));
            } else if (it.castToFloat32) {
                TensorToWrite w;
                w.dtype = DType::Float32;
                w.produce = stepProducer(it.source);
                tree.setTensor(it.path, std::move(w));
            } else {
                tree.setValue(it.path, it.value);
            }
        }
        TorchSaveWriter::write(tree, m_result.output, progress, options);
    }

    void writeDcpFolder(const std::vector<Item>& ordered, const Progress& progress, WriteOptions options) const
    {
        const Checkpoint& cp = m_cp;
        DcpPlan plan;
        // a companion file (Fabric's meta.pt) is copied as it is, as reshard does, and its entries stay out of the
        // DCP part
        for (const auto& c : cp.companionFiles)
            plan.copies.push_back({c.file, cp.files->open(c.file)});
        for (const auto& it : ordered) {
            if (it.source && cp.companionOf(*it.source)) {
                if (m_handled.count(it.source) || !(it.path == it.source->path))
                    throw Error(ErrorKind::Format, cp.path,
                        "the fix would change '" + it.source->key + "' of " + cp.companionOf(*it.source)->file
                            + ", which is copied as it is; fix that file on its own");
                continue;
            }
            if (it.source && it.source->isTensor() && !it.castToFloat32) {
                DcpPlan::Tensor t;
                t.path = it.path;
                t.dtype = it.source->tensor->dtype;
                t.shape = it.source->tensor->shape;
                const Entry* e = it.source;
                const ChunkTable& from = e->tensor->chunks;
                for (size_t c = 0; c < from.size(); ++c)
                    t.chunks.appendBox(
                        std::max(0, from.rank(c)), from.offsetsOf(c).begin(), from.sizesOf(c).begin(), from.ndim(c));
                t.produce = [&cp, e](const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes,
                                const ByteSink& sink) { TensorAssembler(cp, *e).streamBox(offsets, sizes, sink); };
                plan.order.push_back({true, plan.tensors.size()});
                plan.tensors.push_back(std::move(t));
            } else if (it.castToFloat32) {
                DcpPlan::Tensor t;
                t.path = it.path;
                t.dtype = DType::Float32;
                t.addChunk(0, {}, {});
                t.produce = [step = stepProducer(it.source)](const std::vector<int64_t>&, const std::vector<int64_t>&,
                                const ByteSink& sink) { step(sink); };
                plan.order.push_back({true, plan.tensors.size()});
                plan.tensors.push_back(std::move(t));
            } else {
                plan.order.push_back({false, plan.values.size()});
                plan.values.push_back({it.path, it.value, 0, {},
                    it.source && it.value == it.source->value ? storagesInside(cp, *it.source)
                                                              : std::vector<DcpPlan::Value::Storage> {}});
            }
        }
        writeDcp(plan, m_result.output, progress, options);
    }

    const Checkpoint& m_cp;
    const std::vector<OptimizerView> m_views;
    std::vector<OptimizerRewrite> m_rewrites;
    const std::optional<ModelParams> m_modelPart;
    std::map<std::string, std::string> m_modelRename; ///< key of the model saved beside the optimizer -> new key
    std::shared_ptr<PyArena> m_arena = std::make_shared<PyArena>();
    std::vector<Item> m_items; ///< what the optimizer parts become
    std::set<const Entry*> m_handled; ///< entries the items replace
    FixResult m_result;
};

} // namespace

bool fixWritesDcpFolder(const Checkpoint& optim)
{
    return formatInfo(optim.format).fixWritesDcp;
}

FixResult applyFixes(const Checkpoint& cp, const Diagnosis& diagnosis, const std::string& output,
    const Progress& progress, WriteOptions options, const std::vector<UserRename>& userRenames)
{
    return readGuarded({&cp},
        [&] { return FixWriter(cp, output).run(diagnosis, userRenames, progress, guardedWrite(options, {&cp})); });
}

} // namespace optscope
