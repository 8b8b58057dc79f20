// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/hf_trainer/hf_trainer_reader.h"
#include "optscope/base/error.h"
#include "optscope/base/pattern.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/safetensors/safetensors_reader.h"
#include "optscope/formats/state_flattener.h"
#include "optscope/formats/weight_index.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"
#include "optscope/optim/param_table.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>

namespace fs = std::filesystem;

namespace optscope {

namespace {

std::string firstExisting(const Location& dir, std::initializer_list<const char*> names)
{
    std::error_code ec;
    for (const char* n : names)
        if (isFile(dir / n)) return n;
    return {};
}

/// Python values straight from JSON text, as json.load makes them (nlohmann's SAX interface: no JSON document in
/// between, which for a 53 MB log_history took about twice the file and a third of the read). A duplicate key keeps
/// its first place and its last value, as a Python dict does. Past 64 levels a value becomes "<nested too deep>".
class JsonToPy
{
public:
    explicit JsonToPy(PyArena& arena)
        : m_arena(arena)
    { }
    PyValue* root = nullptr;
    std::string error;

    bool null() { return add(m_arena.makeNone()); }
    bool boolean(bool v) { return add(m_arena.makeBool(v)); }
    bool number_integer(int64_t v) { return add(m_arena.makeInt(v)); }
    bool number_unsigned(uint64_t v)
    {
        return add(v <= static_cast<uint64_t>(INT64_MAX) ? m_arena.makeInt(static_cast<int64_t>(v))
                                                         : m_arena.makeFloat(static_cast<double>(v)));
    }
    bool number_float(double v, const std::string&) { return add(m_arena.makeFloat(v)); }
    bool string(std::string& v) { return add(m_arena.makeStr(v, true)); }
    bool binary(std::vector<uint8_t>&) { return add(m_arena.makeNone()); }
    bool start_object(size_t) { return open(PyKind::Dict); }
    bool start_array(size_t) { return open(PyKind::List); }
    bool end_object() { return close(); }
    bool end_array() { return close(); }
    bool key(std::string& k)
    {
        if (m_skipped) return true;
        PyValue*& interned = m_keys[k]; // a log_history of 300k entries names the same five keys 300k times
        if (!interned) interned = m_arena.makeStr(k, true);
        Open& o = m_open.back();
        auto& items = o.value->container->items;
        o.replaceAt = SIZE_MAX;
        if (o.byKey.empty() && items.size() >= 32)
            for (size_t i = 0; i < items.size(); i += 2)
                o.byKey.emplace(items[i], i);
        if (!o.byKey.empty()) {
            if (const auto it = o.byKey.find(interned); it != o.byKey.end()) o.replaceAt = it->second + 1;
        } else {
            for (size_t i = 0; i < items.size() && o.replaceAt == SIZE_MAX; i += 2)
                if (items[i] == interned) o.replaceAt = i + 1;
        }
        if (o.replaceAt != SIZE_MAX) return true;
        if (!o.byKey.empty()) o.byKey.emplace(interned, items.size());
        items.push_back(interned);
        return true;
    }
    template<typename Exception> bool parse_error(size_t, const std::string&, const Exception& e)
    {
        error = e.what();
        return false;
    }

private:
    struct Open
    {
        PyValue* value;
        size_t replaceAt = SIZE_MAX; ///< a dict: where the value of a key seen before goes
        std::unordered_map<const PyValue*, size_t> byKey; ///< a dict of many keys: where each key is
    };
    bool add(PyValue* v)
    {
        if (m_skipped) return true;
        if (m_open.empty()) {
            root = v;
            return true;
        }
        Open& o = m_open.back();
        auto& items = o.value->container->items;
        if (o.replaceAt != SIZE_MAX) {
            items[o.replaceAt] = v;
            o.replaceAt = SIZE_MAX;
        } else {
            items.push_back(v);
        }
        return true;
    }
    bool open(PyKind kind)
    {
        if (m_skipped || m_open.size() > 64) {
            if (!m_skipped) add(m_arena.makeStr("<nested too deep>", false));
            ++m_skipped;
            return true;
        }
        PyValue* v = m_arena.makeContainer(kind);
        add(v);
        m_open.push_back(Open {v, SIZE_MAX, {}});
        return true;
    }
    bool close()
    {
        if (m_skipped) {
            --m_skipped;
            return true;
        }
        m_open.pop_back();
        return true;
    }
    PyArena& m_arena;
    std::vector<Open> m_open;
    size_t m_skipped = 0; ///< levels inside a value past the depth bound
    std::unordered_map<std::string, PyValue*> m_keys;
};

/// trainer_state.json: its fields as value entries
void addTrainerState(Checkpoint& cp, CheckpointBuilder& builder, const std::string& rel)
{
    auto file = cp.files->open(rel);
    const std::string where = cp.files->absolute(rel);
    if (file->size() > (uint64_t(64) << 20)) {
        builder.error(ReaderCode::UnreadableValue, where + " is larger than 64 MiB; not read");
        return;
    }
    JsonToPy values(*cp.arena);
    const char* text = reinterpret_cast<const char*>(file->all());
    if (!nlohmann::json::sax_parse(text, text + file->size(), &values)) {
        builder.error(ReaderCode::UnreadableValue, where + " is not valid JSON: " + values.error);
        return;
    }
    const PyValue* root = values.root;
    if (!root || root->kind != PyKind::Dict) {
        builder.error(ReaderCode::UnreadableValue, where + " is not a JSON object");
        return;
    }
    // flattened as every other part (and as DCP would store it): log_history.<i>.loss, stateful_callbacks....; leaf
    // by leaf into entries reserved for them (a 53 MB log_history is 1.5M values: no second list of their paths, no
    // doubling of the entries)
    cp.entries.reserve(cp.entries.size() + countStateLeaves(root));
    forEachStateLeaf(root, [&](FlattenedLeaf&& leaf) {
        KeyPath path;
        path.reserve(leaf.path.size() + 1);
        path.push_back(KeyPathElem::fromKey("trainer_state"));
        std::move(leaf.path.begin(), leaf.path.end(), std::back_inserter(path));
        builder.addValue(std::move(path), leaf.value);
    });
}

/// Names the optimizer's integer ids by ParamTable's rule and re-keys its entries by FQN; records how in
/// paramOrigins. Leaves the ids when no rule names every parameter in the groups.
void nameParameters(Checkpoint& cp, CheckpointBuilder& builder, const std::string& optimizerFile)
{
    const ParamTable table = ParamTable::build(cp);
    for (size_t oi = 0; oi < table.optimizers.size(); ++oi) {
        const OptimizerView& view = table.optimizers[oi];
        if (!view.idKeyed || view.rootKey() != "optim") continue;
        std::map<std::string, std::string> idToFqn;
        std::map<std::string, int> count;
        bool complete = table.sources[oi] != NameSource::None;
        for (const ParamRow* r : table.rowsOf(static_cast<int>(oi))) {
            if (r->position < 0) continue;
            if (r->fqn.empty() || ++count[r->fqn] > 1) complete = false;
            idToFqn.emplace(r->id, r->fqn);
        }
        if (!complete || idToFqn.empty()) {
            std::string why;
            for (const auto& n : table.notes)
                why += (why.empty() ? "" : "; ") + n;
            builder.error(ReaderCode::ParamMapping,
                "the integer ids of " + optimizerFile + " cannot be named from the model beside it"
                    + (why.empty() ? std::string() : ": " + why)
                    + "; the state keeps its ids (did the model change since this checkpoint?)",
                "optim");
            return;
        }
        const char* how = nameSourceText(table.sources[oi]);
        std::map<std::string, size_t> byConfidence;
        for (const ParamRow* r : table.rowsOf(static_cast<int>(oi))) {
            if (r->position < 0) continue;
            cp.paramOrigins.push_back({"optim", r->fqn, r->id, how, confidenceText(r->confidence)});
            ++byConfidence[confidenceText(r->confidence)];
        }
        for (auto& e : cp.entries) {
            if (e.path.size() >= 3 && e.path[0].key == "optim" && e.path[1].key == "state" && !e.path[2].isIndex()) {
                auto it = idToFqn.find(e.path[2].key.str());
                if (it == idToFqn.end()) continue; // state of a parameter no group lists: stays an id
                e.path[2] = KeyPathElem::fromKey(it->second);
                e.key = joinKeyPath(e.path);
            } else if (e.path.size() == 4 && e.path[0].key == "optim" && e.path[1].key == "param_groups"
                && e.path[3].key == "params" && !e.isTensor() && e.value && e.value->isSequence()) {
                PyValue* names = cp.arena->makeContainer(PyKind::List);
                for (const auto* id : e.value->items()) {
                    auto it = idToFqn.find(pyStr(id));
                    names->container->items.push_back(
                        it != idToFqn.end() ? cp.arena->makeStr(it->second, true) : const_cast<PyValue*>(id));
                }
                e.value = names;
            }
        }
        std::string summary;
        for (const auto& [c, n] : byConfidence)
            summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + c;
        const auto assumed = byConfidence.find(confidenceText(Confidence::OrderAssumed));
        builder.warn(ReaderCode::ParamMapping,
            "the integer ids of " + optimizerFile + " were named by " + how + " (" + summary + ")", "optim");
        if (assumed != byConfidence.end()) {
            // a guess is not a fact: check, diagnose, gather and diff say so (gather's names were taken as exact)
            builder.warn(ReaderCode::ParamOrderAssumed,
                std::to_string(assumed->second) + " of the names given to " + optimizerFile
                    + "'s integer ids rest on an assumed order: the model file does not store its parameter order "
                      "(safetensors lays tensors out by dtype and name), shapes cannot tell those parameters apart, "
                      "and where the model registers them in another order than their names sort (q_proj, k_proj, "
                      "v_proj sort as k, q, v) their optimizer state is under another parameter's name",
                "optim");
            cp.warnings.back().fix = "name them exactly from the model's own order: `optscope-cli map " + optimizerFile
                + " --model MODEL.pt` with a torch.save of model.state_dict() (or keep the ids: loaders that pair by "
                  "position, as the Trainer does, are not affected)";
        }
        cp.buildIndex();
        return;
    }
}

} // namespace

bool HfTrainerReader::looksLikeTrainerFolder(const std::string& path)
{
    std::error_code ec;
    if (!isFolder(path)) return false;
    const Location dir(path);
    const bool optimizer
        = !firstExisting(dir, {HfTrainerReader::kOptimizerFiles[0], HfTrainerReader::kOptimizerFiles[1]}).empty();
    const bool state = isFile(dir / HfTrainerReader::kTrainerStateFile);
    return optimizer || state;
}

std::shared_ptr<const Checkpoint> HfTrainerReader::open(const std::string& path, const Progress& progress)
{
    progress(0.0, "reading Trainer checkpoint");
    const Location dir(path);
    auto cp = std::make_shared<Checkpoint>();
    cp->format = CheckpointFormat::HfTrainer;
    cp->path = path;
    cp->arena = std::make_shared<PyArena>();
    cp->files = std::make_shared<CheckpointFiles>(dir.string());
    CheckpointBuilder builder(*cp);
    std::string detail = "Hugging Face Trainer folder: model ";

    const std::string modelFile = SafetensorsReader::modelFileIn(path);
    const std::string binModel = firstExisting(dir, {"pytorch_model.bin"});
    const std::string binIndex = firstExisting(dir, {kBinIndexFile});
    const KeyPath modelRoot {KeyPathElem::fromKey("model")};
    if (!modelFile.empty()) {
        detail += "safetensors (" + SafetensorsReader::addModel(*cp, builder, modelFile, modelRoot, progress) + ")";
    } else if (!binModel.empty()) {
        builder.addTorchSaveFile(binModel, modelRoot, progress);
        detail += binModel;
    } else if (!binIndex.empty()) {
        detail += binIndex + " (" + addTorchSaveShards(*cp, builder, binIndex, modelRoot, progress) + ")";
    } else {
        detail += "missing";
        builder.warn(ReaderCode::NoModel,
            "no model weights (model.safetensors, pytorch_model.bin or either's index) in " + path);
    }
    progress(0.4, "reading Trainer checkpoint");
    const std::string optimizer = firstExisting(dir, {kOptimizerFiles[0], kOptimizerFiles[1]});
    if (!optimizer.empty()) {
        builder.addTorchSaveFile(optimizer, {KeyPathElem::fromKey("optim")}, progress);
        detail += ", " + optimizer;
    } else {
        builder.warn(ReaderCode::NoOptimizer, "no optimizer.pt in " + path + " (saved with save_only_model=True?)");
    }
    progress(0.7, "reading Trainer checkpoint");
    std::error_code ec;
    // (accelerate's save_state names it scheduler.bin)
    if (const std::string scheduler = firstExisting(dir, {"scheduler.pt", "scheduler.bin"}); !scheduler.empty()) {
        try {
            builder.addTorchSaveFile(scheduler, {KeyPathElem::fromKey("scheduler")}, progress);
            detail += ", " + scheduler;
        } catch (const Error& e) {
            if (e.kind() == ErrorKind::Cancelled) throw;
            builder.error(ReaderCode::UnreadableValue, std::string(e.what()));
        }
    }
    if (isFile(dir / HfTrainerReader::kTrainerStateFile)) {
        addTrainerState(*cp, builder, kTrainerStateFile);
        detail += ", " + std::string(kTrainerStateFile);
    }
    // every other checkpoint-like file is named: RNG states and training args as expected, a second model or
    // optimizer (accelerate's save_state of several: model_1.safetensors, optimizer_1.bin) with a warning
    std::set<std::string> read;
    for (const auto& n : {optimizer, binModel, modelFile, binIndex})
        if (!n.empty()) read.insert(Location(n).filename().string());
    read.insert("scheduler.pt");
    read.insert("scheduler.bin");
    std::set<std::string> notRead, others;
    static const Pattern checkpointFile(R"(.*\.(pt|pth|bin|safetensors|pkl|ckpt))");
    static const Pattern another(R"((model|pytorch_model|optimizer|scheduler)_[0-9]+\.(safetensors|bin|pt))");
    for (const FolderEntry& e : listFolder(dir)) {
        const std::string& n = e.name;
        if (read.count(n) || !checkpointFile.matches(n) || !isFile(e.location)) continue;
        if (n.find("-of-") != std::string::npos) continue; // a shard of the sharded model, read through its index
        notRead.insert(n);
        if (another.matches(n)) others.insert(n);
    }
    std::string skipped;
    for (const auto& n : notRead)
        skipped += (skipped.empty() ? "" : ", ") + n;
    if (!skipped.empty()) detail += "; not read: " + skipped;
    if (!others.empty()) {
        std::string names;
        for (const auto& n : others)
            names += (names.empty() ? "" : ", ") + n;
        builder.warn(ReaderCode::UnreadFile,
            "this folder holds more models or optimizers than the first (accelerate's save_state of several): " + names
                + " are not part of this view; open each file on its own");
    }
    cp->formatDetail = detail;
    builder.finish();
    if (!optimizer.empty()) nameParameters(*cp, builder, optimizer);
    progress(1.0, "reading Trainer checkpoint");
    return cp;
}

} // namespace optscope
