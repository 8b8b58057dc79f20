// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/analysis/diff_kernel.h"
#include "optscope/analysis/diff_report.h"
#include "optscope/analysis/json_text.h"
#include "optscope/analysis/value_compare.h"
#include "optscope/base/display_text.h"
#include "optscope/base/error.h"
#include "optscope/base/progress.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/csv.h"
#include "optscope/io/job.h"
#include "optscope/model/read_guard.h"
#include "optscope/model/shard_layout.h"
#include "optscope/optim/fqn_normalizer.h"
#include "optscope/optim/optimizer_view.h"
#include "optscope/optim/param_table.h"
#include "optscope/pickle/value_json.h"
#include "optscope/tensor/aten_bridge.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_values.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace optscope {

// a report's entries between the processes of a job (CBOR): every field, so that rank 0's output is the one-process
// output byte for byte
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(DiffRank, rank, numel, numDiff, maxAbsDiff)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(DiffEntry, keyA, keyB, tensor, status, reason, match, shapeA, shapeB, dtypeA, dtypeB,
    numel, valuesCompared, unreadable, comparedInPart, numDiff, maxAbsDiff, maxRelDiff, rmsDiff, finitePairs, nanA,
    nanB, infA, infB, ranks, valueA, valueB, histogramEdges, histogramCounts)

const char* diffStatusName(DiffStatus status)
{
    switch (status) {
    case DiffStatus::Equal:
        return "equal";
    case DiffStatus::Changed:
        return "changed";
    case DiffStatus::OnlyA:
        return "only_a";
    case DiffStatus::OnlyB:
        return "only_b";
    }
    return "?";
}

size_t DiffReport::count(DiffStatus status) const
{
    return (status == DiffStatus::Equal ? equalLeftOut : 0)
        + static_cast<size_t>(
            std::count_if(entries.begin(), entries.end(), [&](const DiffEntry& e) { return e.status == status; }));
}

namespace {

using json = nlohmann::ordered_json;

json numberJson(double v)
{
    return std::isfinite(v) ? json(v) : json(v > 0 ? "inf" : std::isnan(v) ? "nan" : "-inf");
}

/// one element of the report's "entries"
json entryJson(const DiffEntry& e)
{
    const auto num = numberJson;
    json je {{"key", e.key()}, {"status", diffStatusName(e.status)}, {"type", e.typeName()}};
    if (!isUtf8(e.key())) je["key_hex"] = hexBytes(e.key()); // the exact bytes (README: JSON output)
    je["reason"] = e.reason.empty() ? json(nullptr) : json(e.reason);
    je["match"] = e.match.empty() ? json(nullptr) : json(e.match);
    if (e.keyA != e.key() && !e.keyA.empty()) je["key_a"] = e.keyA;
    if (e.keyB != e.key() && !e.keyB.empty()) je["key_b"] = e.keyB;
    if (e.tensor) {
        je["max_abs_diff"] = num(e.maxAbsDiff);
        je["max_rel_diff"] = num(e.maxRelDiff);
        je["rms_diff"] = num(e.rmsDiff);
        if (e.valuesCompared) je["finite_pairs"] = e.finitePairs;
        je["num_diff"] = e.numDiff;
        je["numel"] = e.numel;
        je["values_compared"] = e.valuesCompared;
        je["dtype_a"] = e.dtypeA.empty() ? json(nullptr) : json(e.dtypeA);
        je["dtype_b"] = e.dtypeB.empty() ? json(nullptr) : json(e.dtypeB);
        je["shape_a"] = e.status == DiffStatus::OnlyB ? json(nullptr) : json(e.shapeA);
        je["shape_b"] = e.status == DiffStatus::OnlyA ? json(nullptr) : json(e.shapeB);
        je["nan"] = {e.nanA, e.nanB};
        je["inf"] = {e.infA, e.infB};
        if (!e.ranks.empty()) {
            json ranks = json::array();
            for (const auto& r : e.ranks)
                ranks.push_back({{"rank", r.rank}, {"numel", r.numel}, {"num_diff", r.numDiff},
                    {"max_abs_diff", num(r.maxAbsDiff)}});
            je["ranks"] = std::move(ranks);
        }
        if (!e.histogramCounts.empty()) {
            je["histogram"] = {{"edges", e.histogramEdges}, {"counts", e.histogramCounts}};
        }
    } else {
        if (e.status != DiffStatus::OnlyB) je["value_a"] = e.valueA;
        if (e.status != DiffStatus::OnlyA) je["value_b"] = e.valueB;
    }
    return je;
}

} // namespace

nlohmann::ordered_json DiffReport::toJson() const
{
    json j = headJson();
    for (const auto& e : entries)
        j["entries"].push_back(entryJson(e));
    return j;
}

nlohmann::ordered_json DiffReport::headJson() const
{
    json j;
    j["equal"] = equal;
    j["a"] = pathA;
    j["b"] = pathB;
    j["summary"] = {{"equal", count(DiffStatus::Equal)}, {"changed", count(DiffStatus::Changed)},
        {"only_a", count(DiffStatus::OnlyA)}, {"only_b", count(DiffStatus::OnlyB)}};
    if (equalLeftOut) j["summary"]["equal_left_out"] = equalLeftOut; // counted in "equal", not among the entries
    j["notes"] = notes;
    j["entries"] = json::array();
    return j;
}

void DiffReport::writeJson(std::ostream& out) const
{
    // the head's last member is "entries", empty: its "[]" is where the entries go, one at a time
    const std::string head = dumpedJson(headJson());
    const size_t empty = head.rfind("[]");
    if (entries.empty() || empty == std::string::npos) {
        out << head;
        return;
    }
    out.write(head.data(), static_cast<std::streamsize>(empty));
    out << "[";
    for (size_t i = 0; i < entries.size(); ++i) {
        out << (i ? ",\n    " : "\n    ");
        writeIndented(out, dumpedJson(entryJson(entries[i])), 4);
    }
    out << "\n  ]" << head.substr(empty + 2);
}

std::string DiffReport::toCsv() const
{
    std::ostringstream out;
    writeCsv(out);
    return out.str();
}

void DiffReport::writeCsv(std::ostream& out) const
{
    CsvWriter w(out);
    w.row({"key", "key_a", "key_b", "type", "status", "reason", "numel", "num_diff", "max_abs_diff", "max_rel_diff",
        "rms_diff", "rank", "match"});
    auto num = [](double v) {
        char b[32];
        std::snprintf(b, sizeof b, "%.17g", v);
        return std::string(b);
    };
    for (const auto& e : entries) {
        w.row({e.key(), e.keyA, e.keyB, e.typeName(), diffStatusName(e.status), e.reason, std::to_string(e.numel),
            std::to_string(e.numDiff), num(e.maxAbsDiff), num(e.maxRelDiff), num(e.rmsDiff), "", e.match});
        for (const auto& r : e.ranks)
            w.row({e.key(), "", "", "rank", r.numDiff ? "changed" : "equal", "", std::to_string(r.numel),
                std::to_string(r.numDiff), num(r.maxAbsDiff), "", "", std::to_string(r.rank), ""});
    }
}

