// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/deepspeed/deepspeed_universal_reader.h"
#include "optscope/base/pattern.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/deepspeed/deepspeed_common.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
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

namespace {

/// One open of a universal checkpoint folder: the model states file (parameter shapes and order, buffers, frozen
/// parameters), then per parameter its fp32.pt and state files under zero/FQN/, then the optimizer's param groups
class UniversalOpening
{
public:
    UniversalOpening(const std::string& path, const Progress& progress)
        : m_progress(progress)
        , m_cp(std::make_shared<Checkpoint>())
    {
        m_progress(0.0, "reading");
        resolveFolder(path);
        m_cp->format = CheckpointFormat::DeepSpeedUniversal;
        m_cp->path = path;
        m_cp->arena = std::make_shared<PyArena>();
        m_cp->files = std::make_shared<CheckpointFiles>(m_dir.string());
        m_builder = std::make_unique<CheckpointBuilder>(*m_cp);
    }

    std::shared_ptr<const Checkpoint> run()
    {
        readModelStates();
        m_listable = canListFolder((m_dir / "zero").string());
        if (!m_listable) askForStateFiles();
        size_t done = 0, total = 0;
        for (const auto& g : m_groups)
            total += g.size();
        for (size_t s = 0; s < m_groups.size(); ++s) {
            m_subFqns.emplace_back();
            for (const auto& m : m_groups[s]) {
                m_progress(0.9 * double(done++) / double(std::max<size_t>(total, 1)), "reading");
                m_subFqns.back().push_back(m.fqn);
                readParam(s, m);
            }
        }
        addBuffers();
        addFrozenParams();
        for (auto& [p, e] : m_stateEntries)
            m_builder->addTensor(std::move(p), std::move(e));
        addParamGroups();
        m_cp->formatDetail = "DeepSpeed universal checkpoint"
            + (m_stage ? " from ZeRO stage " + std::to_string(*m_stage) : std::string())
            + (getKey(m_modelStates, "ds_version") && getKey(m_modelStates, "ds_version")->kind == PyKind::Str
                    ? ", DeepSpeed " + std::string(getKey(m_modelStates, "ds_version")->text)
                    : std::string())
            + m_note;
        m_builder->finish();
        m_progress(1.0, "reading");
        return m_cp;
    }

private:
    /// the folder given, a file in it, or the folder a latest_universal file names
    void resolveFolder(const std::string& path)
    {
        m_dir = Location(path);
        if (!isFolder(m_dir)) m_dir = m_dir.parent_path().empty() ? Location(".") : m_dir.parent_path();
        if (isUniversalFolder(m_dir)) return;
        const std::string name = readName(m_dir / DeepSpeedUniversalReader::kLatestFile);
        if (name.empty() || name.find('/') != std::string::npos || !isUniversalFolder(m_dir / name))
            throw Error(ErrorKind::Format, (m_dir / DeepSpeedUniversalReader::kLatestFile).string(),
                "does not name a universal checkpoint folder ('" + name
                    + "'; DeepSpeed raises ValueError: Invalid for universal checkpoint)");
        m_dir = m_dir / name;
        m_note = ", folder '" + name + "' from latest_universal";
    }

    /// a file of the folder, read once
    const TorchSaveArchive& load(const std::string& rel)
    {
        auto it = m_archives.find(rel);
        if (it != m_archives.end()) return it->second;
        m_progress.checkCancelled();
        // through the checkpoint's files: a file that is a symlink out of the folder is not read
        auto file = m_cp->files->openArchive(rel);
        TorchSaveArchive ar = readTorchSaveArchive(file, 0, file->size(), *m_cp->arena, (m_dir / rel).string());
        m_builder->addPickleWarnings(ar.warnings);
        return m_archives.emplace(rel, std::move(ar)).first->second;
    }

