// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/optim/param_table.h"
#include "optscope/base/error.h"
#include "optscope/base/pattern.h"
#include "optscope/io/csv.h"
#include "optscope/io/storage.h"
#include "optscope/model/flat_param_layout.h"
#include "optscope/optim/fqn_normalizer.h"
#include "optscope/optim/fsdp1_optim.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace optscope {

const char* nameSourceText(NameSource source)
{
    switch (source) {
    case NameSource::StateKey:
        return "state key";
    case NameSource::FlattenedKey:
        return "flattened state key";
    case NameSource::ParamNames:
        return "param_names";
    case NameSource::Fsdp1Layout:
        return "FSDP1 flat parameter layout";
    case NameSource::ModelInFile:
        return "model order (this checkpoint)";
    case NameSource::ReferenceOrder:
        return "model order (reference)";
    case NameSource::TrainerGroups:
        return "Hugging Face Trainer groups (decay, no-decay), shapes agree";
    case NameSource::None:
        return "";
    }
    return "";
}

const char* confidenceText(Confidence c)
{
    switch (c) {
    case Confidence::Stored:
        return "stored";
    case Confidence::Exact:
        return "exact";
    case Confidence::ShapeUnique:
        return "unique shape";
    case Confidence::IndexOrder:
        return "index order";
    case Confidence::OrderAssumed:
        return "order assumed";
    case Confidence::None:
        return "";
    }
    return "";
}

namespace {
std::vector<std::string> splitDots(const std::string& s)
{
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); ++i)
        if (i == s.size() || s[i] == '.') {
            out.push_back(s.substr(start, i - start));
            start = i + 1;
        }
    return out;
}

bool isNumber(const std::string& s)
{
    return !s.empty() && s.size() < 19 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
} // namespace

bool moduleOrderLess(const std::string& a, const std::string& b)
{
    const auto x = splitDots(a), y = splitDots(b);
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
        if (x[i] == y[i]) continue;
        const bool leafX = i + 1 == x.size(), leafY = i + 1 == y.size();
        if (leafX != leafY) return leafX; // named_parameters(): a module's own parameters, then its children's
        if (isNumber(x[i]) && isNumber(y[i])) return std::stoll(x[i]) < std::stoll(y[i]);
        if (leafX) { // torch's modules register weight, then bias
            auto rank = [](const std::string& n) { return n == "weight" ? 0 : n == "bias" ? 1 : 2; };
            if (rank(x[i]) != rank(y[i])) return rank(x[i]) < rank(y[i]);
        }
        return x[i] < y[i];
    }
    return x.size() < y.size();
}

bool trainerDecaysByName(const std::string& fqn, bool legacy)
{
    std::string lower = fqn;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (legacy) return lower.find("bias") == std::string::npos;
    static const Pattern forbidden("bias|layernorm|rmsnorm|(?:^|\\.)norm(?:$|\\.)|_norm(?:$|\\.)");
    return !forbidden.search(lower);
}