namespace {

constexpr char kSep = '\x1f'; // joins canonical key parts: FQNs contain dots, never this

/// One side's entry under the name it is compared by.
struct Canon
{
    std::string canonical;
    const Entry* entry = nullptr;
    std::vector<std::string> how; ///< normalisations applied
    const PyValue* overrideValue = nullptr; ///< params lists rewritten as canonical FQNs
};

struct Side
{
    const Checkpoint* cp = nullptr;
    std::vector<OptimizerView> optimizers;
    /// per optimizer: integer id -> (fqn, where it came from)
    std::vector<std::map<std::string, std::pair<std::string, std::string>>> idToFqn;
    /// the root of this side's model part, compared without it (the other side is a bare model state dict)
    KeyPath modelRoot;
};

/// A training checkpoint's model part against a bare model state dict (a DeepSpeed checkpoint against its
/// zero_to_fp32 output, a Lightning checkpoint against the model it exported): the part's keys pair without their
/// root ("model.inp.weight" with "inp.weight"), said in a note and per pair
void alignModelPart(Side& self, const Side& other, std::vector<std::string>& notes)
{
    if (!other.optimizers.empty()) return;
    const auto mine = ModelParams::modelPartOf(*self.cp, !self.optimizers.empty());
    const auto theirs = ModelParams::modelPartOf(*other.cp, false);
    if (!mine || !theirs || mine->root.empty() || !theirs->root.empty()) return;
    self.modelRoot = mine->root;
    notes.push_back(self.cp->path + ": its model part '" + joinKeyPath(mine->root) + "' is compared with "
        + other.cp->path + ", a bare model state dict, without that root");
}

/// ids -> FQNs by the core's one rule (param_table.h); the other side, when it names its parameters, is the
/// reference by position. Ids are only translated when the other side names its parameters: two id-keyed sides
/// compare by id.
void mapIds(Side& self, const Side& other, std::vector<std::string>& notes)
{
    self.idToFqn.resize(self.optimizers.size());
    std::optional<ModelParams> reference;
    try {
        reference = ModelParams::fromCheckpoint(*other.cp);
    } catch (const Error&) { }
    const ParamTable table = ParamTable::build(*self.cp, reference ? &*reference : nullptr);
    for (size_t i = 0; i < self.optimizers.size() && i < table.optimizers.size(); ++i) {
        const OptimizerView& v = self.optimizers[i];
        if (!v.idKeyed || (i < other.optimizers.size() && other.optimizers[i].idKeyed)) continue;
        const auto fqns = table.fqnsInOrder(static_cast<int>(i));
        if (fqns.empty() || std::find(fqns.begin(), fqns.end(), std::string()) != fqns.end()) continue;
        const std::string source = nameSourceText(table.sources[i]);
        const std::vector<std::string> ids = v.groupParams();
        for (size_t k = 0; k < ids.size() && k < fqns.size(); ++k)
            self.idToFqn[i][ids[k]] = {fqns[k], source};
        notes.push_back(
            self.cp->path + ": optimizer '" + v.rootKey() + "' is keyed by integer ids; mapped to FQNs by " + source);
    }
}

std::string canonicalFqn(const std::string& fqn, std::vector<std::string>& how)
{
    const NormalizedFqn n = normalizeFqn(fqn);
    for (const auto& s : n.stripped)
        if (std::find(how.begin(), how.end(), "strip '" + s + "'") == how.end()) how.push_back("strip '" + s + "'");
    return n.fqn;
}

/// every entry of one side under its canonical name
/// Each entry of one side under the name it is paired by: an optimizer's state and param_groups under
/// "<optimizer N>" with ids mapped to FQNs and prefixes stripped, the rest by its path with each key's FQN
/// normalised (canonicalize). Each entry is named once; those of an optimizer first.
class Canonicalizer
{
public:
    Canonicalizer(const Side& side, bool perParamGroups, PyArena& arena)
        : m_side(side)
        , m_cp(*side.cp)
        , m_perParamGroups(perParamGroups)
        , m_arena(arena)
        , m_done(m_cp.entries.size(), 0)
    {
        m_out.reserve(m_cp.entries.size());
    }

    std::vector<Canon> run()
    {
        for (size_t oi = 0; oi < m_side.optimizers.size(); ++oi) {
            addState(oi);
            const std::vector<std::vector<const Entry*>> lists = groupListEntries(oi);
            for (size_t g = 0; g < m_side.optimizers[oi].groups.size(); ++g)
                addGroup(oi, g, lists[g]);
        }
        addTheRest();
        return std::move(m_out);
    }

private:
    char& done(const Entry* e) { return m_done[static_cast<size_t>(e - m_cp.entries.data())]; }
    static std::string optimizerName(size_t oi) { return "<optimizer " + std::to_string(oi) + ">"; }
    bool under(const OptimizerView& v, const KeyPath& path, size_t extra) const
    {
        return path.size() == v.root.size() + extra && std::equal(v.root.begin(), v.root.end(), path.begin());
    }

    /// @p param's canonical FQN: an id mapped to its name (saying how), then canonicalFqn
    std::string resolve(size_t oi, const std::string& param, std::vector<std::string>& how) const
    {
        auto it = m_side.idToFqn[oi].find(param);
        std::string fqn = param;
        if (it != m_side.idToFqn[oi].end()) {
            fqn = it->second.first;
            how.push_back("id " + param + " -> '" + fqn + "' (" + it->second.second + ")");
        }
        return canonicalFqn(fqn, how);
    }

    void addState(size_t oi)
    {
        const OptimizerView& v = m_side.optimizers[oi];
        for (const auto& p : v.params)
            for (const auto& [name, e] : p.states) {
                Canon c;
                c.entry = e;
                const std::string fqn = resolve(oi, p.key, c.how);
                c.canonical = optimizerName(oi) + kSep + "state" + kSep + fqn + kSep + name;
                if (v.flattened) c.how.push_back("flattened optimizer format");
                m_out.push_back(std::move(c));
                done(e) = 1;
            }
    }

    /// per group of optimizer @p oi, in one pass over the entries: its params / param_names entries (not in its
    /// hyperparams), or for DSD's flattened format every "param_groups.<fqn>.<hp>" entry of its parameters; the
    /// param_names that served to map the ids are marked done, not compared again
    std::vector<std::vector<const Entry*>> groupListEntries(size_t oi)
    {
        const OptimizerView& v = m_side.optimizers[oi];
        std::vector<std::vector<const Entry*>> lists(v.groups.size());
        if (v.groups.empty()) return lists;
        std::unordered_map<std::string, std::vector<size_t>> groupsOf; // flattened: fqn -> its groups
        if (v.flattened)
            for (size_t g = 0; g < v.groups.size(); ++g)
                for (const auto& p : v.groups[g].params)
                    groupsOf[p].push_back(g);
        const bool namesMapped
            = !m_side.idToFqn[oi].empty() && m_side.idToFqn[oi].begin()->second.second == "param_names";
        for (const Entry& e : m_cp.entries) {
            const KeyPath& path = e.path;
            if (namesMapped && under(v, path, 3) && path.back().key == "param_names") {
                done(&e) = 1;
                continue;
            }
            if (v.flattened) {
                if (!under(v, path, 1)) continue;
                const std::string s = path.back().key.str();
                const auto dot = s.rfind('.');
                if (s.rfind("param_groups.", 0) != 0 || dot <= 13) continue;
                if (const auto it = groupsOf.find(s.substr(13, dot - 13)); it != groupsOf.end())
                    for (const size_t g : it->second)
                        lists[g].push_back(&e);
                continue;
            }
            if (!under(v, path, 3)) continue;
            const int64_t g = path[v.root.size() + 1].index;
            if (path[v.root.size()].key == "param_groups" && g >= 0 && static_cast<size_t>(g) < v.groups.size()
                && (path.back().key == "params" || path.back().key == "param_names"))
                lists[static_cast<size_t>(g)].push_back(&e);
        }
        return lists;
    }