    /// the model states file: param_shapes (names, shapes, order), buffers, frozen parameters; and the ZeRO stage
    void readModelStates()
    {
        for (const std::string candidate : {"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"})
            if (isFile(m_dir / candidate)) {
                m_modelRel = candidate;
                break;
            }
        if (m_modelRel.empty())
            throw Error(ErrorKind::Format, m_dir.string(),
                "has no mp_rank_00_model_states.pt or zero_pp_rank_0_mp_rank_00_model_states.pt: the parameter shapes "
                "and order are unknown");
        m_modelStates = load(m_modelRel).root;
        m_groups = readParamShapes(getKey(m_modelStates, "param_shapes"), (m_dir / m_modelRel).string());
        if (isFile(m_dir / DeepSpeedUniversalReader::kOptimizerStateFile))
            m_optimState = load(DeepSpeedUniversalReader::kOptimizerStateFile).root;
        m_stage = zeroStageOf(getKey(m_optimState, "zero_stage"));
        m_zero3 = m_stage ? *m_stage == 3 : m_modelRel.rfind("zero_pp_rank_", 0) == 0;
    }

    /// the state names torch.optim's optimizers keep: over plain HTTP a parameter's folder cannot be listed, and
    /// these are asked for
    static constexpr const char* kStateNames[]
        = {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "exp_inf", "momentum_buffer", "sum", "square_avg",
            "acc_delta", "grad_avg", "ax", "eta", "mu", "mu_product", "prev", "step_size"};

    /// every parameter's possible state files, their HEADs in flight together
    void askForStateFiles() const
    {
        std::vector<std::string> ask;
        for (const auto& g : m_groups)
            for (const auto& m : g)
                for (const char* n : kStateNames)
                    ask.push_back((m_dir / ("zero/" + m.fqn) / (std::string(n) + ".pt")).string());
        statAhead(ask);
    }

