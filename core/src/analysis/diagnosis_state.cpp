// SPDX-License-Identifier: GPL-3.0-or-later
// One optimizer against the model: compare() and the rules it runs (diagnoser.h)
#include "optscope/analysis/diagnoser.h"

#include <algorithm>

namespace optscope {

std::optional<DType> Diagnoser::modelDtype(const std::string& fqn) const
{
    auto it = m_exp->dtypes.find(fqn);
    if (it != m_exp->dtypes.end()) return it->second;
    if (m_exp->dtypes.empty()) return std::nullopt;
    if (m_dtypeByCanon.empty())
        for (const auto& [k, dt] : m_exp->dtypes)
            m_dtypeByCanon.emplace(canon(k), dt);
    const auto c = m_dtypeByCanon.find(canon(fqn));
    return c == m_dtypeByCanon.end() ? std::nullopt : std::optional<DType>(c->second);
}

bool Diagnoser::isFloat8(DType d)
{
    return d == DType::Float8_e5m2 || d == DType::Float8_e4m3fn || d == DType::Float8_e5m2fnuz
        || d == DType::Float8_e4m3fnuz || d == DType::Float8_e8m0fnu;
}

bool Diagnoser::holdsAll(DType from, DType to)
{
    if (from == to) return true;
    if (to == DType::Float64) return true;
    if (to == DType::Float32) return from != DType::Float64;
    return false; // float16 and bfloat16 hold each other's values only in part, float8 almost nothing
}

std::string Diagnoser::float8Param() const
{
    for (const auto& fqn : m_exp->fqns)
        if (auto dt = modelDtype(fqn); dt && isFloat8(*dt)) return fqn;
    return {};
}

PythonError Diagnoser::float8StepError(DType dtype)
{
    const std::string type = dtype == DType::Float8_e5m2 ? "Float8_e5m2"
        : dtype == DType::Float8_e4m3fn                  ? "Float8_e4m3fn"
        : dtype == DType::Float8_e5m2fnuz                ? "Float8_e5m2fnuz"
        : dtype == DType::Float8_e4m3fnuz                ? "Float8_e4m3fnuz"
                                                         : "Float8_e8m0fnu";
    return {"RuntimeError", "\"<kernel>\" not implemented for '" + type + "'"};
}

OptimizerKind Diagnoser::loadingClass(int oi) const
{
    if (m_target && m_target->kind != OptimizerKind::Unknown) return m_target->kind;
    return m_table.kinds[static_cast<size_t>(oi)];
}

std::optional<ClassReadMiss> Diagnoser::targetClassMiss(int oi) const
{
    return firstMissForClass(loadingClass(oi), m_cp, m_table.optimizers[static_cast<size_t>(oi)]);
}

void Diagnoser::classFindings(
    int oi, OptimizerKind savedKind, const std::string& where, const std::string& root, Diagnosis& d)
{
    const auto miss = targetClassMiss(oi);
    if (!miss) return;
    const std::string target = optimizerKindName(loadingClass(oi));
    const bool otherClass = m_target && savedKind != m_target->kind && savedKind != OptimizerKind::Unknown;
    const bool unpacked = miss->exception() != "KeyError";
    const std::string lacks = unpacked
        ? "its param group " + std::to_string(miss->group) + " has a '" + miss->key + "' that is no pair ("
            + (miss->nonIterableType.empty() ? std::to_string(miss->unpackedLength) + " values" : miss->nonIterableType)
            + ")"
        : miss->groupKey ? "its param group " + std::to_string(miss->group) + " has no '" + miss->key + "'"
                         : "the state of its parameter '" + miss->param + "' has no '" + miss->key + "'";
    Finding f(FindingCode::OptimizerClassMismatch,
        where
            + (otherClass ? " was saved by " + std::string(optimizerKindName(savedKind)) + ", the target optimizer ("
                        + m_target->source + ") is " + target
                          : " does not hold what " + std::string(m_target ? "the target optimizer's" : "its own")
                        + " class (" + target + ") reads")
            + ": load_state_dict takes the saved param groups' hyperparameters and the saved states as they are, "
              "and "
            + lacks + ", which " + target
            + (miss->atLoad    ? "'s __setstate__ reads while it loads"
                    : unpacked ? "'s step() unpacks into two"
                               : "'s step() reads"),
        root);
    f.pytorchError = miss->exception() + ": " + miss->message() + " ("
        + (miss->atLoad ? "optimizer.load_state_dict" : "at the first optimizer.step() after loading") + ")";
    f.fix = otherClass ? "load it into the optimizer class that saved it (" + std::string(optimizerKindName(savedKind))
            + "), or keep the new optimizer's fresh state: load the model weights only"
                       : "the file was edited or written by another tool: " + std::string(unpacked ? "set" : "add")
            + " '" + miss->key + "' " + (unpacked ? "in" : "to") + " the saved "
            + (miss->groupKey ? "param groups (" + target + "'s default for it)" : "states")
            + " before loading, or keep the new optimizer's fresh state: load the model weights only";
    f.fixNeutral = otherClass ? "load it into an optimizer of the class that saved it, or keep the new optimizer's "
                                "fresh state and load the model weights only"
                              : "add what the optimizer's class reads to the saved groups or states, or keep the "
                                "new optimizer's fresh state";
    f.keys = {miss->key};
    d.findings.push_back(std::move(f));
}

std::vector<std::string> Diagnoser::dtensorStatesIntoPlain(int oi) const
{
    std::vector<std::string> keys;
    if (m_cp.format != CheckpointFormat::TorchSave || !m_model || m_model->fromOptimizer || !m_model->tensorClassesKnown
        || !m_model->dtensors.empty())
        return keys;
    for (const auto& p : m_table.optimizers[static_cast<size_t>(oi)].params)
        for (const auto& [name, e] : p.states)
            if (e->isTensor() && isDTensorSubclass(e->tensor->subclass.str())) keys.push_back(p.key + "." + name);
    return keys;
}

void Diagnoser::dtensorFindings(int oi, const std::string& where, const std::string& root, Diagnosis& d)
{
    const std::vector<std::string> keys = dtensorStatesIntoPlain(oi);
    if (keys.empty()) return;
    Finding f(FindingCode::DTensorState,
        where + " holds " + std::to_string(keys.size()) + " DTensor state(s) (" + quoteList(keys, 3)
            + "): get_optimizer_state_dict of a fully_shard or tensor-parallel model, torch.save'd. " + m_model->source
            + " holds plain tensors: optimizer.load_state_dict and set_optimizer_state_dict "
              "take the DTensors as they are, and the first step() mixes them with the plain parameters",
        root);
    f.pytorchError = "RuntimeError: aten.lerp_.Scalar: " + std::string(kMixedDTensor)
        + " (at the first optimizer.step() after loading; the op named is the optimizer's first)";
    f.fix = "`optscope-cli gather` of the file (of every rank's file, for a job of several ranks) writes each "
            "DTensor as the plain full tensor, which loads into the plain model; or save it with "
            "StateDictOptions(full_state_dict=True), or load it into the model sharded as it was saved";
    f.fixNeutral = "gather the file (every rank's file) into plain full tensors, or load it into the model "
                   "sharded as it was saved";
    f.keys = head(keys);
    d.findings.push_back(std::move(f));
}

void Diagnoser::dtypeFindings(const std::vector<const ParamRow*>& listed, const Names& names, bool byName,
    const std::string& where, const std::string& root, Diagnosis& d) const
{
    const ModelParams& exp = *m_exp;
    if (exp.dtypes.empty()) return;
    std::vector<std::string> casts;
    std::map<std::string, int> pairs; // "float32 -> bfloat16" -> count
    for (size_t i = 0; i < listed.size(); ++i) {
        const ParamRow* r = listed[i];
        if (!r->param) continue;
        std::string fqn;
        if (byName) {
            const auto it = names.rename.find(r->fqn);
            fqn = it == names.rename.end() ? r->fqn : it->second;
        } else {
            fqn = i < exp.fqns.size() ? exp.fqns[i] : std::string();
        }
        const auto pdt = fqn.empty() ? std::nullopt : modelDtype(fqn);
        if (!pdt || !dtypeIsFloatingPoint(*pdt) || isFloat8(*pdt)) continue;
        for (const auto& [name, e] : r->param->states) {
            if (name == "step" || !e->isTensor() || holdsAll(e->tensor->dtype, *pdt)) continue;
            if (!dtypeIsFloatingPoint(e->tensor->dtype)) continue; // integer state: counts, never moments
            casts.push_back(fqn + "." + name + " " + std::string(dtypeName(e->tensor->dtype)) + " -> "
                + std::string(dtypeName(*pdt)));
            ++pairs[std::string(dtypeName(e->tensor->dtype)) + " -> " + std::string(dtypeName(*pdt))];
        }
    }
    if (!casts.empty()) {
        std::string kinds;
        for (const auto& [pair, n] : pairs)
            kinds += (kinds.empty() ? "" : ", ") + pair + " (" + std::to_string(n) + ")";
        Finding f(FindingCode::StateDtypeCast,
            std::to_string(casts.size()) + " state tensor(s) of " + where + " are cast to their parameter's dtype "
                + "in " + exp.source + ", which holds less: " + kinds + ", e.g. " + quoteList(casts, 3)
                + ". load_state_dict casts every state but step to the parameter's dtype: the moments are rounded, "
                  "without an error",
            root);
        f.fix = "load into a model whose parameters keep the saved precision (mixed precision keeps float32 "
                "parameters and casts in autocast), or accept the rounding";
        f.keys = head(casts);
        d.findings.push_back(std::move(f));
    }
    if (const std::string p = float8Param(); !p.empty()) {
        const DType dt = *modelDtype(p);
        Finding f(FindingCode::Float8Params,
            "the model's parameters are " + std::string(dtypeName(dt)) + " ('" + p + "' in " + exp.source
                + "): the state loads, cast to " + std::string(dtypeName(dt))
                + ", but torch.optim has no float8 kernels and the first step() raises; "
                  "set_optimizer_state_dict raises in its own first step",
            root);
        // when and where: the kernel depends on the optimizer and its settings
        f.pytorchError = float8StepError(dt).text()
            + " (at the first optimizer.step(); the kernel depends on the optimizer and its settings: "
              "lerp_kernel_scalar for Adam at its defaults on the CPU)";
        f.fix = "train float8 with float32 or bfloat16 parameters (torchao's Float8Linear casts in the forward) and "
                "load the optimizer into those";
        f.keys = {p};
        d.findings.push_back(std::move(f));
    }
}

const std::vector<int64_t>* Diagnoser::modelShape(const std::string& fqn) const
{
    auto it = m_exp->shapes.find(fqn);
    if (it != m_exp->shapes.end()) return &it->second;
    if (m_shapeByCanon.empty()) // built on first use: a scan per lookup was quadratic at 100k parameters
        for (const auto& [k, shape] : m_exp->shapes)
            m_shapeByCanon.emplace(canon(k), &shape);
    const auto c = m_shapeByCanon.find(canon(fqn));
    return c == m_shapeByCanon.end() ? nullptr : c->second;
}

std::optional<std::vector<int64_t>> Diagnoser::stateShape(const ParamRow& row, OptimizerKind kind)
{
    if (!row.param) return std::nullopt;
    for (const auto& [name, e] : row.param->states) {
        if (!e->isTensor()) continue;
        const auto want = expectedStateShape(kind, name, e->tensor->shape);
        if (want && *want == e->tensor->shape) return e->tensor->shape;
    }
    return std::nullopt;
}

int Diagnoser::targetGroupWithoutHyperparameters(const OptimizerView& v) const
{
    if (!m_target || m_target->names.empty() || v.idKeyed || v.flattened) return -1;
    std::map<std::string, size_t> targetGroupOf; // canonical name -> target group
    size_t pos = 0;
    for (size_t g = 0; g < m_target->groupSizes.size(); ++g)
        for (size_t k = 0; k < m_target->groupSizes[g] && pos < m_target->names.size(); ++k, ++pos)
            targetGroupOf[normalizeFqn(m_target->names[pos]).fqn] = g;
    std::vector<bool> given(m_target->groupSizes.size(), false);
    for (const auto& saved : v.groups) {
        int last = -1;
        for (const auto& p : saved.params)
            if (const auto it = targetGroupOf.find(normalizeFqn(p).fqn); it != targetGroupOf.end())
                last = std::max(last, static_cast<int>(it->second));
        if (last >= 0) given[static_cast<size_t>(last)] = true;
    }
    for (size_t g = 0; g < given.size(); ++g)
        if (!given[g]) return static_cast<int>(g);
    return -1;
}

bool Diagnoser::namedStateMisfits(
    const OptimizerView& v, const std::vector<const ParamRow*>& listed, OptimizerKind kind) const
{
    std::set<std::string> stateKeys;
    for (const auto& p : v.params)
        stateKeys.insert(p.key);
    for (const auto& fqn : m_exp->fqns) {
        const std::string key = normalizeFqn(fqn).fqn;
        if (!stateKeys.count(key) || !modelShape(fqn)) continue;
        for (const ParamRow* r : listed)
            if (r->id == key && !wrongState(*r, kind, *modelShape(fqn)).empty()) return true;
    }
    return false;
}

std::string Diagnoser::wrongState(const ParamRow& row, OptimizerKind kind, const std::vector<int64_t>& shape) const
{
    if (!row.param) return {};
    for (const auto& [name, e] : row.param->states) {
        if (!e->isTensor()) continue;
        const auto want = expectedStateShape(kind, name, shape);
        if (!want || e->tensor->shape == *want) continue;
        if (kind == OptimizerKind::Adafactor && shape.size() < 2 && name == "variance" && e->tensor->shape == shape)
            continue;
        return name + " " + torchSizeText(e->tensor->shape) + " vs " + torchSizeText(*want);
    }
    return {};
}

std::vector<size_t> Diagnoser::targetGroupSizes() const
{
    if (m_target) return m_target->groupSizes;
    if (m_exp->fromOptimizer && !m_exp->groups.empty()) {
        std::vector<size_t> s;
        for (const auto& g : m_exp->groups)
            s.push_back(g.size());
        return s;
    }
    return {m_exp->fqns.size()};
}

void Diagnoser::compare(int oi, Diagnosis& d, bool withVerdicts)
{
    const OptimizerReading r = readOptimizer(oi, d);
    const OptimizerView& v = *r.view;
    flatStateFindings(r, d);
    // names: wrapper/plain prefixes, then renamed layers (same shape, same position), then what is left
    Names names;
    for (const ParamRow* row : r.listed)
        names.opt.push_back(row->fqn);
    const size_t firstFinding = d.findings.size();
    if (r.named && !r.fsdp1) {
        nameFindings(oi, r.where, r.listed, names, d);
        coverageFindings(r, names, d);
    }
    const std::string groupError = groupFindings(r, d);
    const std::vector<std::string> wrongByPosition = shapeFindings(r, names, groupError, d);
    if (groupError.empty() && !r.fsdp1 && !r.rankSlices && !v.flattened)
        positionFindings(
            r.listed, names, r.trainer || r.sameGroupsAssumed, r.where, r.root, wrongByPosition.empty(), d);
    dtypeFindings(r.listed, names, r.named && !v.idKeyed, r.where, r.root, d);
    classFindings(oi, r.kind, r.where, r.root, d);
    dtensorFindings(oi, r.where, r.root, d);
    // the model state dict saved beside the optimizer
    modelPartFindings(names.rename, d);

    Diagnosis v2;
    verdicts({oi, r.kind, v, r.listed, groupError, wrongByPosition}, v2);
    quoteLoadErrors(v2.verdicts, firstFinding, d);
    if (withVerdicts) d.verdicts = std::move(v2.verdicts);
}

Diagnoser::OptimizerReading Diagnoser::readOptimizer(int oi, Diagnosis& d) const
{
    OptimizerReading r;
    r.oi = oi;
    r.view = &m_table.optimizers[static_cast<size_t>(oi)];
    r.kind = m_table.kinds[static_cast<size_t>(oi)];
    r.root = r.view->rootKey();
    r.where = optimizerText(r.root);
    const ModelParams& exp = *m_exp;
    for (const ParamRow* row : m_table.rowsOf(oi))
        if (row->position >= 0 && row->source != NameSource::Fsdp1Layout) r.listed.push_back(row);
    r.fsdp1 = m_table.sources[static_cast<size_t>(oi)] == NameSource::Fsdp1Layout;
    r.rankSlices = m_table.rankSlices[static_cast<size_t>(oi)];
    r.named = !r.listed.empty()
        && std::all_of(r.listed.begin(), r.listed.end(), [](const ParamRow* row) { return !row->fqn.empty(); });
    for (const auto& g : r.view->groups)
        r.savedSizes.push_back(g.params.size());
    r.trainer
        = !m_target && !exp.fromOptimizer && m_table.sources[static_cast<size_t>(oi)] == NameSource::TrainerGroups;
    r.targetSizes = r.trainer ? r.savedSizes : targetGroupSizes();
    for (auto s : r.savedSizes)
        r.savedTotal += s;
    for (auto s : r.targetSizes)
        r.targetTotal += s;
    r.sameGroupsAssumed = !m_target && !exp.fromOptimizer && !r.trainer && !r.view->groupsGuessed
        && r.savedSizes.size() > 1 && r.savedTotal == r.targetTotal;
    if (r.sameGroupsAssumed) {
        r.targetSizes = r.savedSizes;
        std::string sizes;
        for (size_t g = 0; g < r.savedSizes.size(); ++g)
            sizes += (g ? ", " : "") + std::to_string(r.savedSizes[g]);
        d.notes.push_back("no target optimizer given: the loading code is taken to build the same "
            + std::to_string(r.savedSizes.size()) + " param groups as " + r.where + " ([" + sizes
            + "] parameters), as a resume with the same training script does; one group over "
              "model.parameters() would raise ValueError: "
            + kGroupCountError + " (give the target optimizer to check it)");
    }
    r.targetText = m_target   ? m_target->source
        : m_frozenReading     ? "an optimizer over the model's trainable parameters (the ones it holds)"
        : exp.fromOptimizer   ? exp.source
        : r.trainer           ? "the Hugging Face Trainer's optimizer (decay and no-decay groups over the model)"
        : r.sameGroupsAssumed ? "the same groups over the model"
                              : "an optimizer over model.parameters() in one group";
    return r;
}

void Diagnoser::flatStateFindings(const OptimizerReading& reading, Diagnosis& d) const
{
    const OptimizerView& v = *reading.view;
    const ModelParams& exp = *m_exp;
    bool allFlat = v.idKeyed && !v.params.empty() && !keepsAllStateOnFirstParam(reading.kind);
    for (const auto& p : v.params)
        for (const auto& [name, e] : p.states)
            if (e->isTensor() && !e->tensor->shape.empty()) allFlat = allFlat && e->tensor->shape.size() == 1;
    if (reading.rankSlices) {
        size_t held = 0;
        for (const ParamRow* r : reading.listed)
            held += r->param != nullptr;
        Finding f(FindingCode::Fsdp1FlatState,
            reading.where
                + " is one rank's raw optimizer state of FSDP1 with use_orig_params=True: each parameter's state "
                + "is the rank's 1-D slice of it (" + std::to_string(held) + " of its "
                + std::to_string(reading.savedTotal)
                + " parameters have elements on this rank). It loads only on the same rank of the same FSDP1 "
                  "model and world size; anywhere else the slices do not fit the parameters",
            reading.root);
        f.pytorchError = "RuntimeError: The size of tensor a must match the size of tensor b (at the first "
                         "optimizer.step() after loading it into an unsharded model)";
        f.fix = "unflatten it with all ranks' files: `optscope-cli unflatten RANK_FILE... --model MODEL`";
        f.fixNeutral = "unflatten it with all ranks' files and the model (optscope-cli unflatten)";
        d.findings.push_back(std::move(f));
    } else if (reading.fsdp1 || (allFlat && !reading.named && reading.savedTotal < exp.fqns.size())) {
        Finding f(FindingCode::Fsdp1FlatState,
            reading.where + " holds " + std::to_string(reading.savedTotal) + " flat 1-D parameters for the "
                + std::to_string(exp.fqns.size()) + " parameters of " + exp.source
                + ": this is raw FSDP1 flat-parameter state (one rank's padded shard per flat parameter)",
            reading.root);
        f.pytorchError = std::string("ValueError: ") + kGroupSizeError;
        f.fix = "unflatten it with all ranks' files: `optscope-cli unflatten RANK_FILE... --model MODEL`";
        f.fixNeutral = "unflatten it with all ranks' files and the model (optscope-cli unflatten)";
        d.findings.push_back(std::move(f));
    }
}

std::string Diagnoser::groupFindings(const OptimizerReading& reading, Diagnosis& d) const
{
    const OptimizerView& v = *reading.view;
    const ModelParams& exp = *m_exp;
    // the positional loader: group count and sizes, then state shapes by position
    std::string groupError;
    if (reading.savedSizes.size() != reading.targetSizes.size())
        groupError = kGroupCountError;
    else if (reading.savedSizes != reading.targetSizes)
        groupError = kGroupSizeError;
    // a flattened optimizer's groups are a guess, and set_optimizer_state_dict (the path that reads it) takes
    // them from the live optimizer: nothing to compare (flattened-format covers optimizer.load_state_dict)
    if (!groupError.empty() && !reading.fsdp1 && !v.groupsGuessed) {
        std::string sizes;
        for (size_t g = 0; g < reading.savedSizes.size(); ++g)
            sizes += (g ? ", " : "") + std::to_string(reading.savedSizes[g]);
        std::string tsizes;
        for (size_t g = 0; g < reading.targetSizes.size(); ++g)
            tsizes += (g ? ", " : "") + std::to_string(reading.targetSizes[g]);
        Finding f(FindingCode::ParamGroupsMismatch,
            reading.where + " has " + std::to_string(reading.savedSizes.size()) + " param group(s) of [" + sizes
                + "] parameters; " + reading.targetText + " has " + std::to_string(reading.targetSizes.size()) + " of ["
                + tsizes + "]",
            reading.root);
        f.pytorchError = "ValueError: " + groupError + " (optimizer.load_state_dict"
            + (v.idKeyed ? std::string(" and set_optimizer_state_dict)")
                         : std::string("; set_optimizer_state_dict regroups FQN-keyed state and gives each saved "
                                       "group's hyperparameters to the last target group holding one of its "
                                       "parameters)"));
        std::string subsetNote;
        if (!m_target && reading.savedTotal < reading.targetTotal) {
            // an optimizer over the trainable parameters only (frozen backbone, LoRA) holds fewer
            TargetOptimizer saved;
            for (const ParamRow* r : reading.listed) {
                saved.shapes.push_back(r->shape);
                saved.zeroDim.push_back(r->param && paramIsZeroDimByState(reading.kind, *r->param));
            }
            saved.source = reading.where;
            saved.groupSizes = reading.savedSizes;
            std::string note;
            bool unique = true;
            if (!saved.paramsOf(exp, {}, note, unique).empty())
                subsetNote = "; their shapes fit " + std::to_string(reading.savedTotal)
                    + " of the model's parameters: if "
                    + "the others are frozen and the loading code gives the optimizer only the trainable ones, it "
                      "loads (give the target optimizer"; // the CLI's option added below, for the CLI's text
        }
        const size_t frozenCount = m_frozenInTarget.size();
        f.fix = reading.savedTotal != reading.targetTotal
            ? "the optimizer was saved for " + std::to_string(reading.savedTotal) + " parameters; the target has "
                + std::to_string(reading.targetTotal)
                + (frozenCount && reading.savedTotal + frozenCount == reading.targetTotal
                        ? ", " + std::to_string(frozenCount)
                            + " of them frozen: build it over the trainable parameters only, or load with "
                              "set_optimizer_state_dict, which skips frozen ones"
                        : subsetNote.empty() ? ": it is another model"
                                             : subsetNote + ", --target-optim, to check)")
            : "build the optimizer with the same param groups as the run that saved it (same order, same split)";
        if (reading.savedTotal != reading.targetTotal && !subsetNote.empty())
            f.fixNeutral = "the optimizer was saved for " + std::to_string(reading.savedTotal)
                + " parameters; the target has " + std::to_string(reading.targetTotal) + subsetNote + " to check)";
        d.findings.push_back(std::move(f));
    }
    return groupError;
}

std::vector<std::string> Diagnoser::shapeFindings(
    const OptimizerReading& reading, const Names& names, const std::string& groupError, Diagnosis& d) const
{
    const OptimizerView& v = *reading.view;
    const ModelParams& exp = *m_exp;
    std::vector<std::string> wrongByPosition;
    // the model's parameters that no row names (a renamed or replaced layer's), once
    std::optional<std::vector<const std::vector<int64_t>*>> unnamed;
    const auto unnamedShapes = [&]() -> const std::vector<const std::vector<int64_t>*>& {
        if (!unnamed) {
            std::set<const std::vector<int64_t>*> named;
            for (const ParamRow* r : reading.listed)
                if (const auto* s = modelShape(r->fqn)) named.insert(s);
            unnamed.emplace();
            for (const auto& f : exp.fqns)
                if (const auto* s = modelShape(f); s && !named.count(s)) unnamed->push_back(s);
        }
        return *unnamed;
    };
    if (!reading.fsdp1)
        for (size_t i = 0; i < reading.listed.size() && i < exp.fqns.size(); ++i) {
            const ParamRow& row = *reading.listed[i];
            const bool byTarget = m_target && m_target->shapes.size() == exp.fqns.size();
            // a model whose order is not stored (safetensors) names the rows by shapes: compare with the
            // parameter each row was given, not the guessed order's i-th
            // the same groups built by the same script: position i holds the parameter the saved position i held
            const bool byRow = reading.trainer || ((!exp.orderKnown || reading.sameGroupsAssumed) && !row.fqn.empty());
            const auto* shape = byTarget ? &m_target->shapes[i] : byRow ? modelShape(row.fqn) : modelShape(exp.fqns[i]);
            std::string w;
            if (shape && !shape->empty()) {
                w = wrongState(row, reading.kind, *shape);
            } else if (!shape && byRow && !byTarget) {
                // a row for a parameter the model does not have takes the place of one that no row names: when
                // none of those has its shape, the first step() fails whichever it gets
                for (const auto* other : unnamedShapes()) {
                    const std::string wrong = other->empty() ? std::string() : wrongState(row, reading.kind, *other);
                    if (wrong.empty()) {
                        w.clear();
                        break;
                    }
                    if (w.empty()) w = wrong;
                }
            }
            if (!w.empty()) wrongByPosition.push_back((row.fqn.empty() ? "id " + row.id : row.fqn) + "." + w);
        }
    // FQN-keyed state: shapes by name (after the renames), as set_optimizer_state_dict pairs them
    std::vector<std::string> wrongByName;
    if (reading.named && !v.idKeyed && !reading.fsdp1)
        for (const ParamRow* r : reading.listed) {
            const auto it = names.rename.find(r->fqn);
            const auto* shape = modelShape(it == names.rename.end() ? r->fqn : it->second);
            if (!shape) continue;
            const std::string w = wrongState(*r, reading.kind, *shape);
            if (!w.empty()) wrongByName.push_back(r->fqn + "." + w);
        }
    // "<n> state tensor(s) of <optimizer> do not have <what>: <names><consequence>"
    const auto shapeFinding = [&](const std::vector<std::string>& wrong, const std::string& what,
                                  const char* consequence, const char* fix) {
        Finding f(FindingCode::ShapeMismatch,
            std::to_string(wrong.size()) + " state tensor(s) of " + reading.where + " do not have " + what + ": "
                + quoteList(wrong, 4) + consequence,
            reading.root);
        f.pytorchError = "RuntimeError: The size of tensor a must match the size of tensor b (at the first "
                         "optimizer.step() after loading)";
        f.fix = fix;
        f.keys = head(wrong);
        d.findings.push_back(std::move(f));
    };
    if (!wrongByName.empty())
        shapeFinding(wrongByName, "their parameter's shape in " + exp.source,
            ". The loaders do not compare shapes; the first step() after loading fails",
            "the optimizer belongs to a different architecture; it cannot be loaded into this model");
    // positions pair up only when the groups do: with other groups load_state_dict raises before any shape matters
    if (!wrongByPosition.empty() && (v.idKeyed || !reading.named) && groupError.empty() && !reading.rankSlices)
        shapeFinding(wrongByPosition, "the shape of the model parameter at their position",
            ". optimizer.load_state_dict does not look at shapes and loads them; the first step() fails",
            "the optimizer belongs to a different architecture (or another parameter order)");
    return wrongByPosition;
}

void Diagnoser::quoteLoadErrors(const std::vector<LoadVerdict>& verdicts, size_t firstFinding, Diagnosis& d)
{
    const LoadVerdict& byName = verdicts[1];
    const LoadVerdict& byPosition = verdicts[0];
    for (size_t i = firstFinding; i < d.findings.size(); ++i) {
        Finding& f = d.findings[i];
        if (f.code != FindingCode::PrefixMismatch && f.code != FindingCode::RenamedParams
            && f.code != FindingCode::MissingState && f.code != FindingCode::ParamNamesPrefix)
            continue;
        if (byName.outcome == LoadOutcome::Raises)
            f.pytorchError = byName.exception + ": " + byName.message
                + " (set_optimizer_state_dict, also with StateDictOptions(strict=False): strict applies to the "
                  "model only)";
        else if (byPosition.outcome == LoadOutcome::Raises)
            f.pytorchError = byPosition.exception + ": " + byPosition.message + " (optimizer.load_state_dict)";
        else
            f.pytorchError.clear();
    }
}

} // namespace optscope