    /// group @p g's fields: its hyperparameters and @p lists (groupListEntries), named per group, per parameter
    /// (the flattened format; or both sides' groups expanded when one side is flattened), its params list compared
    /// as canonical FQNs
    void addGroup(size_t oi, size_t g, const std::vector<const Entry*>& lists)
    {
        const OptimizerView& v = m_side.optimizers[oi];
        const OptimizerGroup& group = v.groups[g];
        const std::string opt = optimizerName(oi);
        PyValue* list = m_arena.makeContainer(PyKind::List);
        std::vector<std::string> listHow;
        std::vector<std::string> canonicalParams;
        for (const auto& p : group.params) {
            canonicalParams.push_back(resolve(oi, p, listHow));
            list->container->items.push_back(m_arena.makeStr(canonicalParams.back(), true));
        }
        std::vector<const Entry*> fields;
        if (!v.flattened)
            for (const auto& [field, e] : group.hyperparams)
                fields.push_back(e);
        fields.insert(fields.end(), lists.begin(), lists.end());
        for (const Entry* e : fields) {
            done(e) = 1;
            const std::string field = e->path.back().key.str();
            const bool isParams = field == "params" || field == "param_names";
            if (v.flattened) {
                // "param_groups.<fqn>.<hp>": one entry per parameter already
                Canon c;
                c.entry = e;
                const auto dot = field.rfind('.');
                const std::string fqn = resolve(oi, field.substr(13, dot - 13), c.how);
                c.canonical = opt + kSep + "pg" + kSep + fqn + kSep + field.substr(dot + 1);
                c.how.push_back("flattened optimizer format");
                m_out.push_back(std::move(c));
                continue;
            }
            if (m_perParamGroups) {
                if (isParams) continue; // membership is implied by the per-parameter keys
                for (const auto& fqn : canonicalParams) {
                    Canon c;
                    c.entry = e;
                    c.canonical = opt + kSep + "pg" + kSep + fqn + kSep + field;
                    c.how.push_back("param_groups expanded per parameter");
                    m_out.push_back(std::move(c));
                }
                continue;
            }
            Canon c;
            c.entry = e;
            c.canonical = opt + kSep + "param_groups" + kSep + std::to_string(g) + kSep + field;
            if (isParams) {
                c.overrideValue = list;
                c.how = listHow;
            }
            m_out.push_back(std::move(c));
        }
    }

    /// every entry not named as optimizer state: its path, each key's FQN normalised, the model part's root left
    /// out against a bare model state dict
    void addTheRest()
    {
        const size_t rootSize = m_side.modelRoot.size();
        for (const Entry& e : m_cp.entries) {
            if (done(&e)) continue;
            Canon c;
            c.entry = &e;
            size_t first = 0;
            if (rootSize && e.path.size() > rootSize
                && std::equal(m_side.modelRoot.begin(), m_side.modelRoot.end(), e.path.begin())) {
                first = rootSize;
                c.how.push_back("model part '" + joinKeyPath(m_side.modelRoot) + "' against a bare model state dict");
            }
            for (size_t i = first; i < e.path.size(); ++i) {
                if (i > first) c.canonical += kSep;
                c.canonical += e.path[i].isIndex() ? e.path[i].key.str() : canonicalFqn(e.path[i].key.str(), c.how);
            }
            m_out.push_back(std::move(c));
        }
    }

    const Side& m_side;
    const Checkpoint& m_cp;
    const bool m_perParamGroups;
    PyArena& m_arena;
    std::vector<char> m_done; ///< per entry of the checkpoint (by index): named already
    std::vector<Canon> m_out;
};

std::vector<Canon> canonicalize(const Side& side, bool perParamGroups, PyArena& arena)
{
    return Canonicalizer(side, perParamGroups, arena).run();
}

/// (offsets, sizes) boxes of @p e's chunks with their ranks; a single whole box when it has one chunk
std::vector<std::pair<int, TensorBox>> rankBoxes(const TensorEntry& t)
{
    std::vector<std::pair<int, TensorBox>> out;
    for (const auto& c : t.chunks)
        if (c.numel() > 0) out.push_back({c.rank, {c.offsets, c.sizes}});
    return out;
}

/// the same chunk boxes on both sides, whichever ranks wrote them
bool sameChunkBoxes(const TensorEntry& a, const TensorEntry& b)
{
    auto boxes = [](const TensorEntry& t) {
        std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
        for (size_t i = 0; i < t.chunks.size(); ++i)
            out.emplace_back(t.chunks.offsetsOf(i).vec(), t.chunks.sizesOf(i).vec());
        std::sort(out.begin(), out.end());
        return out;
    };
    return a.chunks.size() == b.chunks.size() && boxes(a) == boxes(b);
}

/// splits @p box into pieces of whole rows of dimension @p d, at most @p maxElems elements where a row fits. A longer
/// row is one piece (a mapped chunk read in place), or, with @p splitRows, split the same way one dimension down: a
/// broadcast view's row of a [4, 2^28] tensor is 1 GiB expanded. A box that is one row-major run gives runs.
void pieces(const TensorBox& box, size_t d, int64_t maxElems, bool splitRows, std::vector<TensorBox>& out)
{
    if (d >= box.sizes.size()) {
        out.push_back(box);
        return;
    }
    int64_t inner = 1;
    for (size_t k = d + 1; k < box.sizes.size(); ++k)
        inner *= box.sizes[k];
    const int64_t rows = std::max<int64_t>(1, maxElems / std::max<int64_t>(inner, 1));
    for (int64_t r = 0; r < box.sizes[d]; r += rows) {
        TensorBox p = box;
        p.offsets[d] = box.offsets[d] + r;
        p.sizes[d] = std::min(rows, box.sizes[d] - r);
        if (splitRows && inner > maxElems)
            pieces(p, d + 1, maxElems, splitRows, out);
        else
            out.push_back(std::move(p));
    }
}

std::vector<TensorBox> pieces(const TensorBox& box, int64_t maxElems, bool splitRows = false)
{
    std::vector<TensorBox> out;
    pieces(box, 0, maxElems, splitRows, out);
    return out;
}

/// the first element of @p box in row-major order when the box is one row-major run of a tensor of @p shape (whole
/// from some dimension on, one index wide before the one above it: a dim-0 shard, a piece of one), else nothing (a
/// Shard(1) column block)
std::optional<int64_t> rowMajorRunStart(const std::vector<int64_t>& shape, const TensorBox& box)
{
    size_t whole = shape.size(); // dimensions [whole, ndim) are spanned whole
    while (whole > 0 && box.offsets[whole - 1] == 0 && box.sizes[whole - 1] == shape[whole - 1])
        --whole;
    for (size_t d = 0; d + 1 < whole; ++d)
        if (box.sizes[d] != 1) return std::nullopt;
    int64_t start = 0, stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
        start += box.offsets[d] * stride;
        stride *= shape[d];
    }
    return start;
}