    /// a tensor file: {"param": tensor, ...} or the bare tensor; viewed in the parameter's shape
    std::optional<TensorEntry> tensorFile(
        const std::string& rel, const std::vector<int64_t>& shape, bool scalar, const std::string& key)
    {
        if (!isFile(m_dir / rel)) return std::nullopt;
        const TorchSaveArchive& ar = load(rel);
        const PyValue* v = ar.root;
        if (v && v->isMapping()) v = getKey(v, "param");
        if (!v || v->kind != PyKind::Tensor || !v->tensor->storage)
            throw Error(
                ErrorKind::Format, (m_dir / rel).string(), "holds no tensor (found " + pyRepr(ar.root, 60) + ")");
        const PyTensorInfo& t = *v->tensor;
        TensorEntry e;
        e.dtype = t.dtype;
        TensorChunk c = CheckpointBuilder::chunkFromTensor(t, ar, rel, (m_dir / rel).string());
        if (scalar || t.sizes == shape) {
            e.shape = t.sizes;
        } else {
            // ZeRO-3 stores the flat tensor: view it in the parameter's shape when it is contiguous and fits
            const bool flat1d = t.sizes.size() == 1 && (t.sizes[0] <= 1 || t.strides[0] == 1);
            if (!flat1d || t.sizes[0] != numelOf(shape)) {
                m_builder->error(ReaderCode::BadMetadata,
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
    }

    /// a parameter's state files: step, exp_avg, exp_avg_sq first (as the optimizer keeps them), then the rest by name
    std::vector<std::string> stateNames(const std::string& folder) const
    {
        std::vector<std::string> names;
        if (m_listable) {
            for (const FolderEntry& it : listFolder(m_dir / folder)) {
                const std::string f = it.name;
                if (f.size() > 3 && f.compare(f.size() - 3, 3, ".pt") == 0 && f != "fp32.pt")
                    names.push_back(f.substr(0, f.size() - 3));
            }
        } else {
            for (const char* n : kStateNames)
                if (isFile(m_dir / folder / (std::string(n) + ".pt"))) names.emplace_back(n);
        }
        std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
            auto rank = [](const std::string& n) {
                return n == "step" ? 0 : n == "exp_avg" ? 1 : n == "exp_avg_sq" ? 2 : 3;
            };
            return rank(a) != rank(b) ? rank(a) < rank(b) : a < b;
        });
        return names;
    }

    /// parameter @p m of sub-group @p s: its fp32 weight and its states
    void readParam(size_t s, const Member& m)
    {
        const std::string folder = "zero/" + m.fqn;
        if (!isFolder(m_dir / folder)) {
            m_builder->error(ReaderCode::MissingFile,
                "data file '" + folder + "/fp32.pt' is missing from " + m_dir.string() + " (no folder for '" + m.fqn
                    + "')",
                "model." + m.fqn);
            return;
        }
        if (auto w = tensorFile(folder + "/fp32.pt", m.shape, false, "model." + m.fqn)) {
            m_builder->addTensor({KeyPathElem::fromKey("model"), KeyPathElem::fromKey(m.fqn)}, std::move(*w));
            m_added.insert(m.fqn);
        } else {
            m_builder->error(ReaderCode::MissingFile,
                "data file '" + folder + "/fp32.pt' is missing from " + m_dir.string(), "model." + m.fqn);
        }
        KeyPath base = {KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("state"), KeyPathElem::fromKey(m.fqn)};
        bool hasStep = false;
        for (const auto& name : stateNames(folder)) {
            KeyPath p = base;
            p.push_back(KeyPathElem::fromKey(name));
            if (auto e = tensorFile(folder + "/" + name + ".pt", m.shape, name == "step", joinKeyPath(p))) {
                m_stateEntries.emplace_back(std::move(p), std::move(*e));
                hasStep = hasStep || name == "step";
            }
        }
        if (!hasStep && m_zero3) addZero3Step(s, m, base);
    }

    /// ds_to_universal writes no step.pt at ZeRO-3: the sub-group's step in optimizer_state.pt
    void addZero3Step(size_t s, const Member& m, const KeyPath& base)
    {
        const PyValue* st
            = getIntKey(getKey(getKey(m_optimState, "optimizer_state_dict"), "state"), static_cast<int64_t>(s));
        const PyValue* step = getKey(st, "step");
        if (!step || step->kind != PyKind::Tensor || !step->tensor->storage) return;
        const std::string optimRel = DeepSpeedUniversalReader::kOptimizerStateFile;
        TensorEntry e;
        e.dtype = step->tensor->dtype;
        e.shape = step->tensor->sizes;
        e.chunks.push_back(CheckpointBuilder::chunkFromTensor(
            *step->tensor, m_archives.at(optimRel), optimRel, (m_dir / optimRel).string()));
        KeyPath p = base;
        p.push_back(KeyPathElem::fromKey("step"));
        // step first, as the ZeRO reader orders the optimizer's state
        m_stateEntries.emplace(m_stateEntries.end()
                - static_cast<std::ptrdiff_t>(std::count_if(m_stateEntries.begin(), m_stateEntries.end(),
                    [&](const auto& x) { return x.first.size() == 4 && x.first[2].key == m.fqn; })),
            std::move(p), std::move(e));
    }

    /// a tensor of the model states file, as an entry under "model"
    void addModelStatesTensor(const std::string& name, const PyValue* t)
    {
        TensorEntry e;
        e.dtype = t->tensor->dtype;
        e.shape = t->tensor->sizes;
        e.chunks.push_back(
            CheckpointBuilder::chunkFromTensor(*t->tensor, m_archives.at(m_modelRel), m_modelRel, m_modelRel));
        m_builder->addTensor({KeyPathElem::fromKey("model"), KeyPathElem::fromKey(name)}, std::move(e));
    }

    /// buffers from the model states file (shared parameters as aliases)
    void addBuffers()
    {
        const PyValue* module = getKey(m_modelStates, "module");
        const PyValue* bufferNames = getKey(m_modelStates, "buffer_names");
        if (!bufferNames || !bufferNames->isSequence()) return;
        for (const auto* b : bufferNames->items()) {
            const PyValue* t = b->kind == PyKind::Str ? getKey(module, b->text) : nullptr;
            if (!t || t->kind != PyKind::Tensor || !t->tensor->storage || m_added.count(std::string(b->text))) continue;
            addModelStatesTensor(std::string(b->text), t);
            m_added.insert(std::string(b->text));
        }
    }

    /// frozen parameters from the model states file (below ZeRO-3, which keeps them elsewhere)
    void addFrozenParams()
    {
        const PyValue* frozen = getKey(m_modelStates, "frozen_param_fragments");
        if (!frozen || !frozen->isMapping() || m_zero3) return;
        for (size_t i = 0; i < frozen->size(); ++i) {
            const PyValue* k = frozen->dictKey(i);
            const PyValue* t = frozen->dictValue(i);
            if (k->kind != PyKind::Str || t->kind != PyKind::Tensor || !t->tensor->storage) continue;
            addModelStatesTensor(std::string(k->text), t);
        }
    }

    /// param groups: the torch optimizer's hyperparameters; params name the FQNs of the groups' flat buffers
    void addParamGroups()
    {
        const PyValue* pgs = getKey(m_optimState, "param_groups");
        if (!pgs || !pgs->isSequence()) {
            m_builder->warn(ReaderCode::ZeroElastic,
                "zero/optimizer_state.pt is missing or has no param_groups: hyperparameters unknown");
            return;
        }
        for (size_t g = 0; g < pgs->size(); ++g) {
            const PyValue* d = pgs->item(g);
            PyValue* names = m_cp->arena->makeContainer(PyKind::List);
            const PyValue* ids = getKey(d, "params");
            std::vector<int64_t> subs;
            if (ids && ids->isSequence())
                for (const auto* id : ids->items())
                    if (auto x = asInt(id)) subs.push_back(*x);
            for (auto sub : subs)
                if (sub >= 0 && static_cast<size_t>(sub) < m_subFqns.size())
                    for (const auto& f : m_subFqns[static_cast<size_t>(sub)])
                        names->container->items.push_back(m_cp->arena->makeStr(f, true));
            if (!d || !d->isMapping()) continue;
            for (size_t i = 0; i < d->size(); ++i) {
                const PyValue* k = d->dictKey(i);
                if (k->kind != PyKind::Str) continue;
                const std::string field(k->text);
                m_builder->addValue({KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("param_groups"),
                                        KeyPathElem::fromIndex(static_cast<int64_t>(g)), KeyPathElem::fromKey(field)},
                    field == "params" || field == "param_names" ? names : d->dictValue(i));
            }
        }
    }

    const Progress& m_progress;
    Location m_dir;
    std::string m_note; ///< how the folder was found, for formatDetail
    std::shared_ptr<Checkpoint> m_cp;
    std::unique_ptr<CheckpointBuilder> m_builder;
    std::map<std::string, TorchSaveArchive> m_archives; ///< by file, read once
    std::string m_modelRel;
    const PyValue* m_modelStates = nullptr;
    const PyValue* m_optimState = nullptr; ///< zero/optimizer_state.pt, when there
    std::vector<std::vector<Member>> m_groups; ///< param_shapes: per sub-group, its parameters
    std::optional<int> m_stage;
    bool m_zero3 = false;
    bool m_listable = true; ///< the zero/ folders can be listed (not over plain HTTP)
    std::vector<std::vector<std::string>> m_subFqns; ///< per sub-group, its parameters' FQNs
    std::set<std::string> m_added; ///< model entries added
    std::vector<std::pair<KeyPath, TensorEntry>> m_stateEntries; ///< added after the model's
};

} // namespace

std::shared_ptr<const Checkpoint> DeepSpeedUniversalReader::open(const std::string& path, const Progress& progress)
{
    return UniversalOpening(path, progress).run();
}

} // namespace optscope
