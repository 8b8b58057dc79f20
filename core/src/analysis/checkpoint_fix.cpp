// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/checkpoint_fix.h"
#include "optscope/base/error.h"
#include "optscope/formats/dcp_writer.h"
#include "optscope/formats/format_registry.h"
#include "optscope/model/read_guard.h"
#include "optscope/optim/optimizer_view.h"
#include "optscope/optim/param_table.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_values.h"

#include <cstring>
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

static FixResult applyFixesUnguarded(const Checkpoint& cp, const Diagnosis& diagnosis, const std::string& output,
    const Progress& progress, WriteOptions options, const std::vector<UserRename>& userRenames)
{
    if (!diagnosis.fixable() && userRenames.empty()) {
        for (const auto& f : diagnosis.findings)
            if (f.code == FindingCode::FlattenedFormat)
                throw Error(ErrorKind::Usage, cp.path,
                    "the diagnosis proposes nothing that can be applied mechanically: converting the flattened "
                    "optimizer needs the param groups of the optimizer that loads it, which the format does not "
                    "store; give the target optimizer (--target-optim)");
        throw Error(ErrorKind::Usage, cp.path, "the diagnosis proposes nothing that can be applied mechanically");
    }
    FixResult result;
    result.output = output;
    const auto views = findOptimizers(cp);
    std::vector<OptimizerRewrite> rewrites(views.size());
    for (size_t i = 0; i < views.size(); ++i)
        rewrites[i].view = &views[i];
    std::map<std::string, std::string> modelRename; // key of the model saved beside the optimizer -> new key
    for (const auto& f : diagnosis.findings) {
        if (f.actions.empty()) continue;
        for (const auto& a : f.actions)
            if (a.kind == FixAction::Kind::RenameModelKey) modelRename[a.from] = a.to;
        for (auto& r : rewrites) {
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
        result.applied.push_back(std::string(f.name()) + ": "
            + (f.actions.size() == 1 ? f.actions[0].description : std::to_string(f.actions.size()) + " changes"));
    }
    // the user's renames: every name of every optimizer, and the model part's keys
    const auto modelPart = ModelParams::modelPartOf(cp);
    for (const auto& u : userRenames) {
        std::set<std::string> matched; // names the rename applies to (also when the diagnosis proposed it already)
        for (auto& r : rewrites) {
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
        if (modelPart && !modelPart->root.empty())
            for (const auto* list : {&modelPart->fqns, &modelPart->buffers})
                for (const auto& k : *list)
                    if (auto to = u.apply(k)) {
                        modelRename.emplace(k, *to);
                        matched.insert("model:" + k);
                    }
        const size_t hits = matched.size();
        if (!hits)
            throw Error(ErrorKind::Usage, cp.path,
                "--rename " + u.from + "=" + u.to + ": no parameter is named '" + u.from + "' or starts with '" + u.from
                    + ".'");
        result.applied.push_back("rename: '" + u.from + "' -> '" + u.to + "' (" + std::to_string(hits) + " names)");
    }

    auto arena = std::make_shared<PyArena>();
    std::vector<Item> items;
    std::set<const Entry*> handled;
    for (const auto& r : rewrites) {
        const OptimizerView& v = *r.view;
        std::set<std::string> renamedOnce;
        auto renamed = [&](const std::string& k) {
            std::string n = k;
            if (auto it = r.rekey.find(n); it != r.rekey.end()) n = it->second;
            if (auto it = r.rename.find(n); it != r.rename.end()) n = it->second;
            if (n != k && renamedOnce.insert(k).second) ++result.renamedKeys;
            return n;
        };
        // state
        for (const auto& p : v.params) {
            const std::string newKey = renamed(p.key);
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
                items.push_back(std::move(it));
                handled.insert(e);
            }
        }
        auto list = [&](const std::vector<std::string>& keys, bool asInts) {
            PyValue* l = arena->makeContainer(PyKind::List);
            for (const auto& k : keys) {
                const std::string n = renamed(k);
                if (asInts && n == k)
                    l->container->items.push_back(arena->makeInt(std::stoll(k)));
                else
                    l->container->items.push_back(arena->makeStr(n, true));
            }
            return l;
        };
        if (v.flattened && !r.toNested) {
            // stays flattened: every parameter's hyperparameter entries, renamed
            for (const auto& [fqn, hps] : v.flatParamHyperparams)
                for (const auto& [field, e] : hps) {
                    Item it;
                    it.path = v.root;
                    it.path.push_back(key("param_groups." + renamed(fqn) + "." + field));
                    it.source = e;
                    it.value = e->value;
                    items.push_back(std::move(it));
                    handled.insert(e);
                }
            continue;
        }
        if (v.flattened) {
            // to the nested format, grouped as the loading code's optimizer groups them (the diagnosis takes it
            // from the target optimizer; the format stores no grouping, and a guessed one does not load). As DSD's
            // _unflatten_optim_state_dict, a group's first parameter's hyperparameters stand for the group
            std::map<std::string, const std::map<std::string, const Entry*>*> hyperparamsOf;
            for (const auto& [fqn, hps] : v.flatParamHyperparams)
                hyperparamsOf.emplace(fqn, &hps);
            if (r.nestedGroups.empty())
                throw Error(ErrorKind::Usage, cp.path,
                    "converting the flattened optimizer needs its param groups: give the target optimizer "
                    "(--target-optim)");
            for (size_t g = 0; g < r.nestedGroups.size(); ++g) {
                const auto& params = r.nestedGroups[g];
                const auto first = params.empty() ? hyperparamsOf.end() : hyperparamsOf.find(params.front());
                if (first == hyperparamsOf.end())
                    throw Error(ErrorKind::Format, cp.path,
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
                    items.push_back(std::move(it));
                }
                Item it;
                it.path = gp;
                it.path.push_back(key("params"));
                it.value = list(params, false);
                items.push_back(std::move(it));
            }
            for (const auto& [fqn, hps] : v.flatParamHyperparams)
                for (const auto& [field, e] : hps)
                    handled.insert(e);
            continue;
        }
        // param_groups
        for (size_t g = 0; g < v.groups.size(); ++g) {
            const OptimizerGroup& group = v.groups[g];
            const bool idsStay = v.idKeyed && r.rekey.empty();
            KeyPath gp = v.root;
            gp.push_back(key("param_groups"));
            gp.push_back(KeyPathElem::fromIndex(static_cast<int64_t>(g)));
            // nested output: every field of the group, in file order; params (and param_names) rewritten
            std::vector<const Entry*> fields;
            for (const Entry& en : cp.entries)
                if (startsWith(en.path, gp) && en.path.size() > gp.size()) fields.push_back(&en);
            for (const Entry* en : fields) {
                Item it;
                it.path = en->path;
                it.source = en;
                it.value = en->value;
                const std::string_view field = en->path[gp.size()].key;
                if (field == "params")
                    it.value = list(group.params, idsStay);
                else if (field == "param_names")
                    it.value = list(group.paramNames, false);
                items.push_back(std::move(it));
                handled.insert(en);
            }
        }
    }
    // everything else, unchanged, in file order (optimizer parts stay where they were in the order)
    std::vector<Item> ordered;
    {
        std::map<const Entry*, std::vector<Item*>> byEntry;
        std::vector<Item*> synthetic;
        for (auto& it : items) {
            if (it.source)
                byEntry[it.source].push_back(&it);
            else
                synthetic.push_back(&it);
        }
        std::set<const Item*> placed;
        for (const Entry& e : cp.entries) {
            if (!handled.count(&e)) {
                Item it;
                it.path = e.path;
                // the model state dict saved beside the optimizer
                if (modelPart && !modelPart->root.empty() && e.path.size() == modelPart->root.size() + 1
                    && std::equal(modelPart->root.begin(), modelPart->root.end(), e.path.begin()))
                    if (auto mr = modelRename.find(e.path.back().key.str()); mr != modelRename.end()) {
                        it.path.back() = key(mr->second);
                        ++result.renamedKeys;
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
    }

    // check for collisions the renames could cause
    std::set<std::string> keys;
    for (const auto& it : ordered)
        if (!keys.insert(joinKeyPath(it.path)).second)
            throw Error(
                ErrorKind::Format, cp.path, "the fix would write two entries at '" + joinKeyPath(it.path) + "'");

    auto stepProducer = [&cp](const Entry* e) {
        return [&cp, e](const ByteSink& sink) {
            writeFloat32Scalar(static_cast<float>(readScalar(cp, *e).value_or(0.0)), sink);
        };
    };
    const bool toDcp = fixWritesDcpFolder(cp);
    if (!toDcp) {
        StateTree tree;
        for (const auto& it : ordered) {
            if (it.source && it.source->isTensor() && !it.castToFloat32) {
                TensorToWrite w;
                w.dtype = it.source->tensor->dtype;
                w.shape = it.source->tensor->shape;
                const Entry* e = it.source;
                w.produce = [&cp, e](const ByteSink& sink) { TensorAssembler(cp, *e).stream(sink); };
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
        TorchSaveWriter::write(tree, output, progress, options);
        return result;
    }
    DcpPlan plan;
    // a companion file (Fabric's meta.pt) is copied as it is, as reshard does, and its entries stay out of the DCP part
    for (const auto& c : cp.companionFiles)
        plan.copies.push_back({c.file, cp.files->open(c.file)});
    for (const auto& it : ordered) {
        if (it.source && cp.companionOf(*it.source)) {
            if (handled.count(it.source) || !(it.path == it.source->path))
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
            plan.values.push_back({it.path, it.value, 0});
        }
    }
    writeDcp(plan, output, progress, options);
    return result;
}

bool fixWritesDcpFolder(const Checkpoint& optim)
{
    return formatInfo(optim.format).fixWritesDcp;
}

FixResult applyFixes(const Checkpoint& cp, const Diagnosis& diagnosis, const std::string& output,
    const Progress& progress, WriteOptions options, const std::vector<UserRename>& userRenames)
{
    return readGuarded({&cp}, [&] {
        return applyFixesUnguarded(cp, diagnosis, output, progress, guardedWrite(options, {&cp}), userRenames);
    });
}

} // namespace optscope