std::vector<uint8_t> fetch(TensorAssembler& tensor, const Entry& e, const TensorBox& box)
{
    std::vector<uint8_t> out;
    out.reserve(static_cast<size_t>(box.numel()) * dtypeSize(e.tensor->dtype));
    tensor.streamBox(box.offsets, box.sizes, [&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
    return out;
}

/// The bytes of one box of a tensor: a pointer into the mapped chunk file when one chunk stores the box as it is
/// (a torch.save tensor, a dim-0 DCP shard: no copy), else assembled into a buffer. The mapped pages are dropped
/// from this process when done (they stay in the page cache), which keeps resident memory at about one block. An
/// assembled box goes into @p scratch, which the caller keeps from block to block: a fresh 4 MiB buffer per block cost
/// more in page faults than the comparison itself. The caller keeps @p tensor (the entry's assembler) from block to
/// block too: it finds each block's chunks without a pass over all of them.
class BoxBytes
{
public:
    BoxBytes(TensorAssembler& tensor, const Entry& e, const TensorBox& box, const Progress& progress,
        std::vector<uint8_t>& scratch)
        : m_buffer(scratch)
    {
        m_buffer.clear();
        const uint64_t want = static_cast<uint64_t>(box.numel()) * dtypeSize(e.tensor->dtype);
        tensor.streamBox(
            box.offsets, box.sizes, [&](const uint8_t* p, size_t n) { append(p, n); }, progress,
            [&](const ByteSource& f, uint64_t offset, uint64_t length) {
                std::shared_ptr<const ByteSource> held;
                if (!m_file && m_buffer.empty() && length == want) held = f.weak_from_this().lock();
                if (held) {
                    // held here: the checkpoint may close a file it has not read lately (CheckpointFiles' budget)
                    m_file = std::move(held);
                    m_offset = offset;
                    m_length = length;
                    f.adviseSequential(offset, length);
                } else {
                    append(f.bytes(offset, length), static_cast<size_t>(length));
                }
            });
    }
    ~BoxBytes()
    {
        if (m_file) m_file->release(m_offset, m_length);
    }
    BoxBytes(const BoxBytes&) = delete;
    BoxBytes& operator=(const BoxBytes&) = delete;
    const uint8_t* data() const { return m_file ? m_file->bytes(m_offset, m_length) : m_buffer.data(); }

private:
    void append(const uint8_t* p, size_t n)
    {
        if (m_file) { // a second piece after a whole-box region cannot happen, but stay correct if it does
            const uint8_t* held = m_file->bytes(m_offset, m_length);
            m_buffer.assign(held, held + m_length);
            m_file.reset();
        }
        m_buffer.insert(m_buffer.end(), p, p + n);
    }
    std::vector<uint8_t>& m_buffer;
    std::shared_ptr<const ByteSource> m_file;
    uint64_t m_offset = 0, m_length = 0;
};

/// one block of the comparison: the fused kernel where it handles the dtypes, the ATen kernel otherwise
void diffBlock(const uint8_t* a, DType da, const uint8_t* b, DType db, int64_t n, const DiffOptions& opt,
    aten::DiffAccumulator& acc)
{
    if (opt.engine == DiffEngine::Auto && detail::fusedDiffSupports(da, db))
        detail::diffBlockFused(a, b, da, n, opt.rtol, opt.atol, acc);
    else
        aten::diffBlock(a, da, b, db, n, opt.rtol, opt.atol, acc);
}

/// Two broadcast views too large to expand (broadcastStorageOf), of one shape and broadcast along the same dimensions:
/// each stored element stands for `repeats` equal ones on both sides, so the pair is compared through its storage
struct BroadcastPair
{
    BroadcastStorage a, b;
};
std::optional<BroadcastPair> broadcastPairOf(const Entry& a, const Entry& b)
{
    auto va = broadcastStorageOf(a);
    auto vb = broadcastStorageOf(b);
    if (!va || !vb || a.tensor->shape != b.tensor->shape || va->stored.tensor->shape != vb->stored.tensor->shape)
        return std::nullopt;
    return BroadcastPair {std::move(*va), std::move(*vb)};
}

void fillHistogram(const Checkpoint& ca, const Entry& a, const Checkpoint& cb, const Entry& b, double limit,
    size_t bins, std::vector<double>& edges, std::vector<int64_t>& counts, const Progress& progress);

/// the (a - b) histogram of two tensors of one shape over [-limit, limit], read along the layout with more chunks
void fillHistogram(const Checkpoint& ca, const Entry& a, const Checkpoint& cb, const Entry& b, double limit,
    size_t bins, std::vector<double>& edges, std::vector<int64_t>& counts, const Progress& progress)
{
    constexpr int64_t kBlock = 1 << 20;
    const double lim = limit > 0 ? limit : 1.0;
    counts.assign(bins, 0);
    edges.clear();
    for (size_t i = 0; i <= bins; ++i)
        edges.push_back(-lim + 2.0 * lim * double(i) / double(bins));
    if (const auto pair = broadcastPairOf(a, b)) {
        fillHistogram(ca, pair->a.stored, cb, pair->b.stored, limit, bins, edges, counts, progress);
        for (int64_t& c : counts)
            c *= pair->a.repeats;
        return;
    }
    const bool expands = TensorAssembler::checkComparison(ca, a, cb, b);
    const TensorEntry& layoutSide = b.tensor->chunks.size() >= a.tensor->chunks.size() ? *b.tensor : *a.tensor;
    TensorAssembler tensorA(ca, a), tensorB(cb, b);
    for (const auto& [rank, box] : rankBoxes(layoutSide)) {
        (void)rank;
        for (const TensorBox& piece : pieces(box, kBlock, expands)) {
            progress.checkCancelled();
            const auto x = fetch(tensorA, a, piece);
            const auto y = fetch(tensorB, b, piece);
            aten::diffHistogram(x.data(), a.tensor->dtype, y.data(), b.tensor->dtype, piece.numel(), -lim, lim, counts);
        }
    }
}

void compareTensors(const Checkpoint& ca, const Entry& a, const Checkpoint& cb, const Entry& b, const DiffOptions& opt,
    DiffEntry& d, const Progress& progress);

/// what differs before any value is read: dtype and shape
std::vector<std::string> metadataDifferences(const TensorEntry& ta, const TensorEntry& tb, const DiffEntry& d)
{
    std::vector<std::string> reasons;
    if (ta.dtype != tb.dtype) reasons.push_back("dtype " + d.dtypeA + " -> " + d.dtypeB);
    if (ta.shape != tb.shape) {
        std::string r = "shape " + shapeText(ta.shape) + " -> " + shapeText(tb.shape);
        if (ta.numel() == tb.numel() && (ta.shape.size() == 1 || tb.shape.size() == 1)) r += " (flat vs unflattened)";
        reasons.push_back(r);
    }
    return reasons;
}

/// two broadcast views over the same stored shape: their stored elements compared once, every count scaled by the
/// repeats
void compareBroadcastPair(const Checkpoint& ca, const Entry& a, const Checkpoint& cb, const Entry& b,
    const BroadcastPair& pair, const DiffOptions& opt, DiffEntry& d, const Progress& progress)
{
    DiffEntry once = d;
    compareTensors(ca, pair.a.stored, cb, pair.b.stored, opt, once, progress);
    const int64_t k = pair.a.repeats; // counts stay within the view's numel, which fits
    once.shapeA = a.tensor->shape;
    once.shapeB = b.tensor->shape;
    once.numel = a.tensor->numel();
    for (int64_t* count : {&once.numDiff, &once.nanA, &once.nanB, &once.infA, &once.infB, &once.finitePairs})
        *count *= k;
    for (DiffRank& r : once.ranks) {
        r.numel *= k;
        r.numDiff *= k;
    }
    for (int64_t& c : once.histogramCounts)
        c *= k;
    d = std::move(once);
}

/// why two tensors cannot be compared element by element (other element counts, or one side holding only part of
/// it that the other does not hold alike): the entry is Changed with that reason; false when they can
bool notComparable(const TensorEntry& ta, const TensorEntry& tb, const ShardLayout& layoutA, const ShardLayout& layoutB,
    bool samePart, std::vector<std::string>& reasons, DiffEntry& d)
{
    if (ta.numel() == tb.numel() && ((layoutA.complete() && layoutB.complete()) || samePart)) return false;
    if (!layoutA.complete() || !layoutB.complete()) {
        const auto stored = [](const ShardLayout& l) {
            return std::to_string(l.coveredElements) + " of " + std::to_string(l.totalElements);
        };
        reasons.push_back(layoutA.complete() ? "B stores only part of the tensor (" + stored(layoutB) + " elements)"
                : layoutB.complete()         ? "A stores only part of the tensor (" + stored(layoutA) + " elements)"
                                     : "A and B store different parts of the tensor (" + stored(layoutA) + " and "
                    + stored(layoutB) + " elements)");
    }
    d.status = DiffStatus::Changed;
    d.numDiff = std::max(ta.numel(), tb.numel());
    d.reason = reasons.empty() ? "values differ" : reasons.front();
    for (size_t i = 1; i < reasons.size(); ++i)
        d.reason += "; " + reasons[i];
    return true;
}

void addCounts(aten::DiffAccumulator& total, const aten::DiffAccumulator& acc)
{
    total.numel += acc.numel;
    total.numDiff += acc.numDiff;
    total.nanA += acc.nanA;
    total.nanB += acc.nanB;
    total.infA += acc.infA;
    total.infB += acc.infB;
    total.maxAbs = std::max(total.maxAbs, acc.maxAbs);
    total.maxRel = std::max(total.maxRel, acc.maxRel);
    total.sumSq += acc.sumSq;
    total.finitePairs += acc.finitePairs;
}

/// the values compared block by block along the layout of the side with more chunks (the per-rank picture, into
/// d.ranks); of another shape, in row-major order: each block of the layout side must be one row-major run of it,
/// which a dim-0 shard is and a Shard(1) column block is not; else the whole tensor is cut into runs, without a
/// per-rank picture; a 0-dim tensor is its one element. @p expands: a broadcast view read expanded
/// (TensorAssembler::checkComparison); @p samePart: both sides hold the same part only
aten::DiffAccumulator compareByRank(const Checkpoint& ca, const Entry& a, const Checkpoint& cb, const Entry& b,
    bool expands, bool samePart, const DiffOptions& opt, DiffEntry& d, const Progress& progress)
{
    const TensorEntry& ta = *a.tensor;
    const TensorEntry& tb = *b.tensor;
    const bool byB = tb.chunks.size() >= ta.chunks.size();
    const TensorEntry& layoutSide = byB ? tb : ta;
    const bool sameShape = ta.shape == tb.shape;
    constexpr int64_t kBlock = 1 << 20; // elements per block: stays in cache for the several ATen passes
    aten::DiffAccumulator total;
    std::vector<std::pair<int, TensorBox>> parts = rankBoxes(layoutSide);
    if (!sameShape && !std::all_of(parts.begin(), parts.end(), [&](const auto& part) {
            return rowMajorRunStart(layoutSide.shape, part.second).has_value();
        }))
        parts = {{-1, TensorBox {std::vector<int64_t>(layoutSide.shape.size(), 0), layoutSide.shape}}};
    std::vector<uint8_t> scratchA, scratchB, theirs;
    TensorAssembler tensorA(ca, a), tensorB(cb, b);
    for (const auto& [rank, box] : parts) {
        aten::DiffAccumulator acc;
        for (const TensorBox& piece : pieces(box, kBlock, expands)) {
            progress.checkCancelled();
            if (sameShape) {
                const BoxBytes x(tensorA, a, piece, progress, scratchA);
                const BoxBytes y(tensorB, b, piece, progress, scratchB);
                diffBlock(x.data(), ta.dtype, y.data(), tb.dtype, piece.numel(), opt, acc);
                continue;
            }
            // same numel, other shape: the piece is a row-major run of the layout side, compared with the same
            // elements of the other side
            const Entry& lay = byB ? b : a;
            const Entry& other = byB ? a : b;
            const BoxBytes mine(byB ? tensorB : tensorA, lay, piece, progress, scratchA);
            theirs.clear();
            theirs.reserve(static_cast<size_t>(piece.numel()) * dtypeSize(other.tensor->dtype));
            (byB ? tensorA : tensorB)
                .streamElements(
                    *rowMajorRunStart(lay.tensor->shape, piece), piece.numel(),
                    [&](const uint8_t* p, size_t n) { theirs.insert(theirs.end(), p, p + n); }, progress);
            const uint8_t* bytesA = byB ? theirs.data() : mine.data();
            const uint8_t* bytesB = byB ? mine.data() : theirs.data();
            diffBlock(bytesA, ta.dtype, bytesB, tb.dtype, piece.numel(), opt, acc);
        }
        d.ranks.push_back({rank, acc.numel, acc.numDiff, acc.maxAbs});
        addCounts(total, acc);
    }
    if (ta.numel() > 0 && ta.shape.empty() && d.ranks.empty() && !samePart) {
        aten::DiffAccumulator acc;
        const auto x = fetch(tensorA, a, {{}, {}});
        const auto y = fetch(tensorB, b, {{}, {}});
        diffBlock(x.data(), ta.dtype, y.data(), tb.dtype, 1, opt, acc);
        total = acc;
        d.ranks.push_back({layoutSide.chunks.empty() ? -1 : layoutSide.chunks[0].rank, 1, acc.numDiff, acc.maxAbs});
    }
    return total;
}

void compareTensors(const Checkpoint& ca, const Entry& a, const Checkpoint& cb, const Entry& b, const DiffOptions& opt,
    DiffEntry& d, const Progress& progress)
{
    const TensorEntry& ta = *a.tensor;
    const TensorEntry& tb = *b.tensor;
    d.shapeA = ta.shape;
    d.shapeB = tb.shape;
    d.dtypeA = std::string(dtypeName(ta.dtype));
    d.dtypeB = std::string(dtypeName(tb.dtype));
    d.numel = ta.numel();
    std::vector<std::string> reasons = metadataDifferences(ta, tb, d);
    if (const auto pair = broadcastPairOf(a, b)) return compareBroadcastPair(ca, a, cb, b, *pair, opt, d, progress);
    // another broadcast view is read expanded, block by block, only against a side that stores about as much
    const bool expands = TensorAssembler::checkComparison(ca, a, cb, b);
    const ShardLayout layoutA = ShardLayout::of(ta), layoutB = ShardLayout::of(tb);
    // both sides hold the same part of the tensor (one rank's file of a sharded save, a meta tensor holding none):
    // that part is compared, and the entry says it is all there is
    const bool samePart = !layoutA.complete() && !layoutB.complete() && ta.shape == tb.shape && sameChunkBoxes(ta, tb);
    if (notComparable(ta, tb, layoutA, layoutB, samePart, reasons, d)) return;
    const aten::DiffAccumulator total = compareByRank(ca, a, cb, b, expands, samePart, opt, d, progress);
    if (d.ranks.size() <= 1 && (d.ranks.empty() || d.ranks[0].rank < 0)) d.ranks.clear(); // no rank structure to show
    d.valuesCompared = true;
    d.numDiff = total.numDiff;
    d.nanA = total.nanA;
    d.nanB = total.nanB;
    d.infA = total.infA;
    d.infB = total.infB;
    d.maxAbsDiff = total.maxAbs;
    d.maxRelDiff = total.maxRel;
    d.rmsDiff = total.numel ? std::sqrt(total.sumSq / double(total.numel)) : 0.0;
    d.finitePairs = total.finitePairs;
    if (d.numDiff > 0) reasons.insert(reasons.begin(), "values differ");
    d.status = reasons.empty() ? DiffStatus::Equal : DiffStatus::Changed;
    // equal or not, the comparison covered only what both store: say so
    if (samePart)
        reasons.push_back(layoutA.coveredElements == 0
                ? std::string("neither side stores data (meta tensors): nothing to compare")
                : "compared where both store it: " + std::to_string(layoutA.coveredElements) + " of "
                    + std::to_string(layoutA.totalElements) + " elements (the same part on both sides)");
    d.reason.clear();
    for (size_t i = 0; i < reasons.size(); ++i)
        d.reason += (i ? "; " : "") + reasons[i];
    if (opt.histogramBins > 0 && d.numDiff > 0 && ta.shape == tb.shape)
        fillHistogram(ca, a, cb, b, d.maxAbsDiff, opt.histogramBins, d.histogramEdges, d.histogramCounts, progress);
}

void compareValues(
    const Checkpoint& cpA, const Canon& a, const Checkpoint& cpB, const Canon& b, const DiffOptions& opt, DiffEntry& d)
{
    const PyValue* va = a.overrideValue ? a.overrideValue : a.entry->value;
    const PyValue* vb = b.overrideValue ? b.overrideValue : b.entry->value;
    d.valueA = pyRepr(va, 200);
    d.valueB = pyRepr(vb, 200);
    if (!a.entry->error.empty() || !b.entry->error.empty()) {
        d.status = DiffStatus::Changed;
        d.unreadable = true;
        d.reason = "unreadable: " + (a.entry->error.empty() ? b.entry->error : a.entry->error);
        return;
    }
    const ValueComparison c = compareValueEntries(cpA, *a.entry, va, cpB, *b.entry, vb, opt.rtol, opt.atol);
    d.status = c.equal ? DiffStatus::Equal : DiffStatus::Changed;
    d.reason = c.reason;
    d.comparedInPart = c.equal && c.partly;
}

std::string joinHow(const std::vector<std::string>& a, const std::vector<std::string>& b)
{
    std::vector<std::string> all;
    for (const auto& v : {a, b})
        for (const auto& h : v)
            if (std::find(all.begin(), all.end(), h) == all.end()) all.push_back(h);
    std::string s;
    for (const auto& h : all)
        s += (s.empty() ? "" : ", ") + h;
    return s.empty() ? "exact" : s;
}

using CanonPair = std::pair<const Canon*, const Canon*>;

/// A's and B's entries paired by canonical name, A's order first, then B's alone; two entries of one side that
/// normalise to one name: the first is compared. The hash tables and the canonical names (a million values' names
/// are about 90 MB of tables and 2M strings) are freed before the report's rows are made: names point into ca and cb,
/// which stay as they are from here on
std::vector<CanonPair> pairByName(std::vector<Canon>& ca, std::vector<Canon>& cb)
{
    std::unordered_map<std::string_view, size_t> indexB(cb.size());
    for (size_t i = 0; i < cb.size(); ++i)
        indexB.emplace(cb[i].canonical, i);
    std::vector<CanonPair> pairs;
    pairs.reserve(std::max(ca.size(), cb.size()));
    std::vector<char> usedB(cb.size(), 0);
    std::unordered_set<std::string_view> seenA(ca.size());
    for (const auto& c : ca) {
        if (!seenA.insert(c.canonical).second) continue;
        auto it = indexB.find(c.canonical);
        if (it == indexB.end()) {
            pairs.push_back({&c, nullptr});
        } else {
            pairs.push_back({&c, &cb[it->second]});
            usedB[it->second] = 1;
        }
    }
    for (size_t i = 0; i < cb.size(); ++i)
        if (!usedB[i] && indexB.at(cb[i].canonical) == i) pairs.push_back({nullptr, &cb[i]});
    indexB = {};
    seenA = {};
    std::vector<char>().swap(usedB);
    for (auto* side : {&ca, &cb})
        for (Canon& c : *side)
            std::string().swap(c.canonical);
    return pairs;
}

/// one row of the report: an entry on one side only, or the two entries compared (an unreadable one says why)
DiffEntry diffPair(
    const Side& A, const Side& B, const CanonPair& pair, const DiffOptions& opt, const Progress& progress)
{
    const auto [pa, pb] = pair;
    DiffEntry d;
    d.keyA = pa ? pa->entry->key : std::string();
    d.keyB = pb ? pb->entry->key : std::string();
    const Entry* any = pa ? pa->entry : pb->entry;
    d.tensor = any->isTensor();
    try {
        if (!pa || !pb) {
            d.status = pa ? DiffStatus::OnlyA : DiffStatus::OnlyB;
            d.reason = pa ? "not in " + B.cp->path : "not in " + A.cp->path;
            if (any->isTensor()) {
                (pa ? d.shapeA : d.shapeB) = any->tensor->shape;
                (pa ? d.dtypeA : d.dtypeB) = std::string(dtypeName(any->tensor->dtype));
                d.numel = any->tensor->numel();
            } else {
                (pa ? d.valueA : d.valueB)
                    = pyRepr((pa ? pa : pb)->overrideValue ? (pa ? pa : pb)->overrideValue : any->value, 200);
            }
            return d;
        }
        d.match = joinHow(pa->how, pb->how);
        if (d.keyA != d.keyB && d.match == "exact") d.match = "layout";
        if (pa->entry->isTensor() != pb->entry->isTensor()
            && sameNumberStoredTwoWays(*A.cp, *pa->entry, *B.cp, *pb->entry)) {
            // a step as Megatron keeps it and as PyTorch saves it (a conversion): the state is the same
            d.status = DiffStatus::Equal;
            d.reason = pa->entry->isTensor() ? "the same number: a 0-dim tensor in A, a value in B"
                                             : "the same number: a value in A, a 0-dim tensor in B";
        } else if (pa->entry->isTensor() != pb->entry->isTensor()) {
            d.status = DiffStatus::Changed;
            d.reason = pa->entry->isTensor() ? "tensor -> value" : "value -> tensor";
        } else if (pa->entry->isTensor()) {
            compareTensors(*A.cp, *pa->entry, *B.cp, *pb->entry, opt, d, progress);
        } else {
            compareValues(*A.cp, *pa, *B.cp, *pb, opt, d);
        }
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::Cancelled) throw;
        d.status = DiffStatus::Changed;
        d.unreadable = true;
        d.reason = std::string("unreadable: ") + e.what();
    }
    return d;
}

/// The report's rows as the threads make them: every row in its place (keepEqual), or only the rows that are not
/// wholly equal, with their places, and a count of the others (a diff of a million equal values keeps none)
class ReportRows
{
public:
    ReportRows(DiffReport& report, size_t pairs, bool keepAll)
        : m_report(report)
        , m_keepAll(keepAll)
    {
        if (keepAll) report.entries.resize(pairs);
    }

    /// thread-safe for distinct @p i
    void store(size_t i, DiffEntry&& d)
    {
        if (m_keepAll) {
            m_report.entries[i] = std::move(d);
            return;
        }
        std::lock_guard<std::mutex> lock(m_mutex);
        if (d.status == DiffStatus::Equal && !d.comparedInPart)
            ++m_leftOut;
        else
            m_kept.emplace_back(i, std::move(d));
    }

    /// the rows this process made (its pairs, @p mine) and its count, for rank 0 of a job
    nlohmann::json wire(const std::vector<size_t>& mine) const
    {
        nlohmann::json rows = nlohmann::json::array();
        if (m_keepAll)
            for (const size_t i : mine)
                rows.push_back({i, m_report.entries[i]});
        else
            for (const auto& [i, d] : m_kept)
                rows.push_back({i, d});
        return nlohmann::json {{"entries", std::move(rows)}, {"left_out", m_leftOut}};
    }

    /// another process's wire()
    void add(const nlohmann::json& theirs)
    {
        m_leftOut += theirs.at("left_out").get<size_t>();
        for (const auto& x : theirs.at("entries"))
            if (m_keepAll)
                m_report.entries.at(x[0].get<size_t>()) = x[1].get<DiffEntry>();
            else
                m_kept.emplace_back(x[0].get<size_t>(), x[1].get<DiffEntry>());
    }

    /// the kept rows into the report, in its order
    void place()
    {
        if (m_keepAll) return;
        std::sort(m_kept.begin(), m_kept.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
        m_report.entries.clear();
        m_report.entries.reserve(m_kept.size());
        for (auto& [i, d] : m_kept)
            m_report.entries.push_back(std::move(d));
        std::vector<std::pair<size_t, DiffEntry>>().swap(m_kept);
        m_report.equalLeftOut = m_leftOut;
    }

private:
    DiffReport& m_report;
    const bool m_keepAll;
    std::vector<std::pair<size_t, DiffEntry>> m_kept;
    size_t m_leftOut = 0;
    std::mutex m_mutex;
};

/// a job's processes' rows: rank 0 puts every process's rows in their places, and every process gets the whole
/// report back (the same exit status everywhere)
void mergeJobRows(
    Job& job, DiffReport& report, ReportRows& rows, const std::vector<size_t>& mine, JobProgress& compared)
{
    const std::vector<uint8_t> wire = nlohmann::json::to_cbor(rows.wire(mine));
    compared.flush();
    const std::vector<std::string> parts
        = job.gather("diff-entries", std::string(wire.begin(), wire.end()), [&] { compared.showTotal(); });
    std::string merged;
    if (job.isRoot()) {
        for (size_t p = 1; p < parts.size(); ++p)
            rows.add(nlohmann::json::from_cbor(parts[p]));
        rows.place();
        const std::vector<uint8_t> all
            = nlohmann::json::to_cbor(nlohmann::json {{"entries", report.entries}, {"left_out", report.equalLeftOut}});
        merged.assign(all.begin(), all.end());
    }
    merged = job.broadcast("diff-report", merged);
    if (!job.isRoot()) {
        const nlohmann::json whole = nlohmann::json::from_cbor(merged);
        report.entries = whole.at("entries").get<std::vector<DiffEntry>>();
        report.equalLeftOut = whole.at("left_out").get<size_t>();
    }
}

DiffReport runDiff(const Side& A, const Side& B, std::vector<Canon> ca, std::vector<Canon> cb, const DiffOptions& opt,
    const Progress& progress, DiffReport report)
{
    const std::vector<CanonPair> pairs = pairByName(ca, cb);
    ReportRows rows(report, pairs.size(), opt.keepEqual);
    // the largest tensors first, so that no thread is left with a big one while the others are done
    std::vector<size_t> order(pairs.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    auto weight = [&](size_t i) {
        const Canon* c = pairs[i].first && pairs[i].second ? pairs[i].first : nullptr;
        return c && c->entry->isTensor() ? c->entry->tensor->numel() : 0;
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return weight(x) > weight(y); });
    // run as several processes (Job): each compares the pairs it owns (split by elements), rank 0 merges
    Job& job = Job::current();
    if (job.distributed()) {
        std::vector<uint64_t> weights(pairs.size());
        for (size_t i = 0; i < pairs.size(); ++i)
            weights[i] = static_cast<uint64_t>(weight(i));
        const std::vector<int> owner = splitByWeight(weights, job.size());
        order.erase(
            std::remove_if(order.begin(), order.end(), [&](size_t i) { return owner[i] != job.rank(); }), order.end());
    }
    // progress by elements (plus one per entry): the largest tensors come first, and counting entries left the
    // fraction near 0 while they were compared
    // (a job's: every process's pairs, summed through the store; rank 0 shows the total)
    uint64_t totalWork = 0;
    for (size_t i = 0; i < pairs.size(); ++i)
        totalWork += static_cast<uint64_t>(weight(i)) + 1;
    JobProgress compared(job, "diff-work", totalWork, progress, "comparing");
    std::mutex progressMutex;
    const unsigned hw = job.threadsPerProcess(); // a job's processes on one machine share its cores
    const unsigned threads
        = std::max(1u, std::min<unsigned>(opt.threads > 0 ? unsigned(opt.threads) : hw, unsigned(order.size())));
    try {
        forEachOnThreads(order.size(), threads, [&](size_t k) {
            const size_t i = order[k];
            DiffEntry d = diffPair(A, B, pairs[i], opt, progress);
            {
                std::lock_guard<std::mutex> lock(progressMutex);
                compared.add(static_cast<uint64_t>(weight(i)) + 1);
                if (opt.onEntry) opt.onEntry(d);
            }
            rows.store(i, std::move(d));
        });
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::Cancelled) throw Error(ErrorKind::Cancelled, {}, "cancelled");
        throw;
    }
    if (job.distributed())
        mergeJobRows(job, report, rows, order, compared);
    else
        rows.place();
    report.equal = true;
    for (const auto& e : report.entries)
        if (e.status != DiffStatus::Equal) report.equal = false;
    return report;
}

} // namespace

