// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/deepspeed_universal_reader.h"
#include "optscope/base/pattern.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/deepspeed_common.h"
#include "optscope/formats/torch_save_reader.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"
#include "optscope/model/flat_param_layout.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;

namespace optscope {

using namespace deepspeed;

namespace {

bool isUniversalFolder(const Location& dir)
{
    std::error_code ec;
    return isFolder(dir / DeepSpeedUniversalReader::kZeroFolder)
        && (isFile(dir / DeepSpeedUniversalReader::kOptimizerStateFile) || [&] {
               for (const FolderEntry& it : listFolder(dir / DeepSpeedUniversalReader::kZeroFolder))
                   if (isFile(Location(it.location) / "fp32.pt")) return true;
               return false;
           }());
}

std::string readName(const Location& file)
{
    std::string t;
    try {
        t = readSmallFile(file.string(), 4096);
    } catch (const Error& e) {
        if (isReadFailure(e)) throw; // there but not readable: the failure, naming the file
        return {}; // a name file too large to be a name names nothing
    }
    const auto b = t.find_first_not_of(" \t\r\n");
    const auto e = t.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
}

} // namespace

bool DeepSpeedUniversalReader::looksLikeUniversal(const std::string& path)
{
    std::error_code ec;
    Location p(path);
    if (!isFolder(p)) {
        // a file: one of the model states files directly in a universal folder (any other file opens on its own)
        static const Pattern states(R"(^(zero_pp_rank_\d+_)?mp_rank_\d+_model_states\.pt$)");
        const Location parent = p.parent_path().empty() ? Location(".") : p.parent_path();
        return states.matches(p.filename().string()) && isUniversalFolder(parent);
    }
    if (isUniversalFolder(p)) return true;
    if (isFile(p / DeepSpeedUniversalReader::kLatestFile)) {
        const std::string name = readName(p / DeepSpeedUniversalReader::kLatestFile);
        return !name.empty() && name.find('/') == std::string::npos && isUniversalFolder(p / name);
    }
    return false;
}

std::shared_ptr<const Checkpoint> DeepSpeedUniversalReader::open(const std::string& path, const Progress& progress)
{
    progress(0.0, "reading");
    std::error_code ec;
    Location dir(path);
    if (!isFolder(dir)) dir = dir.parent_path().empty() ? Location(".") : dir.parent_path();
    std::string note;
    if (!isUniversalFolder(dir)) {
        const std::string name = readName(dir / DeepSpeedUniversalReader::kLatestFile);
        if (name.empty() || name.find('/') != std::string::npos || !isUniversalFolder(dir / name))
            throw Error(ErrorKind::Format, (dir / DeepSpeedUniversalReader::kLatestFile).string(),
                "does not name a universal checkpoint folder ('" + name
                    + "'; DeepSpeed raises ValueError: Invalid for universal checkpoint)");
        dir = dir / name;
        note = ", folder '" + name + "' from latest_universal";
    }

    auto cp = std::make_shared<Checkpoint>();
    cp->format = CheckpointFormat::DeepSpeedUniversal;
    cp->path = path;
    cp->arena = std::make_shared<PyArena>();
    cp->files = std::make_shared<CheckpointFiles>(dir.string());
    CheckpointBuilder builder(*cp);
    std::map<std::string, TorchSaveArchive> archives;
    auto load = [&](const std::string& rel) -> const TorchSaveArchive& {
        auto it = archives.find(rel);
        if (it != archives.end()) return it->second;
        progress.checkCancelled();
        // through the checkpoint's files: a file that is a symlink out of the folder is not read
        auto file = cp->files->open(rel);
        TorchSaveArchive ar = readTorchSaveArchive(file, 0, file->size(), *cp->arena, (dir / rel).string());
        builder.addPickleWarnings(ar.warnings);
        return archives.emplace(rel, std::move(ar)).first->second;
    };

    // the model states file: param_shapes (names, shapes, order), buffers, frozen parameters
    std::string modelRel;
    for (const std::string candidate : {"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"})
        if (isFile(dir / candidate)) {
            modelRel = candidate;
            break;
        }
    if (modelRel.empty())
        throw Error(ErrorKind::Format, dir.string(),
            "has no mp_rank_00_model_states.pt or zero_pp_rank_0_mp_rank_00_model_states.pt: the parameter shapes and "
            "order are unknown");
    const PyValue* ms = load(modelRel).root;
    const auto groups = readParamShapes(getKey(ms, "param_shapes"), (dir / modelRel).string());
    const PyValue* optimState = nullptr;
    if (isFile(dir / kOptimizerStateFile)) optimState = load(kOptimizerStateFile).root;
    const auto stage = zeroStageOf(getKey(optimState, "zero_stage"));
    const bool zero3 = stage ? *stage == 3 : modelRel.rfind("zero_pp_rank_", 0) == 0;

    // a tensor file: {"param": tensor, ...} or the bare tensor; viewed in the parameter's shape
    auto tensorFile = [&](const std::string& rel, const std::vector<int64_t>& shape, bool scalar,
                          const std::string& key) -> std::optional<TensorEntry> {
        if (!isFile(dir / rel)) return std::nullopt;
        const TorchSaveArchive& ar = load(rel);
        const PyValue* v = ar.root;
        if (v && v->isMapping()) v = getKey(v, "param");
        if (!v || v->kind != PyKind::Tensor || !v->tensor->storage)
            throw Error(ErrorKind::Format, (dir / rel).string(), "holds no tensor (found " + pyRepr(ar.root, 60) + ")");
        const PyTensorInfo& t = *v->tensor;
        TensorEntry e;
        e.dtype = t.dtype;
        TensorChunk c = CheckpointBuilder::chunkFromTensor(t, ar, rel, (dir / rel).string());
        if (scalar || t.sizes == shape) {
            e.shape = t.sizes;
        } else {
            // ZeRO-3 stores the flat tensor: view it in the parameter's shape when it is contiguous and fits
            const bool flat1d = t.sizes.size() == 1 && (t.sizes[0] <= 1 || t.strides[0] == 1);
            if (!flat1d || t.sizes[0] != numelOf(shape)) {
                builder.error(ReaderCode::BadMetadata,
                    rel + " holds " + shapeText(t.sizes) + " but param_shapes says " + shapeText(shape), key);
                return std::nullopt;
            }
            e.shape = shape;
            c.offsets.assign(shape.size(), 0);
            c.sizes = shape;
            c.source.strides = contiguousStrides(shape);
        }
        e.chunks.push_back(c);
        return e;
    };

    // Over plain HTTP a parameter's folder cannot be listed: its states are the names torch.optim's optimizers keep,
    // asked for once for every parameter (their HEADs in flight together)
    static const char* const kStateNames[]
        = {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "momentum_buffer", "sum", "square_avg",
            "acc_delta", "grad_avg", "ax", "eta", "mu", "mu_product", "prev", "step_size"};
    const bool listable = canListFolder((dir / "zero").string());
    if (!listable) {
        std::vector<std::string> ask;
        for (const auto& g : groups)
            for (const auto& m : g)
                for (const char* n : kStateNames)
                    ask.push_back((dir / ("zero/" + m.fqn) / (std::string(n) + ".pt")).string());
        statAhead(ask);
    }
    std::vector<std::vector<std::string>> subFqns;
    std::map<std::string, int> subOf;
    std::set<std::string> added;
    std::vector<std::pair<KeyPath, TensorEntry>> stateEntries;
    size_t done = 0, total = 0;
    for (const auto& g : groups)
        total += g.size();
    for (size_t s = 0; s < groups.size(); ++s) {
        subFqns.emplace_back();
        for (const auto& m : groups[s]) {
            progress(0.9 * double(done++) / double(std::max<size_t>(total, 1)), "reading");
            subFqns.back().push_back(m.fqn);
            subOf[m.fqn] = static_cast<int>(s);
            const std::string folder = "zero/" + m.fqn;
            if (!isFolder(dir / folder)) {
                builder.error(ReaderCode::MissingFile,
                    "data file '" + folder + "/fp32.pt' is missing from " + dir.string() + " (no folder for '" + m.fqn
                        + "')",
                    "model." + m.fqn);
                continue;
            }
            if (auto w = tensorFile(folder + "/fp32.pt", m.shape, false, "model." + m.fqn)) {
                builder.addTensor({KeyPathElem::fromKey("model"), KeyPathElem::fromKey(m.fqn)}, std::move(*w));
                added.insert(m.fqn);
            } else {
                builder.error(ReaderCode::MissingFile,
                    "data file '" + folder + "/fp32.pt' is missing from " + dir.string(), "model." + m.fqn);
            }
            // the states: exp_avg, exp_avg_sq first (as the optimizer keeps them), then the rest by name
            std::vector<std::string> names;
            if (listable) {
                for (const FolderEntry& it : listFolder(dir / folder)) {
                    const std::string f = it.name;
                    if (f.size() > 3 && f.compare(f.size() - 3, 3, ".pt") == 0 && f != "fp32.pt")
                        names.push_back(f.substr(0, f.size() - 3));
                }
            } else {
                for (const char* n : kStateNames)
                    if (isFile(dir / folder / (std::string(n) + ".pt"))) names.emplace_back(n);
            }
            std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
                auto rank = [](const std::string& n) {
                    return n == "step" ? 0 : n == "exp_avg" ? 1 : n == "exp_avg_sq" ? 2 : 3;
                };
                return rank(a) != rank(b) ? rank(a) < rank(b) : a < b;
            });
            KeyPath base = {KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("state"), KeyPathElem::fromKey(m.fqn)};
            bool hasStep = false;
            for (const auto& name : names) {
                KeyPath p = base;
                p.push_back(KeyPathElem::fromKey(name));
                if (auto e = tensorFile(folder + "/" + name + ".pt", m.shape, name == "step", joinKeyPath(p))) {
                    stateEntries.emplace_back(std::move(p), std::move(*e));
                    hasStep = hasStep || name == "step";
                }
            }
            if (!hasStep && zero3) {
                // ds_to_universal writes no step.pt at ZeRO-3: the sub-group's step in optimizer_state.pt
                const PyValue* st
                    = getIntKey(getKey(getKey(optimState, "optimizer_state_dict"), "state"), static_cast<int64_t>(s));
                const PyValue* step = getKey(st, "step");
                if (step && step->kind == PyKind::Tensor && step->tensor->storage) {
                    TensorEntry e;
                    e.dtype = step->tensor->dtype;
                    e.shape = step->tensor->sizes;
                    e.chunks.push_back(CheckpointBuilder::chunkFromTensor(*step->tensor,
                        archives.at(kOptimizerStateFile), kOptimizerStateFile, (dir / kOptimizerStateFile).string()));
                    KeyPath p = base;
                    p.push_back(KeyPathElem::fromKey("step"));
                    // step first, as the ZeRO reader orders the optimizer's state
                    stateEntries.emplace(stateEntries.end()
                            - static_cast<std::ptrdiff_t>(std::count_if(stateEntries.begin(), stateEntries.end(),
                                [&](const auto& x) { return x.first.size() == 4 && x.first[2].key == m.fqn; })),
                        std::move(p), std::move(e));
                }
            }
        }
    }
    // buffers and frozen parameters from the model states file, shared parameters as aliases
    const PyValue* module = getKey(ms, "module");
    const PyValue* bufferNames = getKey(ms, "buffer_names");
    if (bufferNames && bufferNames->isSequence())
        for (const auto* b : bufferNames->items()) {
            const PyValue* t = b->kind == PyKind::Str ? getKey(module, b->text) : nullptr;
            if (!t || t->kind != PyKind::Tensor || !t->tensor->storage || added.count(std::string(b->text))) continue;
            TensorEntry e;
            e.dtype = t->tensor->dtype;
            e.shape = t->tensor->sizes;
            e.chunks.push_back(
                CheckpointBuilder::chunkFromTensor(*t->tensor, archives.at(modelRel), modelRel, modelRel));
            builder.addTensor(
                {KeyPathElem::fromKey("model"), KeyPathElem::fromKey(std::string(b->text))}, std::move(e));
            added.insert(std::string(b->text));
        }
    if (const PyValue* frozen = getKey(ms, "frozen_param_fragments"); frozen && frozen->isMapping() && !zero3)
        for (size_t i = 0; i < frozen->size(); ++i) {
            const PyValue* k = frozen->dictKey(i);
            const PyValue* t = frozen->dictValue(i);
            if (k->kind != PyKind::Str || t->kind != PyKind::Tensor || !t->tensor->storage) continue;
            TensorEntry e;
            e.dtype = t->tensor->dtype;
            e.shape = t->tensor->sizes;
            e.chunks.push_back(
                CheckpointBuilder::chunkFromTensor(*t->tensor, archives.at(modelRel), modelRel, modelRel));
            builder.addTensor(
                {KeyPathElem::fromKey("model"), KeyPathElem::fromKey(std::string(k->text))}, std::move(e));
        }
    for (auto& [p, e] : stateEntries)
        builder.addTensor(std::move(p), std::move(e));

    // param groups: the torch optimizer's hyperparameters; params name the FQNs of the groups' flat buffers
    const PyValue* pgs = getKey(optimState, "param_groups");
    if (pgs && pgs->isSequence()) {
        for (size_t g = 0; g < pgs->size(); ++g) {
            const PyValue* d = pgs->item(g);
            PyValue* names = cp->arena->makeContainer(PyKind::List);
            const PyValue* ids = getKey(d, "params");
            std::vector<int64_t> subs;
            if (ids && ids->isSequence())
                for (const auto* id : ids->items())
                    if (auto x = asInt(id)) subs.push_back(*x);
            for (auto sub : subs)
                if (sub >= 0 && static_cast<size_t>(sub) < subFqns.size())
                    for (const auto& f : subFqns[static_cast<size_t>(sub)])
                        names->container->items.push_back(cp->arena->makeStr(f, true));
            if (!d || !d->isMapping()) continue;
            for (size_t i = 0; i < d->size(); ++i) {
                const PyValue* k = d->dictKey(i);
                if (k->kind != PyKind::Str) continue;
                const std::string field(k->text);
                builder.addValue({KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("param_groups"),
                                     KeyPathElem::fromIndex(static_cast<int64_t>(g)), KeyPathElem::fromKey(field)},
                    field == "params" || field == "param_names" ? names : d->dictValue(i));
            }
        }
    } else {
        builder.warn(ReaderCode::ZeroElastic,
            "zero/optimizer_state.pt is missing or has no param_groups: hyperparameters unknown");
    }
    cp->formatDetail = "DeepSpeed universal checkpoint"
        + (stage ? " from ZeRO stage " + std::to_string(*stage) : std::string())
        + (getKey(ms, "ds_version") && getKey(ms, "ds_version")->kind == PyKind::Str
                ? ", DeepSpeed " + std::string(getKey(ms, "ds_version")->text)
                : std::string())
        + note;
    builder.finish();
    progress(1.0, "reading");
    return cp;
}

} // namespace optscope