namespace {

/// where training checkpoints keep the model state dict next to the optimizer
const std::vector<std::string>& modelKeys()
{
    static const std::vector<std::string> k = {"model", "state_dict", "model_state_dict", "module"};
    return k;
}

int64_t numelOf(const std::vector<int64_t>& shape)
{
    int64_t n = 1;
    for (auto d : shape)
        n *= d;
    return n;
}

/// the first non-scalar tensor state (exp_avg, momentum_buffer, ...)
const Entry* shapedState(const OptimizerParam& p)
{
    for (const auto& [name, e] : p.states)
        if (e->isTensor() && !e->tensor->shape.empty()) return e;
    return nullptr;
}

std::string jumpKeyOf(const OptimizerView& view, const OptimizerParam* p)
{
    if (!p || p->states.empty()) return {};
    const Entry* e = p->states.begin()->second;
    if (!view.flattened && e->path.size() >= 2) return joinKeyPath(KeyPath(e->path.begin(), e->path.end() - 1));
    return e->key;
}

/// module prefixes FSDP auto-wrap policies usually wrap: items of ModuleLists ("layers.0", "blocks.1")
std::vector<std::string> guessUnits(const Checkpoint& model)
{
    std::vector<std::string> units;
    try {
        const Fsdp1Model m = Fsdp1Model::fromCheckpoint(model, {});
        static const Pattern item("^(.*?\\.\\d+)\\.");
        std::vector<std::string> groups;
        for (const auto& u : m.units)
            for (const auto& [fqn, shape] : u.params) {
                if (item.search(fqn, &groups) && std::find(units.begin(), units.end(), groups[1]) == units.end())
                    units.push_back(groups[1]);
            }
    } catch (const Error&) { }
    return units;
}

std::string join(const std::vector<std::string>& v, const char* sep)
{
    std::string s;
    for (const auto& x : v)
        s += (s.empty() ? "" : sep) + x;
    return s;
}

/// which rank wrote the file at @p path, if its name says so (optim_rank1.pt), or -1
int rankInFileName(const std::string& path)
{
    static const Pattern rankRe("rank[_-]?(\\d+)");
    const std::string base = path.substr(path.find_last_of('/') + 1);
    std::vector<std::string> rm;
    // (up to 9 digits: a longer number is no rank, and std::stoi would throw)
    return rankRe.search(base, &rm) && rm[1].size() <= 9 ? std::stoi(rm[1]) : -1;
}

/// Explains an id-keyed optimizer with 1-D states as raw FSDP1 flat parameters of @p model. Returns false when no
/// unit split and world size reproduce the shard sizes.
bool mapFsdp1(const Checkpoint& checkpoint, int index, const OptimizerView& view, const Checkpoint& model,
    const ParamTableOptions& options, std::vector<ParamRow>& rows, std::vector<std::string>& notes)
{
    const std::vector<std::string> ids = view.groupParams();
    if (ids.empty()) return false;
    std::vector<int64_t> shardNumel;
    for (const auto& id : ids) {
        const OptimizerParam* p = view.param(id);
        const Entry* e = p ? shapedState(*p) : nullptr;
        if (!e || e->tensor->shape.size() != 1) return false;
        shardNumel.push_back(e->tensor->shape[0]);
    }
    const std::vector<std::vector<std::string>> candidates = options.units.empty()
        ? std::vector<std::vector<std::string>> {guessUnits(model), {}}
        : std::vector<std::vector<std::string>> {options.units};
    for (const auto& units : candidates) {
        Fsdp1Model m;
        try {
            m = Fsdp1Model::fromCheckpoint(model, units);
        } catch (const Error&) {
            continue;
        }
        if (m.units.size() != ids.size()) continue;
        std::vector<FlatParamLayout> layouts;
        int world = 0;
        const int lo = options.worldSize > 0 ? options.worldSize : 1;
        const int hi = options.worldSize > 0 ? options.worldSize : 4096;
        for (int w = lo; w <= hi && !world; ++w) {
            layouts.clear();
            bool fits = true;
            for (size_t u = 0; u < m.units.size() && fits; ++u) {
                layouts.push_back(FlatParamLayout::compute(m.units[u].params, w, 0));
                fits = layouts.back().shardNumel == shardNumel[u];
            }
            if (fits) world = w;
        }
        if (!world) continue;
        const int fileRank = rankInFileName(checkpoint.path);
        notes.push_back("raw FSDP1 optimizer state (use_orig_params=False): " + std::to_string(ids.size())
            + " flat parameters over " + std::to_string(world) + " ranks, units "
            + (units.empty() ? std::string("(root only)") : join(units, ", ")) + ", parameters from " + model.path);
        if (fileRank >= 0) notes.push_back("this file is rank " + std::to_string(fileRank) + " (from its name)");
        for (size_t u = 0; u < m.units.size(); ++u) {
            const FlatParamLayout& layout = layouts[u];
            const OptimizerParam* p = view.param(ids[u]);
            std::vector<std::string> states;
            for (const auto& [name, e] : p->states)
                states.push_back(name);
            const auto infos = fileRank >= 0 && fileRank < world ? layout.shardParamInfos(fileRank)
                                                                 : std::vector<FlatParamLayout::ShardParamInfo> {};
            for (size_t k = 0; k < layout.members.size(); ++k) {
                const auto& member = layout.members[k];
                ParamRow r;
                r.optimizer = index;
                r.group = 0;
                r.position = static_cast<int>(u);
                r.id = ids[u];
                r.fqn = member.fqn;
                r.normalized = normalizeFqn(r.fqn).fqn;
                r.source = NameSource::Fsdp1Layout;
                r.confidence = Confidence::Exact;
                r.flatParam = static_cast<int>(u);
                r.flatUnit = m.units[u].prefix;
                r.flatOffset = member.offset;
                r.numel = member.numel;
                r.shape = member.shape;
                r.states = states;
                r.param = p;
                const int64_t first = member.offset / layout.shardNumel;
                const int64_t last = (member.offset + std::max<int64_t>(member.numel, 1) - 1) / layout.shardNumel;
                r.note = first == last ? "on rank " + std::to_string(first)
                                       : "split over ranks " + std::to_string(first) + "-" + std::to_string(last);
                if (k < infos.size()) {
                    const auto& info = infos[k];
                    r.note += info.inShard ? "; this file holds [" + std::to_string(info.intraStart) + ", "
                            + std::to_string(info.intraEnd) + "] at shard offset " + std::to_string(info.offsetInShard)
                                           : std::string("; not in this file");
                }
                r.jumpKey = jumpKeyOf(view, p);
                rows.push_back(std::move(r));
            }
        }
        return true;
    }
    return false;
}

const std::vector<int64_t>* shapeIn(const ModelParams& model, const std::string& fqn)
{
    auto it = model.shapes.find(fqn);
    return it == model.shapes.end() ? nullptr : &it->second;
}

/// an nn.LayerNorm by its parameters (the Trainer excludes it by type): a 1-D weight beside a bias of the same shape,
/// nothing else in the module (BatchNorm has running stats, Linear a 2-D weight). @p members: tensors per module
/// prefix ("ln_f." or ""), counted once per model.
bool looksLikeLayerNorm(const ModelParams& model, const std::map<std::string, int>& members, const std::string& fqn)
{
    const std::string suffix = "weight";
    if (fqn.size() < suffix.size() || fqn.compare(fqn.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
    const std::string module = fqn.substr(0, fqn.size() - suffix.size());
    if (!module.empty() && module.back() != '.') return false;
    const auto* w = shapeIn(model, fqn);
    const auto* b = shapeIn(model, module + "bias");
    const auto n = members.find(module);
    return w && b && w->size() == 1 && *w == *b && n != members.end() && n->second == 2;
}

/// tensors (parameters and buffers) directly in each module, by module prefix with its trailing dot
std::map<std::string, int> moduleMembers(const ModelParams& model)
{
    std::map<std::string, int> out;
    for (const auto& k : model.keys) {
        const auto dot = k.rfind('.');
        ++out[dot == std::string::npos ? std::string() : k.substr(0, dot + 1)];
    }
    return out;
}

/// Names the positions of one param group from its candidate parameters (in the model's order, or the guessed one)
/// by shapes (@p shapes: per position, empty when the parameter has no shaped state). With a known order the group is
/// the candidates in order, frozen ones (no state, not in the group) skipped; with an unknown order the k-th
/// position of a shape takes the k-th candidate of that shape. False when the shapes cannot be met.
bool matchGroup(const std::vector<std::string>& candidates, const std::vector<std::vector<int64_t>>& shapes,
    const ModelParams& model, std::vector<std::string>& names, std::vector<Confidence>& confidence)
{
    if (candidates.size() < shapes.size()) return false;
    const bool skips = candidates.size() > shapes.size();
    if (model.orderKnown) {
        // some candidates are frozen (in no group): where shapes leave a choice, the last fit in model order, as
        // frozen layers usually come first (a frozen embedding or bottom layers; TargetOptimizer::paramsOf likewise)
        std::vector<std::string> picked(shapes.size());
        size_t c = candidates.size();
        for (size_t w = shapes.size(); w-- > 0;) {
            const auto& want = shapes[w];
            for (; c > 0; --c) {
                const auto* s = shapeIn(model, candidates[c - 1]);
                if (want.empty() || !s || *s == want) break;
            }
            if (c == 0) return false;
            picked[w] = candidates[--c];
        }
        names.insert(names.end(), picked.begin(), picked.end());
        confidence.insert(confidence.end(), shapes.size(), skips ? Confidence::OrderAssumed : Confidence::Exact);
        return true;
    }
    std::map<std::vector<int64_t>, std::vector<std::string>> byShape; // candidates of each shape, in order
    for (const auto& c : candidates) {
        const auto* s = shapeIn(model, c);
        byShape[s ? *s : std::vector<int64_t> {}].push_back(c);
    }
    // a shape class whose names differ only in numeric items (layers.0.fc.weight, layers.1.fc.weight) is ordered by
    // those indices for sure; count what each class needs, to see whether frozen ones were skipped in it
    auto templateOf = [](const std::string& n) {
        std::string t;
        for (const auto& part : splitDots(n))
            t += (t.empty() ? "" : ".") + (isNumber(part) ? std::string("#") : part);
        return t;
    };
    std::map<std::vector<int64_t>, size_t> wanted;
    for (const auto& want : shapes)
        if (!want.empty()) ++wanted[want];
    auto classConfidence = [&](const std::vector<std::string>& cls, const std::vector<int64_t>& shape) {
        if (cls.size() == 1) return Confidence::ShapeUnique;
        if (wanted[shape] != cls.size()) return Confidence::OrderAssumed; // some of this shape are frozen: which?
        const std::string t = templateOf(cls.front());
        for (const auto& n : cls)
            if (templateOf(n) != t) return Confidence::OrderAssumed;
        return Confidence::IndexOrder;
    };
    std::map<std::vector<int64_t>, Confidence> classCache; // one verdict per shape class
    std::map<std::vector<int64_t>, size_t> next;
    std::set<std::string> used;
    const size_t first = names.size();
    for (const auto& want : shapes) {
        if (want.empty()) {
            names.emplace_back();
            confidence.push_back(Confidence::OrderAssumed);
            continue;
        }
        auto it = byShape.find(want);
        size_t& k = next[want];
        if (it == byShape.end() || k >= it->second.size()) return false;
        names.push_back(it->second[k++]);
        used.insert(names.back());
        auto cached = classCache.find(want);
        if (cached == classCache.end()) cached = classCache.emplace(want, classConfidence(it->second, want)).first;
        confidence.push_back(cached->second);
    }
    // positions without a shaped state take the candidates left over, in order
    size_t c = 0;
    for (size_t i = first; i < names.size(); ++i) {
        if (!names[i].empty()) continue;
        while (c < candidates.size() && used.count(candidates[c]))
            ++c;
        if (c == candidates.size()) return false;
        names[i] = candidates[c];
        used.insert(candidates[c++]);
    }
    return true;
}

} // namespace

namespace {

/// what makes two torch.save tensors one: the same bytes of the same storage record viewed the same way; "" for a
/// tensor that is not one stored view (DCP chunks, several chunks)
std::string storageViewOf(const Entry& e)
{
    if (e.tensor->chunks.size() != 1 || !e.tensor->chunks.hasFile(0)) return {};
    const TensorChunk c = e.tensor->chunks[0];
    if (c.source.kind != ChunkSource::Kind::StorageRecord) return {};
    std::string key = c.source.file + '\n' + std::to_string(c.source.offset) + ' '
        + std::to_string(c.source.storageOffset) + ' ' + std::string(dtypeName(e.tensor->dtype));
    for (const int64_t s : e.tensor->shape)
        key += ' ' + std::to_string(s);
    key += " /";
    for (const int64_t s : c.source.strides)
        key += ' ' + std::to_string(s);
    return key;
}

} // namespace

std::optional<ModelParams> ModelParams::modelPartOf(const Checkpoint& cp)
{
    return modelPartOf(cp, !findOptimizers(cp).empty());
}

std::optional<ModelParams> ModelParams::modelPartOf(const Checkpoint& cp, bool holdsOptimizer)
{
    // a model state dict under one of the usual keys, the shallowest first and at a depth in the usual keys' order
    // (a trainer's checkpoint nests it: {"ckpt": {"model": ..., "optim": ...}}, Composer's {"state": {"model": ...}}),
    // else top-level tensors when the file holds no optimizer
    std::optional<KeyPath> under;
    size_t underRank = 0;
    for (const auto& e : cp.entries) {
        const KeyPath& p = e.path;
        if (!e.isTensor() || p.size() < 2 || (under && p.size() - 1 > under->size())) continue;
        if (!std::all_of(p.begin(), p.end() - 1, [](const KeyPathElem& x) { return !x.isIndex(); })) continue;
        const auto& keys = modelKeys();
        const size_t rank
            = static_cast<size_t>(std::find(keys.begin(), keys.end(), p[p.size() - 2].key) - keys.begin());
        if (rank == keys.size()) continue;
        if (under && p.size() - 1 == under->size() && rank >= underRank) continue;
        under = KeyPath(p.begin(), p.end() - 1);
        underRank = rank;
    }
    if (!under && holdsOptimizer) return std::nullopt;
    ModelParams m;
    m.source = cp.path;
    if (under) {
        m.root = *under;
        m.source += " ('" + joinKeyPath(*under) + "')";
    }
    std::map<std::string, std::string> firstOfView; // storage view -> the first parameter saved as it
    for (const auto& e : cp.entries) {
        if (!e.isTensor()) continue;
        std::string fqn;
        if (under && e.path.size() == under->size() + 1 && std::equal(under->begin(), under->end(), e.path.begin()))
            fqn = e.path.back().key;
        else if (!under && e.path.size() == 1)
            fqn = e.path[0].key;
        else
            continue;
        m.shapes[fqn] = e.tensor->shape;
        m.dtypes[fqn] = e.tensor->dtype;
        m.keys.push_back(fqn);
        if (isDTensorSubclass(e.tensor->subclass.str())) m.dtensors.insert(fqn);
        if (isKnownBufferName(fqn)) {
            m.buffers.push_back(fqn);
        } else if (const std::string view = storageViewOf(e); !view.empty()) {
            const auto [it, first] = firstOfView.emplace(view, fqn);
            if (first)
                m.fqns.push_back(fqn);
            else
                m.tiedTo.emplace(fqn, it->second);
        } else {
            m.fqns.push_back(fqn);
        }
        // safetensors lays tensors out by dtype and name: the model's order is not in the file
        const std::string sfx = ".safetensors";
        if (!e.tensor->chunks.empty()) {
            const std::string& file = e.tensor->chunks[0].source.file;
            if (file.size() >= sfx.size() && file.compare(file.size() - sfx.size(), sfx.size(), sfx) == 0)
                m.orderKnown = false;
        }
    }
    if (m.fqns.empty()) return std::nullopt;
    m.tensorClassesKnown = cp.format == CheckpointFormat::TorchSave || cp.format == CheckpointFormat::Safetensors
        || cp.format == CheckpointFormat::HfTrainer;
    if (!m.orderKnown) {
        std::stable_sort(m.fqns.begin(), m.fqns.end(), moduleOrderLess);
        std::stable_sort(m.keys.begin(), m.keys.end(), moduleOrderLess);
        m.source += " (parameter order not stored: guessed from names)";
    }
    return m;
}

ModelParams ModelParams::fromCheckpoint(const Checkpoint& model)
{
    ModelParams e;
    e.source = model.path;
    // a reference optimizer: its param_groups are the truth (names, order, groups)
    const ParamTable table = ParamTable::build(model);
    for (size_t i = 0; i < table.optimizers.size(); ++i) {
        const auto names = table.fqnsInOrder(static_cast<int>(i));
        if (names.empty() || std::find(names.begin(), names.end(), std::string()) != names.end()) continue;
        e.fqns = names;
        e.fromOptimizer = true;
        const OptimizerView& v = table.optimizers[i];
        size_t k = 0;
        for (const auto& g : v.groups) {
            e.groups.emplace_back(names.begin() + static_cast<std::ptrdiff_t>(k),
                names.begin() + static_cast<std::ptrdiff_t>(k + g.params.size()));
            k += g.params.size();
        }
        for (const ParamRow* r : table.rowsOf(static_cast<int>(i)))
            if (!r->fqn.empty() && !r->shape.empty() && keepsAllStateOnFirstParam(table.kinds[i]) == false)
                e.shapes.emplace(r->fqn, r->shape);
        e.source = model.path + " (optimizer '" + v.rootKey() + "')";
        break;
    }
    if (auto part = modelPartOf(model)) {
        // the model's shapes are the truth; its order too when no optimizer names the parameters
        for (const auto& [k, s] : part->shapes)
            e.shapes[k] = s;
        e.dtypes = part->dtypes;
        e.buffers = part->buffers;
        e.keys = part->keys;
        e.tiedTo = part->tiedTo;
        e.root = part->root;
        e.tensorClassesKnown = part->tensorClassesKnown;
        e.dtensors = part->dtensors;
        if (e.fqns.empty()) {
            e.fqns = part->fqns;
            e.source = part->source;
            e.orderKnown = part->orderKnown;
        }
    }
    if (e.fqns.empty())
        throw Error(ErrorKind::Format, model.path, "names no parameters (no model tensors and no named optimizer)");
    return e;
}

bool ModelParams::looksLikeFqnList(const uint8_t* head, size_t size)
{
    size_t first = 0;
    while (first < size && (head[first] == ' ' || head[first] == '\t' || head[first] == '\r' || head[first] == '\n'))
        ++first;
    if (first < size && (head[first] == '{' || head[first] == '[')) return false;
    return std::none_of(
        head, head + size, [](uint8_t c) { return (c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f; });
}

ModelParams ModelParams::fromFqnList(const std::string& location)
{
    // a list of a million FQNs is some 60 MB
    std::istringstream in(readSmallFile(location, uint64_t(1) << 30));
    const std::string path = displayLocation(location);
    ModelParams e;
    e.source = path;
    std::string line;
    int lineNo = 0;
    while (std::getline(in, line)) {
        ++lineNo;
        if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
        std::istringstream ls(line);
        std::string fqn, shape;
        if (!(ls >> fqn)) continue;
        e.fqns.push_back(fqn);
        if (ls >> shape) {
            std::vector<int64_t> dims;
            std::istringstream ss(shape);
            std::string part;
            while (std::getline(ss, part, ','))
                try {
                    dims.push_back(std::stoll(part));
                } catch (...) {
                    throw Error(
                        ErrorKind::Format, path, "line " + std::to_string(lineNo) + ": bad shape '" + shape + "'");
                }
            e.shapes[fqn] = dims;
        }
    }
    if (e.fqns.empty()) throw Error(ErrorKind::Format, path, "lists no FQNs");
    e.keys = e.fqns;
    return e;
}

namespace {

/// An id-keyed optimizer's parameters named: a name per position (as its param_groups list them), how sure each is,
/// and the rule that named them (None: no rule could).
struct IdNames
{
    std::vector<std::string> names;
    std::vector<Confidence> confidences; ///< per name, when derived
    NameSource source = NameSource::None;
    bool rankSlices = false; ///< FSDP1 use_orig_params=True: each state is one rank's slice of its parameter
};

/// per param group, per position: the parameter's shape as its state says (empty when it has none)
using GroupShapes = std::vector<std::vector<std::vector<int64_t>>>;

GroupShapes stateShapesByGroup(const OptimizerView& view, OptimizerKind kind)
{
    GroupShapes shapes;
    for (const auto& g : view.groups) {
        shapes.emplace_back();
        for (const auto& id : g.params) {
            const OptimizerParam* p = view.param(id);
            shapes.back().push_back(p ? paramShapeFromState(kind, *p) : std::vector<int64_t> {});
        }
    }
    return shapes;
}

std::vector<std::vector<int64_t>> allShapes(const GroupShapes& groups)
{
    std::vector<std::vector<int64_t>> all;
    for (const auto& g : groups)
        all.insert(all.end(), g.begin(), g.end());
    return all;
}

/// 2. param_names in every group
bool nameByParamNames(const OptimizerView& view, IdNames& out)
{
    bool complete = !view.groups.empty();
    std::vector<std::string> names;
    for (const auto& g : view.groups) {
        complete = complete && g.paramNames.size() == g.params.size();
        names.insert(names.end(), g.paramNames.begin(), g.paramNames.end());
    }
    if (!complete || names.empty()) return false;
    out.names = std::move(names);
    out.source = NameSource::ParamNames;
    return true;
}

/// whether @p m, in its order, names the @p count ids position by position with shapes that fit
bool fitsByPosition(const ModelParams& m, size_t count, const GroupShapes& groupShapes)
{
    if (m.fqns.size() != count) return false;
    std::vector<std::string> n;
    std::vector<Confidence> c;
    ModelParams known = m;
    known.orderKnown = true;
    return matchGroup(m.fqns, allShapes(groupShapes), known, n, c);
}

/// 6. the Hugging Face Trainer's two groups, weight decay then none: the current rule by names, then the pre-4.48 one
/// ("bias" only); 1-D weights beside a bias of their shape (nn.LayerNorm, excluded by type) first without decay, then
/// with
bool nameByTrainerGroups(const OptimizerView& view, size_t count, const ModelParams& model,
    const GroupShapes& groupShapes, IdNames& out, std::vector<std::string>& notes)
{
    const auto members = moduleMembers(model);
    std::vector<char> byName, byNameLegacy, layerNorm; // per parameter, computed once
    for (const auto& f : model.fqns) {
        byName.push_back(trainerDecaysByName(f, false));
        byNameLegacy.push_back(trainerDecaysByName(f, true));
        layerNorm.push_back(looksLikeLayerNorm(model, members, f));
    }
    for (const bool legacy : {false, true})
        for (const bool layerNormByType : {true, false}) {
            std::vector<std::string> decay, noDecay;
            for (size_t k = 0; k < model.fqns.size(); ++k) {
                const bool wd = (legacy ? byNameLegacy[k] : byName[k]) && !(layerNormByType && layerNorm[k]);
                (wd ? decay : noDecay).push_back(model.fqns[k]);
            }
            std::vector<std::string> n;
            std::vector<Confidence> c;
            if (!matchGroup(decay, groupShapes[0], model, n, c) || !matchGroup(noDecay, groupShapes[1], model, n, c))
                continue;
            out.names = std::move(n);
            out.confidences = std::move(c);
            out.source = NameSource::TrainerGroups;
            const size_t frozen = model.fqns.size() - count;
            notes.push_back("'" + view.rootKey() + "': the Hugging Face Trainer's groups ("
                + std::to_string(decay.size()) + " parameters with weight decay, then " + std::to_string(noDecay.size())
                + " without" + (legacy ? ", pre-4.48 rule: only 'bias' by name" : "")
                + (frozen ? "; " + std::to_string(frozen) + " frozen, in no group" : std::string())
                + ") fit every state's shape, parameters from " + model.source);
            return true;
        }
    return false;
}

/// a model that does not record its parameters' order: the groups in model order, matched by shapes, frozen
/// parameters skipped
void nameByShapes(const OptimizerView& view, size_t count, const ModelParams& model, NameSource source,
    const GroupShapes& groupShapes, IdNames& out, std::vector<std::string>& notes)
{
    std::vector<std::string> n;
    std::vector<Confidence> c;
    if (matchGroup(model.fqns, allShapes(groupShapes), model, n, c)) {
        out.names = std::move(n);
        out.confidences = std::move(c);
        out.source = source;
        notes.push_back("'" + view.rootKey() + "': " + model.source
            + " does not record the parameters' order: ids matched by shapes");
    } else {
        notes.push_back("'" + view.rootKey() + "': the shapes of its " + std::to_string(count)
            + " parameters cannot be matched to the " + std::to_string(model.fqns.size()) + " of " + model.source);
    }
}

/// 4./5. a model whose order is known, position by position; where the states' shapes disagree with that order, one
/// rank's FSDP1 slices, or param_groups that list the parameters in another order
void nameByModelOrder(const OptimizerView& view, OptimizerKind kind, size_t count, const ModelParams& m,
    NameSource source, const GroupShapes& groupShapes, IdNames& out, std::vector<std::string>& notes)
{
    if (m.fqns.size() != count) {
        // fewer: an optimizer over some of the parameters (a bias-only or a temperature optimizer), named when each
        // state's shape is that of one parameter of the model only (otherwise which of them is a guess: the parts of
        // several optimizers over one model are worked out from all of them, in the diagnosis)
        std::vector<std::string> n;
        std::vector<Confidence> c;
        std::map<std::vector<int64_t>, int> seen;
        for (const auto& f : m.fqns)
            if (const auto* s = shapeIn(m, f)) ++seen[*s];
        const auto shapes = allShapes(groupShapes);
        const bool unique = std::all_of(shapes.begin(), shapes.end(), [&](const auto& s) { return seen[s] == 1; });
        if (unique && m.fqns.size() > count && matchGroup(m.fqns, shapes, m, n, c)) {
            c.assign(n.size(), Confidence::ShapeUnique);
            out.names = std::move(n);
            out.confidences = std::move(c);
            out.source = source;
            notes.push_back("'" + view.rootKey() + "' has " + std::to_string(count) + " of the "
                + std::to_string(m.fqns.size()) + " parameters of " + m.source + ": named by their states' shapes");
            return;
        }
        notes.push_back("'" + view.rootKey() + "' has " + std::to_string(count) + " parameters but " + m.source
            + " has " + std::to_string(m.fqns.size()) + ": ids cannot be named by position");
        return;
    }
    out.names = m.fqns;
    out.source = source;
    if (fitsByPosition(m, count, groupShapes)) {
        out.confidences.assign(out.names.size(), Confidence::Exact);
        return;
    }
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& f : m.fqns) {
        const auto it = m.shapes.find(f);
        shapes.push_back(it == m.shapes.end() ? std::vector<int64_t> {} : it->second);
    }
    if (isOrigParamsRankSlices(view, shapes, keepsAllStateOnFirstParam(kind))) {
        // one rank's slices of the parameters (FSDP1 use_orig_params=True): ids in model order, each slice no
        // longer than its parameter
        out.confidences.assign(out.names.size(), Confidence::Exact);
        out.rankSlices = true;
        notes.push_back("'" + view.rootKey()
            + "' is one rank's raw optimizer state of FSDP1 with use_orig_params=True: each parameter's state is the "
              "rank's 1-D slice of it (none for parameters wholly on other ranks); named by position from "
            + m.source);
        return;
    }
    // ids follow the param_groups, which need not follow the model (SGD([{fc2}, {fc1}])): when the shapes disagree
    // with the model's order, the k-th position of a shape is the k-th parameter of that shape
    ModelParams unordered = m;
    unordered.orderKnown = false;
    std::vector<std::string> n;
    std::vector<Confidence> c;
    if (matchGroup(m.fqns, allShapes(groupShapes), unordered, n, c)) {
        out.names = std::move(n);
        out.confidences = std::move(c);
        notes.push_back("'" + view.rootKey() + "': its param_groups do not list the parameters in the order of "
            + m.source + " (the state's shapes say so): ids matched by shapes");
    } else {
        out.confidences.assign(out.names.size(), Confidence::OrderAssumed);
    }
}

/// 4.-6. ids named from a model: @p inFile (the model saved beside the optimizer) or else @p reference. The
/// Trainer's groups when they fit the shapes (and the model's own order does not); a model without a known order by
/// shapes; else by position
void nameByModel(const OptimizerView& view, OptimizerKind kind, size_t count, const ModelParams* inFile,
    const ModelParams* reference, IdNames& out, std::vector<std::string>& notes)
{
    const ModelParams* byShape = inFile ? inFile : reference;
    const GroupShapes groupShapes = stateShapesByGroup(view, kind);
    if (byShape && view.groups.size() == 2 && byShape->fqns.size() >= count
        && !(byShape->orderKnown && fitsByPosition(*byShape, count, groupShapes)))
        nameByTrainerGroups(view, count, *byShape, groupShapes, out, notes);
    if (out.source == NameSource::None && byShape && !byShape->orderKnown)
        nameByShapes(view, count, *byShape, inFile ? NameSource::ModelInFile : NameSource::ReferenceOrder, groupShapes,
            out, notes);
    const std::pair<const ModelParams*, NameSource> candidates[]
        = {{inFile, NameSource::ModelInFile}, {reference, NameSource::ReferenceOrder}};
    for (const auto& [m, source] : candidates)
        if (m && out.source == NameSource::None && m->orderKnown)
            nameByModelOrder(view, kind, count, *m, source, groupShapes, out, notes);
    size_t assumed = 0;
    for (auto c : out.confidences)
        assumed += c == Confidence::OrderAssumed;
    if (assumed)
        notes.push_back("'" + view.rootKey() + "': " + std::to_string(assumed) + " of "
            + std::to_string(out.confidences.size())
            + " names rest on an assumed order (parameters of one shape in one group, or frozen ones skipped): shapes "
              "cannot tell them apart");
}

/// a note per model whose tied weights were saved as one tensor: @p reference always, the model in the file when
/// the table lists an optimizer's parameters
void noteTiedWeights(
    const ModelParams* reference, const ModelParams* inFile, bool optimizers, std::vector<std::string>& notes)
{
    for (const ModelParams* m : {reference, inFile})
        if (m && !m->tiedTo.empty() && (m == reference || optimizers)) {
            std::string tied;
            for (const auto& [name, to] : m->tiedTo)
                tied += (tied.empty() ? "" : ", ") + name + " = " + to;
            notes.push_back(m->source + ": tied weights saved as one tensor (" + tied
                + "): one parameter each, as model.parameters() lists them");
        }
}

/// The parameters a reader named for the optimizer @p view (its file keyed them by integer id): FQN -> origin, and
/// the rule it named them by in @p readerSource (unchanged when it named none)
std::map<std::string, const ParamOrigin*> readerNamed(
    const Checkpoint& checkpoint, const OptimizerView& view, NameSource& readerSource)
{
    std::map<std::string, const ParamOrigin*> origins;
    for (const auto& o : checkpoint.paramOrigins)
        if (!view.idKeyed && o.optimizer == view.rootKey()) {
            origins.emplace(o.fqn, &o);
            for (auto s : {NameSource::ModelInFile, NameSource::ReferenceOrder, NameSource::TrainerGroups,
                     NameSource::ParamNames, NameSource::Fsdp1Layout})
                if (o.how == nameSourceText(s)) readerSource = s;
        }
    return origins;
}

/// how the rows of one optimizer are named: the names of its id-keyed parameters in group order (or none: its keys
/// are names), the rule, and the reader's namings
struct RowNaming
{
    NameSource source = NameSource::None;
    NameSource readerSource = NameSource::None;
    std::vector<std::string> names;
    std::vector<Confidence> confidences;
    std::map<std::string, const ParamOrigin*> origins;
};

/// the name, rule and confidence of row @p r (parameter @p i of @p order; @p inGroups: param_groups lists it)
void nameRow(ParamRow& r, const OptimizerView& view, const RowNaming& naming, size_t i, bool inGroups)
{
    if (!view.idKeyed) {
        r.fqn = r.id;
        r.source = naming.source;
        r.confidence = Confidence::Stored;
        // a parameter the reader named (its file keyed it by integer id): that id and the rule
        if (auto o = naming.origins.find(r.id); o != naming.origins.end()) {
            r.id = o->second->id;
            r.source = naming.readerSource;
            for (auto c : {Confidence::Stored, Confidence::Exact, Confidence::ShapeUnique, Confidence::IndexOrder,
                     Confidence::OrderAssumed})
                if (o->second->confidence == confidenceText(c)) r.confidence = c;
        }
    } else if (inGroups && i < naming.names.size()) {
        r.fqn = naming.names[i];
        r.source = naming.source;
        r.confidence = naming.source == NameSource::ParamNames ? Confidence::Stored
            : i < naming.confidences.size()                    ? naming.confidences[i]
                                                               : Confidence::Exact;
    }
}

/// the shape, numel and note of row @p r: from its state, then the model's shape for its name (@p shapesFrom)
void shapeRow(ParamRow& r, OptimizerKind kind, const OptimizerParam* p, bool inGroups, bool rankSlices,
    const ModelParams* shapesFrom)
{
    if (p) {
        for (const auto& [name, e] : p->states)
            r.states.push_back(name);
        r.shape = paramShapeFromState(kind, *p);
        if (!r.shape.empty()) r.numel = numelOf(r.shape);
    } else if (inGroups) {
        r.note = "no state (frozen, or no step taken yet)";
    }
    if (shapesFrom && !r.fqn.empty()) {
        auto ms = shapesFrom->shapes.find(r.fqn);
        if (ms == shapesFrom->shapes.end()) ms = shapesFrom->shapes.find(r.normalized);
        if (ms != shapesFrom->shapes.end()) {
            const auto want
                = p ? expectedStateShape(kind, "exp_avg", ms->second) : std::optional<std::vector<int64_t>>();
            if (p && want && r.shape != *want && !r.shape.empty())
                r.note = "state shape " + shapeText(r.shape) + " differs from the model's " + shapeText(ms->second);
            r.shape = ms->second;
            r.numel = numelOf(r.shape);
        }
    }
    if (rankSlices && inGroups) {
        // FSDP1 use_orig_params=True: the state is this rank's slice of the parameter
        const int64_t held = p && shapedState(*p) ? shapedState(*p)->tensor->shape[0] : 0;
        r.note = "this rank holds " + std::to_string(held) + " of its " + std::to_string(r.numel)
            + " elements (FSDP1 use_orig_params=True slice)";
    }
    if (!inGroups) r.note = "has state but is in no param_group";
    if (keepsAllStateOnFirstParam(kind) && r.position > 0 && !p)
        r.note = std::string(optimizerKindName(kind)) + " keeps its state on the first parameter";
}

/// the rows of a model-only checkpoint: its parameters
void addModelRows(const ModelParams& m, std::vector<ParamRow>& rows)
{
    for (const auto& fqn : m.fqns) {
        ParamRow r;
        r.fqn = fqn;
        r.confidence = Confidence::Stored;
        r.normalized = normalizeFqn(fqn).fqn;
        if (const auto s = m.shapes.find(fqn); s != m.shapes.end()) r.shape = s->second;
        r.numel = numelOf(r.shape);
        r.jumpKey = (m.root.empty() ? std::string() : joinKeyPath(m.root) + ".") + fqn;
        rows.push_back(std::move(r));
    }
}

/// parameters stored in flat per-rank partitions (DeepSpeed ZeRO, Megatron's buckets): the flat columns say where, as
/// for FSDP1
void placeFlatSlots(const Checkpoint& checkpoint, ParamTable& table)
{
    if (checkpoint.flatSlots.empty()) return;
    std::map<std::string, const FlatPartitionSlot*> slotOf;
    for (const auto& slot : checkpoint.flatSlots)
        slotOf.emplace(slot.fqn, &slot);
    size_t mapped = 0;
    for (auto& r : table.rows) {
        auto it = slotOf.find(r.fqn);
        // only the main model-parallel rank's optimizer ("optim"); others sit under their mp_rank_MM prefix
        const bool mainOptimizer
            = r.optimizer < 0 || table.optimizers[static_cast<size_t>(r.optimizer)].rootKey() == "optim";
        if (it == slotOf.end() || r.flatParam >= 0 || !mainOptimizer) continue;
        r.flatParam = it->second->buffer;
        r.flatUnit = it->second->bufferName;
        r.flatOffset = it->second->offset;
        const std::string where
            = it->second->bufferName + " at " + std::to_string(it->second->offset) + ": " + it->second->note;
        r.note = r.note.empty() ? where : r.note + "; " + where;
        ++mapped;
    }
    if (mapped)
        table.notes.push_back(std::to_string(mapped) + " parameters lie in flat per-rank partitions ("
            + checkpoint.formatDetail + "): flat parameter = the partitioned buffer, offset = first element in it");
}

/// How the id-keyed parameters of optimizer @p index are named (by stored param_names, by the model's order and
/// shapes); false when they were mapped as raw FSDP1 shards, whose rows mapFsdp1 added
bool nameIds(ParamTable& t, const Checkpoint& checkpoint, int index, const ModelParams* reference,
    const Checkpoint* referenceCheckpoint, const ParamTableOptions& options, IdNames& named)
{
    const OptimizerView& view = t.optimizers[static_cast<size_t>(index)];
    const std::vector<std::string> ids = view.groupParams();
    if (!view.idKeyed || nameByParamNames(view, named)) return true;
    // 3. raw FSDP1 shards: fewer, all 1-D "parameters" than the model has
    bool oneDim = !view.params.empty() && !keepsAllStateOnFirstParam(t.kinds.back());
    for (const auto& p : view.params) {
        const Entry* e = shapedState(p);
        oneDim = oneDim && (!e || e->tensor->shape.size() == 1);
    }
    const Checkpoint* modelCp = t.modelInFile ? &checkpoint : referenceCheckpoint;
    const ModelParams* model = t.modelInFile ? &*t.modelInFile : reference;
    if (oneDim && modelCp && model && model->fqns.size() != ids.size()) {
        // 1-D states that are the shapes of some of the model's 1-D parameters, in order (an optimizer over the
        // biases, a learnable temperature) are that, not flat parameters whose shard size happens to match
        // (a world size up to 4,096 fits almost any size), unless the FSDP1 layout is asked for or the file's name
        // says it is one rank's (optim_rank0.pt: Linear(3, 15) on 4 ranks has flat shards of its bias's size)
        std::vector<std::string> n;
        std::vector<Confidence> c;
        const auto shapes = allShapes(stateShapesByGroup(view, t.kinds.back()));
        const bool plainSubset = options.worldSize <= 0 && options.units.empty() && rankInFileName(checkpoint.path) < 0
            && model->fqns.size() > ids.size()
            && std::none_of(shapes.begin(), shapes.end(), [](const auto& s) { return s.empty(); })
            && matchGroup(model->fqns, shapes, *model, n, c);
        if (plainSubset)
            t.notes.push_back("'" + view.rootKey() + "': its 1-D states have the shapes of model parameters, read "
                + "as a plain optimizer over them; for one rank's raw FSDP1 flat parameters give --world-size (or a "
                  "file name with its rank, optim_rank0.pt)");
        else if (mapFsdp1(checkpoint, index, view, *modelCp, options, t.rows, t.notes)) {
            t.sources.push_back(NameSource::Fsdp1Layout);
            return false;
        }
    }
    if (oneDim && !model && ids.size() > 0)
        t.notes.push_back("every state of '" + view.rootKey()
            + "' is 1-D: if this is a raw FSDP1 optimizer file, give the model to map flat parameters to FQNs");
    nameByModel(view, t.kinds.back(), ids.size(), t.modelInFile ? &*t.modelInFile : nullptr, reference, named, t.notes);
    return true;
}

} // namespace

ParamTable ParamTable::build(const Checkpoint& checkpoint, const ModelParams* reference,
    const Checkpoint* referenceCheckpoint, const ParamTableOptions& options)
{
    ParamTable out;
    out.optimizers = findOptimizers(checkpoint);
    out.modelInFile = ModelParams::modelPartOf(checkpoint, !out.optimizers.empty());
    if (!out.optimizers.empty() && out.modelInFile && out.modelInFile->root.empty()) out.modelInFile.reset();
    const ModelParams* shapesFrom = reference ? reference : out.modelInFile ? &*out.modelInFile : nullptr;
    noteTiedWeights(reference, out.modelInFile ? &*out.modelInFile : nullptr, !out.optimizers.empty(), out.notes);

    for (size_t oi = 0; oi < out.optimizers.size(); ++oi) {
        const int index = static_cast<int>(oi);
        const OptimizerView& view = out.optimizers[oi];
        out.kinds.push_back(detectOptimizerKind(view));
        out.rankSlices.push_back(0);
        IdNames named;
        named.source = view.idKeyed ? NameSource::None
            : view.flattened        ? NameSource::FlattenedKey
                                    : NameSource::StateKey;
        if (!nameIds(out, checkpoint, index, reference, referenceCheckpoint, options, named)) continue;
        out.rankSlices.back() = named.rankSlices;
        RowNaming naming;
        naming.source = named.source;
        naming.readerSource = named.source;
        naming.names = std::move(named.names);
        naming.confidences = std::move(named.confidences);
        naming.origins = readerNamed(checkpoint, view, naming.readerSource);
        if (!naming.origins.empty()) {
            naming.source = naming.readerSource;
            out.notes.push_back("'" + view.rootKey() + "': " + std::to_string(naming.origins.size())
                + " parameters were keyed by integer id in the file; the reader named them by "
                + nameSourceText(naming.readerSource));
        }
        out.sources.push_back(naming.source);

        std::map<std::string, int> groupOf;
        for (size_t g = 0; g < view.groups.size(); ++g)
            for (const auto& p : view.groups[g].params)
                groupOf.emplace(p, static_cast<int>(g));
        // every parameter named by param_groups, then any with state but no group
        const std::vector<std::string> ids = view.groupParams();
        std::vector<std::string> order = ids;
        std::set<std::string> seen(ids.begin(), ids.end());
        for (const auto& p : view.params)
            if (seen.insert(p.key).second) order.push_back(p.key);
        for (size_t i = 0; i < order.size(); ++i) {
            const OptimizerParam* p = view.param(order[i]);
            const bool inGroups = i < ids.size();
            ParamRow r;
            r.optimizer = index;
            r.id = order[i];
            r.param = p;
            r.position = inGroups ? static_cast<int>(i) : -1;
            nameRow(r, view, naming, i, inGroups);
            r.normalized = normalizeFqn(r.fqn).fqn;
            auto git = groupOf.find(order[i]);
            r.group = git == groupOf.end() ? -1 : git->second;
            shapeRow(r, out.kinds.back(), p, inGroups, out.rankSlices.back(), shapesFrom);
            r.jumpKey = jumpKeyOf(view, p);
            out.rows.push_back(std::move(r));
        }
    }
    if (out.optimizers.empty()) {
        if (out.modelInFile) addModelRows(*out.modelInFile, out.rows); // without an optimizer nothing reset it
        if (out.rows.empty()) out.notes.push_back("no optimizer state dict and no model parameters found");
    }
    placeFlatSlots(checkpoint, out);
    return out;
}

std::vector<const ParamRow*> ParamTable::rowsOf(int optimizer) const
{
    std::vector<const ParamRow*> out;
    for (const auto& r : rows)
        if (r.optimizer == optimizer) out.push_back(&r);
    return out;
}

std::map<std::string, std::string> ParamTable::idToFqn(int optimizer) const
{
    std::map<std::string, std::string> out;
    for (const auto& r : rows)
        if (r.optimizer == optimizer && !r.fqn.empty() && r.source != NameSource::Fsdp1Layout) out.emplace(r.id, r.fqn);
    return out;
}

std::vector<std::string> ParamTable::fqnsInOrder(int optimizer) const
{
    std::vector<std::string> out;
    for (const auto& r : rows)
        if (r.optimizer == optimizer && r.position >= 0 && r.source != NameSource::Fsdp1Layout) out.push_back(r.fqn);
    return out;
}

nlohmann::ordered_json ParamTable::toJson() const
{
    using json = nlohmann::ordered_json;
    json j;
    j["optimizers"] = json::array();
    for (size_t i = 0; i < optimizers.size(); ++i)
        j["optimizers"].push_back({{"root", optimizers[i].rootKey()}, {"kind", optimizerKindName(kinds[i])},
            {"id_keyed", optimizers[i].idKeyed}, {"flattened", optimizers[i].flattened},
            {"groups", optimizers[i].groups.size()}, {"groups_guessed", optimizers[i].groupsGuessed},
            {"names_from", nameSourceText(sources[i])}});
    j["params"] = json::array();
    for (const auto& r : rows) {
        auto opt = [](bool has, json v) { return has ? v : json(nullptr); };
        j["params"].push_back({{"optimizer", r.optimizer < 0 ? json(nullptr) : json(optimizers[r.optimizer].rootKey())},
            {"id", r.id}, {"fqn", opt(!r.fqn.empty(), r.fqn)}, {"normalized", opt(!r.fqn.empty(), r.normalized)},
            {"source", nameSourceText(r.source)},
            {"confidence", opt(r.confidence != Confidence::None, confidenceText(r.confidence))},
            {"group", opt(r.group >= 0, r.group)}, {"position", opt(r.position >= 0, r.position)}, {"shape", r.shape},
            {"numel", opt(r.numel >= 0, r.numel)}, {"states", r.states},
            {"flat_param", opt(r.flatParam >= 0, r.flatParam)}, {"flat_unit", opt(r.flatParam >= 0, r.flatUnit)},
            {"flat_offset", opt(r.flatOffset >= 0, r.flatOffset)}, {"note", opt(!r.note.empty(), r.note)}});
    }
    j["notes"] = notes;
    return j;
}

std::string ParamTable::toCsv() const
{
    std::ostringstream out;
    writeCsv(out);
    return out.str();
}

void ParamTable::writeCsv(std::ostream& out) const
{
    CsvWriter w(out);
    w.row({"optimizer", "id", "fqn", "normalized", "source", "confidence", "group", "position", "shape", "numel",
        "states", "flat_param", "flat_unit", "flat_offset", "note"});
    auto num = [](int64_t v) { return v < 0 ? std::string() : std::to_string(v); };
    for (const auto& r : rows)
        w.row({r.optimizer < 0 ? std::string() : optimizers[static_cast<size_t>(r.optimizer)].rootKey(), r.id, r.fqn,
            r.normalized, nameSourceText(r.source), confidenceText(r.confidence), num(r.group), num(r.position),
            r.shape.empty() && r.numel < 0 ? "" : shapeText(r.shape), num(r.numel), join(r.states, " "),
            num(r.flatParam), r.flatUnit, num(r.flatOffset), r.note});
}

} // namespace optscope