static DiffReport diffCheckpointsUnguarded(
    const Checkpoint& a, const Checkpoint& b, const DiffOptions& options, const Progress& progress)
{
    DiffReport report;
    report.pathA = a.path;
    report.pathB = b.path;
    Side A, B;
    A.cp = &a;
    B.cp = &b;
    A.optimizers = findOptimizers(a);
    B.optimizers = findOptimizers(b);
    if (A.optimizers.size() == B.optimizers.size()) {
        for (size_t i = 0; i < A.optimizers.size(); ++i)
            if (A.optimizers[i].rootKey() != B.optimizers[i].rootKey())
                report.notes.push_back(
                    "optimizer '" + A.optimizers[i].rootKey() + "' compared with '" + B.optimizers[i].rootKey() + "'");
    }
    mapIds(A, B, report.notes);
    mapIds(B, A, report.notes);
    alignModelPart(A, B, report.notes);
    alignModelPart(B, A, report.notes);
    // a side whose reader named optimizer ids by a guessed order: differences between same-shaped parameters' state
    // may be that guess, not the checkpoints
    for (const auto& [label, cp] : {std::pair<const char*, const Checkpoint*> {"A", &a}, {"B", &b}})
        for (const auto& w : cp->warnings)
            if (w.code == ReaderCode::ParamOrderAssumed) report.notes.push_back(std::string(label) + ": " + w.message);
    // a side that could not be read whole: its missing keys are no difference to show, and no equality either
    bool whole = true;
    for (const auto& [label, cp] : {std::pair<const char*, const Checkpoint*> {"A", &a}, {"B", &b}})
        if (const std::string why = cp->missingDataReason(); !why.empty()) {
            report.notes.push_back(std::string(label) + " is not whole: " + why);
            whole = false;
        }
    // one flattened side and one nested: hyperparameters are compared per parameter on both
    bool perParam = false;
    for (size_t i = 0; i < std::min(A.optimizers.size(), B.optimizers.size()); ++i)
        if (A.optimizers[i].flattened != B.optimizers[i].flattened) perParam = true;
    if (perParam)
        report.notes.push_back("one side uses DSD's flattened optimizer format: param_groups compared per parameter");
    PyArena arena;
    auto ca = canonicalize(A, perParam, arena);
    auto cb = canonicalize(B, perParam, arena);
    report = runDiff(A, B, std::move(ca), std::move(cb), options, progress, std::move(report));
    report.equal = report.equal && whole;
    return report;
}

DiffHistogram diffHistogram(
    const Checkpoint& a, const Checkpoint& b, const DiffEntry& entry, size_t bins, const Progress& progress)
{
    DiffHistogram h;
    if (bins == 0 || !entry.tensor || !entry.valuesCompared || entry.numDiff == 0) return h;
    const Entry* ea = a.find(entry.keyA);
    const Entry* eb = b.find(entry.keyB);
    // a pair the report formed from other entries (a flat parameter's slice) is not two entries: no histogram
    if (!ea || !eb || !ea->isTensor() || !eb->isTensor() || ea->tensor->shape != eb->tensor->shape
        || ea->tensor->shape != entry.shapeA)
        return h;
    fillHistogram(a, *ea, b, *eb, entry.maxAbsDiff, bins, h.edges, h.counts, progress);
    return h;
}

DiffReport diffCheckpoints(
    const Checkpoint& a, const Checkpoint& b, const DiffOptions& options, const Progress& progress)
{
    return readGuarded({&a, &b}, [&] { return diffCheckpointsUnguarded(a, b, options, progress); });
}

static DiffReport diffRanksUnguarded(
    const Checkpoint& cp, int rankA, int rankB, const DiffOptions& options, const Progress& progress)
{
    // a view of the checkpoint restricted to one rank's chunks, per side; tensors compared chunk by chunk in order
    DiffReport report;
    report.pathA = cp.path + " (rank " + std::to_string(rankA) + ")";
    report.pathB = cp.path + " (rank " + std::to_string(rankB) + ")";
    // per-rank files: a replicated tensor (a step counter) is each file's own copy, read from rank 0's; which rank
    // holds it says nothing (before: "not in rank 1", though rank 1's file holds it). The reader compares the copies.
    const bool perRankFiles = cp.format == CheckpointFormat::TorchSaveRanks;
    size_t replicated = 0;
    auto restrict = [&](int rank) {
        auto c = std::make_shared<Checkpoint>();
        c->format = cp.format;
        c->path = report.pathA;
        c->arena = cp.arena;
        c->files = cp.files;
        for (const auto& e : cp.entries) {
            if (!e.isTensor()) continue;
            if (perRankFiles && e.tensor->subclass.empty()) {
                replicated += rank == rankA;
                continue;
            }
            Entry r = e;
            r.tensor->chunks.clear();
            // the rank's chunks, concatenated along dim 0, as a tensor of their own
            int64_t rows = 0;
            std::vector<int64_t> shape;
            bool stackable = true;
            for (size_t i = 0; i < e.tensor->chunks.size(); ++i) {
                if (e.tensor->chunks.rank(i) != rank) continue;
                TensorChunk ch = e.tensor->chunks[i];
                if (r.tensor->chunks.empty()) shape = ch.sizes;
                if (ch.sizes.size() != shape.size()
                    || (!shape.empty() && !std::equal(ch.sizes.begin() + 1, ch.sizes.end(), shape.begin() + 1)))
                    stackable = false;
                if (!ch.offsets.empty()) {
                    ch.offsets.assign(ch.offsets.size(), 0);
                    ch.offsets[0] = rows;
                    rows += ch.sizes[0];
                }
                r.tensor->chunks.push_back(ch);
            }
            if (r.tensor->chunks.empty()) continue;
            if (!stackable) continue;
            if (!shape.empty()) shape[0] = rows;
            r.tensor->shape = shape;
            c->entries.push_back(std::move(r));
        }
        c->buildIndex();
        return c;
    };
    auto a = restrict(rankA);
    auto b = restrict(rankB);
    b->path = report.pathB;
    if (replicated)
        report.notes.push_back(std::to_string(replicated)
            + " replicated tensor(s) (each rank file's own copy, such as step counters) are not compared here: check "
              "compares every rank's copy with rank 0's (rank-files-disagree)");
    Side A, B;
    A.cp = a.get();
    B.cp = b.get();
    PyArena arena;
    auto ca = canonicalize(A, false, arena);
    auto cb = canonicalize(B, false, arena);
    return runDiff(A, B, std::move(ca), std::move(cb), options, progress, std::move(report));
}

DiffReport diffRanks(const Checkpoint& cp, int rankA, int rankB, const DiffOptions& options, const Progress& progress)
{
    return readGuarded({&cp}, [&] { return diffRanksUnguarded(cp, rankA, rankB, options, progress); });
}

} // namespace optscope
