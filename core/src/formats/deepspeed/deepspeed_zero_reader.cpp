// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/deepspeed/deepspeed_zero_reader.h"
#include "optscope/base/error.h"
#include "optscope/base/look_ahead.h"
#include "optscope/base/pattern.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/deepspeed/deepspeed_common.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"
#include "optscope/model/flat_param_layout.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace fs = std::filesystem;

namespace optscope {

using namespace deepspeed;

namespace {

// ---- file names ----------------------------------------------------------------------------------------------------

struct FileName
{
    enum Kind { Other, ModelStates, Zero3ModelStates, OptimStates } kind = Other;
    int dp = -1;
    int mp = -1;
    bool bf16 = false;
};

int smallInt(const std::string& digits)
{
    if (digits.empty() || digits.size() > 6) return -1;
    return std::stoi(digits);
}

FileName parseFileName(const std::string& name)
{
    static const Pattern model(R"(^mp_rank_(\d+)_model_states\.pt$)");
    static const Pattern model3(R"(^zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$)");
    // "..._mp_rank_00optim_states.pt" is the old name DeepSpeed still accepts
    static const Pattern optim(R"(^(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_?optim_states\.pt$)");
    FileName f;
    std::vector<std::string> m;
    if (model.matches(name, &m)) {
        f.kind = FileName::ModelStates;
        f.mp = smallInt(m[1]);
    } else if (model3.matches(name, &m)) {
        f.kind = FileName::Zero3ModelStates;
        f.dp = smallInt(m[1]);
        f.mp = smallInt(m[2]);
    } else if (optim.matches(name, &m)) {
        f.kind = FileName::OptimStates;
        f.bf16 = !m[1].empty();
        f.dp = smallInt(m[2]);
        f.mp = smallInt(m[3]);
    }
    if (f.mp < 0 || (f.kind != FileName::ModelStates && f.dp < 0)) f.kind = FileName::Other;
    return f;
}

/// the files of one model-parallel rank
struct MpFiles
{
    std::string model; ///< mp_rank_MM_model_states.pt
    std::map<int, std::string> model3; ///< dp rank -> zero_pp_rank_R_mp_rank_MM_model_states.pt
    std::map<int, std::string> optim; ///< dp rank -> [bf16_]zero_pp_rank_R_mp_rank_MM_optim_states.pt
};

std::string mpName(int mp)
{
    char buf[24];
    std::snprintf(buf, sizeof buf, "mp_rank_%02d", mp);
    return buf;
}

std::string optimFileName(bool bf16, int dp, int mp)
{
    return std::string(bf16 ? "bf16_" : "") + "zero_pp_rank_" + std::to_string(dp) + "_" + mpName(mp)
        + "_optim_states.pt";
}

std::string modelFileName(int mp)
{
    return mpName(mp) + "_model_states.pt";
}

std::string zero3ModelFileName(int dp, int mp)
{
    return "zero_pp_rank_" + std::to_string(dp) + "_" + mpName(mp) + "_model_states.pt";
}

/// A tag folder that cannot be listed (plain HTTP): its files, found by DeepSpeed's own names. Model-parallel rank 0's
/// files say how the others are named (bf16_ or not; ZeRO-3 model states or not); then ranks are asked for in
/// batches that double (their HEADs in flight together, statAhead) until a batch finds none: the model-parallel
/// ranks, then each one's data-parallel ranks. A gap narrower than its batch is stepped over, as a listing would;
/// files of other names (MoE experts) are not found, so their "not read" warning is missing.
std::vector<FolderEntry> zeroFilesByName(const Location& dir)
{
    constexpr int kMostRanks = 1 << 20;
    std::vector<FolderEntry> found;
    // asks for @p names, keeps those that are files; returns how many were
    const auto ask = [&](const std::vector<std::string>& names) {
        std::vector<std::string> locations;
        for (const auto& n : names)
            locations.push_back(childLocation(dir.string(), n));
        statAhead(locations);
        size_t n = 0;
        for (size_t i = 0; i < names.size(); ++i)
            if (isFile(locations[i])) {
                found.push_back({names[i], locations[i]});
                ++n;
            }
        return n;
    };
    if (ask({modelFileName(0), optimFileName(false, 0, 0), optimFileName(true, 0, 0), zero3ModelFileName(0, 0)}) == 0)
        return found;
    bool bf16 = false, zero3 = false;
    for (const auto& f : found) {
        const FileName n = parseFileName(f.name);
        if (n.kind == FileName::OptimStates) bf16 = n.bf16;
        if (n.kind == FileName::Zero3ModelStates) zero3 = true;
    }
    const auto namesOf = [&](int dp, int mp, std::vector<std::string>& names) {
        names.push_back(optimFileName(bf16, dp, mp));
        if (zero3) names.push_back(zero3ModelFileName(dp, mp));
        if (!zero3 && dp == 0) names.push_back(modelFileName(mp));
    };
    int mpCount = 1;
    for (int first = 1, batch = 8; first < kMostRanks; first += batch, batch *= 2) {
        std::vector<std::string> names;
        for (int mp = first; mp < first + batch; ++mp)
            namesOf(0, mp, names);
        if (ask(names) == 0) break;
        mpCount = first + batch;
    }
    for (int first = 1, batch = 8; first < kMostRanks; first += batch, batch *= 2) {
        std::vector<std::string> names;
        for (int mp = 0; mp < mpCount; ++mp)
            for (int dp = first; dp < first + batch; ++dp)
                namesOf(dp, mp, names);
        if (ask(names) == 0) break;
    }
    return found;
}

/// what a ZeRO folder holds: its listing, or over plain HTTP the files found by DeepSpeed's names
std::vector<FolderEntry> zeroFolderFiles(const Location& dir)
{
    return canListFolder(dir.string()) ? listFolder(dir) : zeroFilesByName(dir);
}

bool hasZeroFiles(const Location& dir)
{
    std::error_code ec;
    // the optimizer files make it ZeRO: a model states file alone is a plain (ZeRO-0) torch.save file
    if (!canListFolder(dir.string())) {
        // plain HTTP: rank 0's optimizer file of the first model-parallel rank, by either of its names
        const std::vector<std::string> rank0 {childLocation(dir.string(), optimFileName(false, 0, 0)),
            childLocation(dir.string(), optimFileName(true, 0, 0))};
        statAhead(rank0);
        return isFile(rank0[0]) || isFile(rank0[1]);
    }
    for (const FolderEntry& it : listFolder(dir))
        if (parseFileName(it.name).kind == FileName::OptimStates) return true;
    return false;
}

std::string readTag(const Location& file)
{
    // a tag is a folder name: 4 KiB is plenty, and a 3 GB file named latest must not be read whole
    constexpr size_t kMaxTagFile = 4096;
    if (const LocationStat s = statLocation(file.string()); s.kind == LocationKind::File && s.size > kMaxTagFile)
        throw Error(ErrorKind::Format, file.string(),
            "is larger than " + std::to_string(kMaxTagFile) + " bytes: not a checkpoint tag (DeepSpeed writes the "
                + "tag folder's name into it)");
    std::string tag;
    try {
        tag = readSmallFile(file.string(), kMaxTagFile);
    } catch (const Error& e) {
        if (isReadFailure(e)) throw; // a `latest` that is there but cannot be read names the file and the failure
        return {}; // no tag
    }
    const auto b = tag.find_first_not_of(" \t\r\n");
    const auto e = tag.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : tag.substr(b, e - b + 1);
}

/// the number in a tag "global_step12" (-1 if none), to pick the newest folder when `latest` is missing
int64_t tagNumber(const std::string& tag)
{
    static const Pattern num(R"((\d+)$)");
    std::vector<std::string> m;
    if (!num.search(tag, &m) || m[1].size() > 15) return -1;
    return std::stoll(m[1]);
}

// ---- one loaded file -----------------------------------------------------------------------------------------------

struct Loaded
{
    std::string rel; ///< file name relative to the tag folder
    std::string abs;
    TorchSaveArchive ar;
};

/// a 1-D contiguous tensor of a loaded file: where its elements are
struct FlatTensor
{
    const Loaded* file = nullptr;
    DType dtype = DType::Unknown;
    int64_t numel = 0;
    TensorChunk base; ///< the chunk of the whole tensor: source offset/length, storageOffset of element 0
};

// ---- the reading ---------------------------------------------------------------------------------------------------

struct ParamState
{
    std::string name;
    bool tensor = false;
    TensorEntry entry;
    const PyValue* value = nullptr;
};

class ZeroReading
{
public:
    ZeroReading(Checkpoint& cp, CheckpointBuilder& builder, Location tagDir, const Progress& progress)
        : m_cp(cp)
        , m_builder(builder)
        , m_dir(std::move(tagDir))
        , m_progress(progress)
    { }

    std::string detail;
    int m_mpCount = 1; ///< model-parallel ranks found

    /// the files of model-parallel rank @p mp as entries under @p prefix; @p main: the rank whose facts (stage, world
    /// size, partitions) the checkpoint reports
    void readMp(int mp, const MpFiles& files, const KeyPath& prefix, bool main);

    /// remote: the files readMp will load, in its order; while one is read, the first bytes of the next ones are
    /// fetched (each file's round trips one after the other, at 1,024 ranks, were most of the time)
    void willLoad(std::vector<std::string> order)
    {
        m_order = std::move(order);
        for (size_t i = 0; i < m_order.size(); ++i)
            m_orderIndex.emplace(m_order[i], i);
        m_ahead.emplace(
            m_order.size(), [](size_t) { return uint64_t(128) << 10; },
            [this](size_t i) {
                try {
                    const auto file = m_cp.files->open(m_order[i]);
                    prefetchTorchSaveArchive(*file, 0, file->size());
                } catch (const Error&) {
                    // met again when the file is loaded, and said there
                }
            },
            uint64_t(4) << 20, 16);
    }

private:
    /// what the optimizer files of one model-parallel rank say
    struct OptimFiles
    {
        std::map<int, const Loaded*> files; ///< by data-parallel rank
        std::map<int, const PyValue*> stateDicts; ///< each file's optimizer_state_dict
        const PyValue* sd0 = nullptr; ///< the lowest rank's optimizer_state_dict
        int stage = 0; ///< 1, 2 or 3 (BF16_Optimizer: 1)
        bool bf16Optimizer = false;
        int worldSize = 0; ///< partition_count
    };
    struct ModelStates
    {
        const Loaded* file = nullptr; ///< mp_rank_MM_model_states.pt, or ZeRO-3's lowest rank's
        std::map<int, const Loaded*> zero3; ///< ZeRO-3: every rank's, by data-parallel rank
        const PyValue* root = nullptr; ///< file's
        std::vector<std::vector<Member>> groups; ///< param_shapes
    };
    /// the parameters as read from the partitions, before they become entries
    struct Params
    {
        std::map<std::string, TensorEntry> weights;
        std::map<std::string, std::vector<ParamState>> states;
        std::vector<std::vector<std::string>> groupFqns;
        std::vector<const PyValue*> groupDicts; ///< hyperparameters per param group (null when not saved)
        std::vector<FlatPartitionSlot> slots;
        void addState(const std::string& fqn, ParamState s) { states[fqn].push_back(std::move(s)); }
    };
    OptimFiles readOptimFiles(int mp, const MpFiles& files);
    ModelStates readModelStates(int mp, const MpFiles& files, int stage);
    std::vector<int> checkRankFiles(int mp, const OptimFiles& o, const ModelStates& model, bool main);
    void readZero12(const OptimFiles& o, const ModelStates& model, const std::vector<int>& missing, Params& out);
    /// ZeRO-1/2, one rank's view of one param group: its fp32 partition, padding and base optimizer state
    struct Zero12Part
    {
        FlatTensor fp32;
        int64_t padding = 0;
        int64_t real = 0; ///< elements of parameters (no padding)
        const PyValue* state = nullptr; ///< the base optimizer's state of this group's flat partition
    };
    using Zero12Parts = std::map<int, std::vector<Zero12Part>>; ///< by data-parallel rank, then by group
    /// what ZeRO-1/2's rank files say of their groups, by rank; whether the checkpoint is elastic (a state per group,
    /// no hyperparameters), and the first rank's base param_groups
    Zero12Parts readZero12Parts(
        const OptimFiles& o, const ModelStates& model, bool& elastic, const PyValue*& baseGroups);
    /// group @p g's partition length, the same on every rank (checked); its elements against param_shapes'
    int64_t zero12PartitionLength(const OptimFiles& o, const ModelStates& model, const Zero12Parts& parts, size_t g,
        const std::vector<int>& missing);
    /// per rank: the flat 1-D state tensors @p names of group @p g, each checked to cover the partition
    std::map<int, std::map<std::string, FlatTensor>> zero12StateFlats(
        const OptimFiles& o, const Zero12Parts& parts, size_t g, const std::vector<std::string>& names);
    /// parameter @p k of group @p g: its weight and states from the pieces of its range in the ranks' partitions,
    /// and where it lies (the FQN mapping)
    void addZero12Param(const OptimFiles& o, const Zero12Parts& parts, size_t g, const FlatParamLayout& layout,
        size_t k, const std::vector<std::string>& stateNames,
        const std::map<int, std::map<std::string, FlatTensor>>& stateFlat, const std::vector<int>& missing,
        bool elastic, Params& out);
    void readZero3(const OptimFiles& o, const ModelStates& model, Params& out);
    /// ZeRO-3, one parameter: its sub-group, its partition per rank, where it lies in each rank's joined flats
    struct Zero3Param
    {
        Member m;
        int subGroup = 0;
        int64_t q = 0; ///< partition per rank
        int64_t at = 0; ///< position in each rank's joined sub-group flats
    };
    /// ZeRO-3, one rank: the flat tensors of "fp32" (named "") or of a shaped state, per sub-group, with their starts
    struct Zero3Joined
    {
        std::vector<FlatTensor> parts;
        std::vector<int64_t> starts;
        int64_t total = 0;
    };
    using Zero3Flats = std::map<int, std::map<std::string, Zero3Joined>>; ///< by data-parallel rank, then name
    /// every rank's joined flats; the state names (the first rank's order) and each sub-group's first state dict
    Zero3Flats readZero3Flats(
        const OptimFiles& o, std::vector<std::string>& stateNames, std::map<int, const PyValue*>& subState0);
    /// the rank files' flats against the @p perRank elements param_shapes need, and against each other
    void checkZero3Lengths(const OptimFiles& o, const ModelStates& model, const Zero3Flats& flats, int64_t perRank);
    /// parameter @p p: its weight and states from its pieces in the ranks' joined flats, and its FQN-mapping slot
    void addZero3Param(const OptimFiles& o, const Zero3Flats& flats, const Zero3Param& p,
        const std::vector<std::string>& stateNames, const PyValue* subState, Params& out);
    std::vector<std::string> readModelOnlyTensors(const OptimFiles& o, const ModelStates& model, Params& out);
    void addEntries(const KeyPath& prefix, const std::vector<std::string>& moduleOrder, Params& params);

    const Loaded* load(const std::string& rel)
    {
        auto it = m_loaded.find(rel);
        if (it != m_loaded.end()) return it->second.get();
        m_progress.checkCancelled();
        if (auto at = m_orderIndex.find(rel); m_ahead && at != m_orderIndex.end()) m_ahead->before(at->second);
        auto l = std::make_unique<Loaded>();
        l->rel = rel;
        l->abs = (m_dir / rel).string();
        // through the checkpoint's files: a rank file that is a symlink out of the tag folder is not read
        auto file = m_cp.files->openArchive(rel);
        l->ar = readTorchSaveArchive(file, 0, file->size(), *m_cp.arena, l->abs);
        m_builder.addPickleWarnings(l->ar.warnings);
        return m_loaded.emplace(rel, std::move(l)).first->second.get();
    }

    /// @p v must be a 1-D contiguous tensor of @p file; throws Error naming the file otherwise
    FlatTensor flat(const PyValue* v, const Loaded& file, const std::string& what)
    {
        if (!v || v->kind != PyKind::Tensor || !v->tensor->storage)
            throw Error(ErrorKind::Format, file.abs, what + " is not a tensor (found " + pyRepr(v, 60) + ")");
        const PyTensorInfo& t = *v->tensor;
        if (t.sizes.size() != 1 || (t.sizes[0] > 1 && t.strides[0] != 1))
            throw Error(ErrorKind::Format, file.abs,
                what + " is not a 1-D contiguous flat partition (shape " + shapeText(t.sizes) + ")");
        FlatTensor f;
        f.file = &file;
        f.dtype = t.dtype;
        f.numel = t.sizes[0];
        f.base = CheckpointBuilder::chunkFromTensor(t, file.ar, file.rel, file.abs + " (" + what + ")");
        return f;
    }

    /// chunks for elements [begin, end) of a tensor of @p shape stored from element @p at of @p src on @p rank
    static void addPieces(TensorEntry& e, int64_t begin, int64_t end, const FlatTensor& src, int64_t at, int rank)
    {
        const auto strides = contiguousStrides(e.shape);
        for (const auto& b : flatRangeBoxes(e.shape, begin, end)) {
            TensorChunk c;
            c.rank = rank;
            c.offsets = b.offsets;
            c.sizes = b.sizes;
            c.source = src.base.source;
            c.source.storageOffset = src.base.source.storageOffset + at + (b.flatStart - begin);
            c.source.strides = e.shape.empty() ? std::vector<int64_t> {} : strides;
            e.chunks.push_back(c);
        }
    }

    /// a whole tensor of a model states file as one chunk
    TensorEntry wholeTensor(const PyValue* v, const Loaded& file, const std::string& what, int rank)
    {
        if (!v || v->kind != PyKind::Tensor || !v->tensor->storage)
            throw Error(ErrorKind::Format, file.abs, what + " is not a tensor (found " + pyRepr(v, 60) + ")");
        TensorEntry e;
        e.dtype = v->tensor->dtype;
        e.shape = v->tensor->sizes;
        TensorChunk c = CheckpointBuilder::chunkFromTensor(*v->tensor, file.ar, file.rel, file.abs + " (" + what + ")");
        c.rank = rank;
        e.chunks.push_back(c);
        return e;
    }

    void warn(ReaderCode code, std::string message, bool isError, std::string loadError = {}, std::string fix = {})
    {
        CheckpointWarning w;
        w.code = code;
        w.message = std::move(message);
        w.isError = isError;
        w.loadError = std::move(loadError);
        w.fix = std::move(fix);
        m_cp.warnings.push_back(std::move(w));
    }

    Checkpoint& m_cp;
    CheckpointBuilder& m_builder;
    Location m_dir;
    const Progress& m_progress;
    std::map<std::string, std::unique_ptr<Loaded>> m_loaded;
    std::vector<std::string> m_order; ///< willLoad's
    std::unordered_map<std::string, size_t> m_orderIndex;
    std::optional<LookAhead> m_ahead;
};

/// a ZeRO-1/2 param group's layout, as FSDP1 flat parameters are described: its members one after another in a
/// flat buffer of @p worldSize partitions of @p partition elements, the rest padding
FlatParamLayout zeroGroupLayout(const std::vector<Member>& members, int worldSize, int64_t partition)
{
    FlatParamLayout layout;
    layout.worldSize = worldSize;
    layout.shardNumel = partition;
    int64_t off = 0;
    for (const auto& m : members) {
        layout.segments.push_back({false, static_cast<int>(layout.members.size()), off, m.numel});
        layout.members.push_back({m.fqn, m.shape, m.numel, off});
        off += m.numel;
    }
    if (worldSize * partition > off) layout.segments.push_back({true, -1, off, worldSize * partition - off});
    layout.unpaddedNumel = off;
    return layout;
}

std::string rangesText(const std::vector<std::pair<int, std::pair<int64_t, int64_t>>>& pieces)
{
    std::string t;
    for (const auto& [rank, range] : pieces)
        t += (t.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " [" + std::to_string(range.first)
            + ", " + std::to_string(range.second) + ")";
    return t;
}

/// ", bf16 weights" / ", fp16 weights, dynamic loss scale 65536": the precision the run trained in, which the
/// weights in the checkpoint model (the fp32 masters) do not show; empty for an fp32 run
std::string precisionText(const PyValue* modelStates, const PyValue* optimState)
{
    std::optional<DType> dtype;
    if (const PyValue* module = getKey(modelStates, "module"); module && module->isMapping())
        for (size_t i = 0; i < module->size() && !dtype; ++i) {
            const PyValue* v = module->dictValue(i);
            if (v->kind == PyKind::Tensor && dtypeIsFloatingPoint(v->tensor->dtype)) dtype = v->tensor->dtype;
        }
    if (!dtype || *dtype == DType::Float32) return {};
    std::string text = ", "
        + std::string(*dtype == DType::BFloat16 ? "bf16"
                : *dtype == DType::Float16      ? "fp16"
                                                : dtypeName(*dtype))
        + " weights";
    // fp16: the loss scale reached (DynamicLossScaler.cur_scale / LossScaler.cur_scale); 1.0 for bf16, not worth saying
    const PyValue* scaler = getKey(optimState, "loss_scaler");
    const PyValue* state = scaler && scaler->kind == PyKind::Object ? scaler->object->state : nullptr;
    if (const PyValue* scale = getKey(state, "cur_scale"); scale && *dtype == DType::Float16) {
        const PyValue* dyn = getKey(optimState, "dynamic_loss_scale");
        const bool dynamic = dyn && dyn->kind == PyKind::Bool && dyn->boolean;
        text += std::string(dynamic ? ", dynamic loss scale " : ", loss scale ") + pyRepr(scale, 24);
    }
    return text;
}

/// the optimizer files of one model-parallel rank: each rank's state dict, the ZeRO stage and the world size
ZeroReading::OptimFiles ZeroReading::readOptimFiles(int mp, const MpFiles& files)
{
    const std::string tagDir = m_dir.string();
    OptimFiles o;
    auto& optim = o.files;
    auto& osd = o.stateDicts;
    if (files.optim.empty())
        throw Error(ErrorKind::Format, tagDir,
            "holds no '*_" + mpName(mp)
                + "_optim_states.pt' files (a DeepSpeed checkpoint without ZeRO optimizer "
                  "state, or not a DeepSpeed checkpoint)");
    std::map<int, int> stageOf; // -1: BF16_Optimizer (no zero_stage)
    size_t done = 0;
    for (const auto& [dp, rel] : files.optim) {
        m_progress(0.8 * double(done++) / double(files.optim.size()), "reading");
        const Loaded* l = load(rel);
        const PyValue* sd = getKey(l->ar.root, "optimizer_state_dict");
        if (!sd || !sd->isMapping())
            throw Error(ErrorKind::Format, l->abs, "has no optimizer_state_dict (not a DeepSpeed optim states file)");
        optim[dp] = l;
        osd[dp] = sd;
        const auto stage = zeroStageOf(getKey(sd, "zero_stage"));
        if (stage)
            stageOf[dp] = *stage;
        else if (getKey(sd, "single_partition_of_fp32_groups"))
            stageOf[dp] = -1;
        else
            throw Error(ErrorKind::Format, l->abs,
                "optimizer_state_dict has neither zero_stage nor single_partition_of_fp32_groups (not a ZeRO "
                "checkpoint: zero_to_fp32 says \""
                    + l->abs + " is not a zero checkpoint\")");
    }
    const int first = optim.begin()->first;
    o.sd0 = osd[first];
    const int stageCode = stageOf[first];
    o.bf16Optimizer = stageCode == -1;
    o.stage = o.bf16Optimizer ? 1 : stageCode;
    for (const auto& [dp, s] : stageOf)
        if (s != stageCode)
            warn(ReaderCode::ZeroStageMismatch,
                optim[dp]->rel + " was written at ZeRO stage " + std::to_string(s) + " but " + optim[first]->rel
                    + " at stage " + std::to_string(stageCode)
                    + ": the rank files come from different runs (an old checkpoint partly overwritten?)",
                true, {}, "save the checkpoint again, or restore the rank files of one run");

    int W = 0;
    const PyValue* pc = getKey(o.sd0, "partition_count");
    if (auto n = asInt(pc)) W = static_cast<int>(*n);
    if (pc && pc->isSequence())
        for (const auto* x : pc->items())
            if (auto n = asInt(x)) W = std::max(W, static_cast<int>(*n));
    if (W <= 0 || W > (1 << 20))
        throw Error(ErrorKind::Format, optim[first]->abs, "has no valid partition_count (" + pyRepr(pc, 40) + ")");
    o.worldSize = W;
    return o;
}

/// the model states: the one file (ZeRO-1/2) or every rank's (ZeRO-3), with the parameters' shapes by group
ZeroReading::ModelStates ZeroReading::readModelStates(int mp, const MpFiles& files, int stage)
{
    const std::string tagDir = m_dir.string();
    ModelStates states;
    const Loaded*& modelFile = states.file;
    auto& model3 = states.zero3;
    if (stage == 3) {
        for (const auto& [dp, rel] : files.model3)
            model3[dp] = load(rel);
        if (model3.empty()) {
            if (!files.model.empty())
                warn(ReaderCode::ZeroStageMismatch,
                    "the optimizer files are ZeRO stage 3 but the folder holds the ZeRO-1/2 model states file "
                        + files.model + " and no 'zero_pp_rank_*_" + mpName(mp) + "_model_states.pt'",
                    true,
                    "FileNotFoundError: can't find model states file at '"
                        + (m_dir / zero3ModelFileName(0, mp)).string() + "'");
            throw Error(ErrorKind::Format, tagDir,
                "holds ZeRO-3 optimizer files but no 'zero_pp_rank_*_" + mpName(mp)
                    + "_model_states.pt' (zero_to_fp32: can't find model states file)");
        }
        modelFile = model3.begin()->second;
    } else {
        if (files.model.empty()) {
            if (!files.model3.empty())
                warn(ReaderCode::ZeroStageMismatch,
                    "the optimizer files are ZeRO stage " + std::to_string(stage)
                        + " but the folder holds only ZeRO-3 model states files (" + files.model3.begin()->second
                        + ", ...)",
                    true);
            throw Error(ErrorKind::Format, tagDir,
                "has no '" + modelFileName(mp)
                    + "' (zero_to_fp32: FileNotFoundError: can't find model states "
                      "file at '"
                    + (m_dir / modelFileName(mp)).string() + "')");
        }
        modelFile = load(files.model);
    }
    states.root = modelFile->ar.root;
    if (!getKey(states.root, "buffer_names"))
        throw Error(ErrorKind::Format, modelFile->abs,
            "is not a model state checkpoint (no buffer_names; zero_to_fp32 says \"" + modelFile->abs
                + " is not a model state checkpoint\")");
    states.groups = readParamShapes(getKey(states.root, "param_shapes"), modelFile->abs);
    return states;
}

/// the world size, rank files and stage as DeepSpeed checks them, with its own words; the ranks whose optimizer file
/// is missing
std::vector<int> ZeroReading::checkRankFiles(int mp, const OptimFiles& o, const ModelStates& model, bool main)
{
    const std::string tagDir = m_dir.string();
    const auto& optim = o.files;
    const Loaded* modelFile = model.file;
    const PyValue* ms = model.root;
    const int W = o.worldSize, stage = o.stage;
    const bool bf16Optimizer = o.bf16Optimizer;
    const auto dpWorld = asInt(getKey(ms, "dp_world_size"));
    if (dpWorld && *dpWorld != W)
        warn(ReaderCode::ZeroWorldSizeMismatch,
            modelFile->rel + " says dp_world_size " + std::to_string(*dpWorld)
                + " but the optimizer state is partitioned " + "over " + std::to_string(W)
                + " ranks (partition_count): the model states and the optimizer files " + "come from different runs",
            true,
            "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP world size of "
                + std::to_string(*dpWorld) + " but the current world size is " + std::to_string(W)
                + ". Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not "
                  "currently supported.",
            "restore the files of one run; to change the world size convert with ds_to_universal or reshard with "
            "optscope-cli reshard");
    if (const PyValue* cfg = getKey(ms, "ds_config")) {
        if (auto cfgStage = asInt(getKey(getKey(cfg, "zero_optimization"), "stage")); cfgStage && *cfgStage != stage)
            warn(ReaderCode::ZeroStageMismatch,
                modelFile->rel + "'s ds_config says ZeRO stage " + std::to_string(*cfgStage)
                    + " but the optimizer files were written at stage " + std::to_string(stage),
                true, {}, "load it with the ZeRO stage it was saved with (zero_optimization.stage)");
    }
    std::vector<int> missing;
    for (int r = 0; r < W; ++r)
        if (!optim.count(r)) missing.push_back(r);
    const std::string z2fError = "ValueError: Expected " + std::to_string(W) + " of '*_optim_states.pt' under '"
        + tagDir + "' but found " + std::to_string(optim.size())
        + " files. Possibly due to an overwrite of an old checkpoint, or a checkpoint didn't get saved by one or more "
          "processes.";
    for (int r : missing) {
        const std::string name = optimFileName(bf16Optimizer, r, mp);
        warn(ReaderCode::ZeroMissingRankFile,
            "rank " + std::to_string(r) + "'s optimizer file " + name + " is missing (partition_count "
                + std::to_string(W) + "): its partitions of every parameter are lost; DeepSpeed's rank "
                + std::to_string(r) + " fails with FileNotFoundError: [Errno 2] No such file or directory: '"
                + (m_dir / name).string() + "'",
            true, z2fError,
            "restore the file from the run that wrote the others; without it the checkpoint is incomplete");
    }
    for (const auto& [dp, l] : optim)
        if (dp >= W)
            warn(ReaderCode::ZeroWorldSizeMismatch,
                l->rel + " is for rank " + std::to_string(dp) + ", but the optimizer state is partitioned over "
                    + std::to_string(W) + " ranks: a file left from a run with more ranks",
                true, z2fError, "remove the files of the other run");
    if (stage == 3)
        for (int r = 0; r < W; ++r)
            if (!model.zero3.count(r))
                warn(ReaderCode::ZeroMissingRankFile,
                    "rank " + std::to_string(r) + "'s model states file " + zero3ModelFileName(r, mp)
                        + " is missing (ZeRO-3 writes one per rank)",
                    true,
                    "AssertionError (DeepSpeed's SDLoaderBase.check_ckpt_list: assert len(self.ckpt_list) > 0) on rank "
                        + std::to_string(r) + " in load_checkpoint",
                    "restore the file from the run that wrote the others");
    if (const auto mpWorld = asInt(getKey(ms, "mp_world_size")); main && mpWorld && *mpWorld != m_mpCount)
        warn(ReaderCode::ZeroWorldSizeMismatch,
            modelFile->rel + " says mp_world_size " + std::to_string(*mpWorld) + " but the folder holds "
                + std::to_string(m_mpCount) + " model-parallel rank(s)",
            true,
            "AssertionError: checkpoint count " + std::to_string(m_mpCount) + " is different from saved mp_world_size "
                + std::to_string(*mpWorld),
            "restore the missing mp_rank_* files");
    return missing;
}

/// ZeRO-1/2 (and BF16_Optimizer): each param group flattened, padded to a multiple of 2W and cut into W equal
/// partitions; a parameter's weights and states are the pieces of its range in the ranks' partitions
void ZeroReading::readZero12(
    const OptimFiles& o, const ModelStates& model, const std::vector<int>& missing, Params& out)
{
    bool elastic = false;
    const PyValue* baseGroups0 = nullptr;
    const Zero12Parts parts = readZero12Parts(o, model, elastic, baseGroups0);
    const int r0 = parts.begin()->first;
    for (size_t g = 0; g < model.groups.size(); ++g) {
        const int64_t P = zero12PartitionLength(o, model, parts, g, missing);
        const FlatParamLayout layout = zeroGroupLayout(model.groups[g], o.worldSize, P);
        // state names of this group, in the first rank's order
        std::vector<std::string> stateNames;
        if (const PyValue* st = parts.at(r0)[g].state; st && st->isMapping())
            for (size_t i = 0; i < st->size(); ++i)
                if (st->dictKey(i)->kind == PyKind::Str) stateNames.push_back(std::string(st->dictKey(i)->text));
        const auto stateFlat = zero12StateFlats(o, parts, g, stateNames);
        out.groupFqns.emplace_back();
        for (size_t k = 0; k < layout.members.size(); ++k)
            addZero12Param(o, parts, g, layout, k, stateNames, stateFlat, missing, elastic, out);
        out.groupDicts.push_back(
            baseGroups0 && baseGroups0->isSequence() && g < baseGroups0->size() ? baseGroups0->item(g) : nullptr);
    }
    if (elastic)
        warn(ReaderCode::ZeroElastic,
            "elastic ZeRO checkpoint: the optimizer's hyperparameters (param_groups) are not saved", false);
    detail = std::string(o.bf16Optimizer ? "DeepSpeed BF16_Optimizer (ZeRO stage 1)" : "DeepSpeed ZeRO stage ")
        + (o.bf16Optimizer ? "" : std::to_string(o.stage));
}

ZeroReading::Zero12Parts ZeroReading::readZero12Parts(
    const OptimFiles& o, const ModelStates& model, bool& elastic, const PyValue*& baseGroups0)
{
    const int W = o.worldSize;
    const size_t G = model.groups.size();
    Zero12Parts rg;
    for (const auto& [dp, sd] : o.stateDicts) {
        if (dp >= W) continue;
        const Loaded& l = *o.files.at(dp);
        const PyValue* parts = getKey(sd, "single_partition_of_fp32_groups");
        const PyValue* pads = getKey(sd, "group_paddings");
        const PyValue* base = getKey(sd, "base_optimizer_state");
        if (!parts || !parts->isSequence() || parts->size() != G)
            throw Error(ErrorKind::Format, l.abs,
                "has " + std::to_string(parts && parts->isSequence() ? parts->size() : 0)
                    + " single_partition_of_fp32_groups but param_shapes in " + model.file->rel + " lists "
                    + std::to_string(G) + " groups");
        std::vector<Zero12Part> v(G);
        for (size_t g = 0; g < G; ++g) {
            v[g].fp32 = flat(parts->item(g), l, "single_partition_of_fp32_groups[" + std::to_string(g) + "]");
            const PyValue* pad = pads && pads->isSequence() && g < pads->size() ? pads->item(g) : nullptr;
            v[g].padding = asInt(pad).value_or(0);
            if (v[g].padding < 0 || v[g].padding > (int64_t(1) << 50)
                || (o.bf16Optimizer && v[g].padding > v[g].fp32.numel))
                throw Error(ErrorKind::Format, l.abs, "group_paddings[" + std::to_string(g) + "] is invalid");
            v[g].real = o.bf16Optimizer ? v[g].fp32.numel - v[g].padding : v[g].fp32.numel;
            if (base && base->isSequence()) { // elastic: a state per group, padding stripped
                elastic = true;
                v[g].state = g < base->size() ? base->item(g) : nullptr;
            } else if (base && base->isMapping()) {
                const PyValue* pg = getKey(base, "param_groups");
                const PyValue* st = getKey(base, "state");
                const PyValue* group = pg && pg->isSequence() && g < pg->size() ? pg->item(g) : nullptr;
                const PyValue* ids = getKey(group, "params");
                const auto id
                    = ids && ids->isSequence() && ids->size() == 1 ? asInt(ids->item(0)) : std::optional<int64_t>();
                v[g].state = id ? getIntKey(st, *id) : getIntKey(st, static_cast<int64_t>(g));
                if (!baseGroups0) baseGroups0 = pg;
            }
        }
        rg[dp] = std::move(v);
    }
    if (rg.empty())
        throw Error(ErrorKind::Format, m_dir.string(), "holds no optimizer file of a rank below " + std::to_string(W));
    return rg;
}

int64_t ZeroReading::zero12PartitionLength(
    const OptimFiles& o, const ModelStates& model, const Zero12Parts& rg, size_t g, const std::vector<int>& missing)
{
    const int W = o.worldSize;
    const int r0 = rg.begin()->first;
    // every rank's partition has the same length P (the flat group is padded to a multiple of 2W first)
    const int64_t P = rg.at(r0)[g].real + rg.at(r0)[g].padding;
    if (P > (int64_t(1) << 62) / W)
        throw Error(
            ErrorKind::Format, o.files.at(r0)->abs, "group " + std::to_string(g) + "'s partitions are too large");
    for (const auto& [dp, v] : rg)
        if (v[g].real + v[g].padding != P)
            throw Error(ErrorKind::Format, o.files.at(dp)->abs,
                "group " + std::to_string(g) + "'s partition holds " + std::to_string(v[g].real + v[g].padding)
                    + " elements with padding, rank " + std::to_string(r0) + "'s " + std::to_string(P)
                    + ": the rank files do not belong together");
    int64_t total = 0;
    for (const auto& m : model.groups[g])
        total += m.numel;
    if (missing.empty()) {
        int64_t avail = 0;
        for (const auto& [dp, v] : rg)
            avail += v[g].real;
        const int64_t align = 2 * int64_t(W);
        if (ceilDiv(total, align) * align != ceilDiv(avail, align) * align)
            warn(ReaderCode::ZeroWorldSizeMismatch,
                "param group " + std::to_string(g) + " needs " + std::to_string(total) + " elements (" + model.file->rel
                    + " param_shapes) but its partitions hold " + std::to_string(avail),
                true,
                "ValueError: consumed " + std::to_string(ceilDiv(total, align) * align) + " numels out of "
                    + std::to_string(ceilDiv(avail, align) * align) + " - something is wrong");
    }
    return P;
}

std::map<int, std::map<std::string, FlatTensor>> ZeroReading::zero12StateFlats(
    const OptimFiles& o, const Zero12Parts& rg, size_t g, const std::vector<std::string>& stateNames)
{
    std::map<int, std::map<std::string, FlatTensor>> stateFlat;
    for (const auto& [dp, v] : rg)
        for (const auto& name : stateNames) {
            const PyValue* t = getKey(v[g].state, name);
            if (!t || t->kind != PyKind::Tensor || t->tensor->sizes.empty()) continue;
            FlatTensor f
                = flat(t, *o.files.at(dp), "base_optimizer_state group " + std::to_string(g) + " '" + name + "'");
            if (f.numel < v[g].real)
                throw Error(ErrorKind::Format, o.files.at(dp)->abs,
                    "base_optimizer_state group " + std::to_string(g) + " '" + name + "' holds "
                        + std::to_string(f.numel) + " elements, fewer than the " + std::to_string(v[g].real)
                        + " of its partition");
            stateFlat[dp].emplace(name, f);
        }
    return stateFlat;
}

void ZeroReading::addZero12Param(const OptimFiles& o, const Zero12Parts& rg, size_t g, const FlatParamLayout& layout,
    size_t k, const std::vector<std::string>& stateNames,
    const std::map<int, std::map<std::string, FlatTensor>>& stateFlat, const std::vector<int>& missing, bool elastic,
    Params& out)
{
    const int W = o.worldSize;
    const int r0 = rg.begin()->first;
    const int64_t P = layout.shardNumel;
    const auto& m = layout.members[k];
    out.groupFqns.back().push_back(m.fqn);
    TensorEntry w;
    w.dtype = rg.at(r0)[g].fp32.dtype;
    w.shape = m.shape;
    std::map<std::string, TensorEntry> tensorStates;
    std::vector<std::pair<int, std::pair<int64_t, int64_t>>> pieces;
    for (const auto& [dp, v] : rg) {
        const int64_t lo = std::max(m.offset, int64_t(dp) * P);
        const int64_t hi = std::min(m.offset + m.numel, int64_t(dp) * P + v[g].real);
        if (lo >= hi) continue;
        pieces.push_back({dp, {lo - m.offset, hi - m.offset}});
        const int64_t at = lo - int64_t(dp) * P; // position in the rank's partition
        addPieces(w, lo - m.offset, hi - m.offset, v[g].fp32, at, dp);
        if (const auto flats = stateFlat.find(dp); flats != stateFlat.end())
            for (const auto& [name, f] : flats->second) {
                auto& e = tensorStates[name];
                e.dtype = f.dtype;
                e.shape = m.shape;
                addPieces(e, lo - m.offset, hi - m.offset, f, at, dp);
            }
    }
    w.inMissingFile = pieces.empty() && !missing.empty();
    out.weights[m.fqn] = std::move(w);
    for (const auto& name : stateNames) {
        ParamState s;
        s.name = name;
        const PyValue* t0 = getKey(rg.at(r0)[g].state, name);
        if (auto it = tensorStates.find(name); it != tensorStates.end()) {
            s.tensor = true;
            s.entry = std::move(it->second);
            s.entry.shape = m.shape;
        } else if (t0 && t0->kind == PyKind::Tensor && t0->tensor->sizes.empty()) {
            s.tensor = true; // one value per flat partition (step): every parameter has it
            s.entry = wholeTensor(t0, *o.files.at(r0), "base_optimizer_state '" + name + "'", r0);
        } else if (t0 && t0->kind == PyKind::Tensor) {
            if (missing.empty()) continue;
            // a shaped state whose partitions all lie in the missing rank files: there, with no chunk
            s.tensor = true;
            s.entry.dtype = t0->tensor->dtype;
            s.entry.shape = m.shape;
            s.entry.inMissingFile = true;
        } else {
            s.value = t0 ? t0 : m_cp.arena->makeNone();
        }
        out.addState(m.fqn, std::move(s));
    }
    if (elastic && !getKey(rg.at(r0)[g].state, "step"))
        if (const PyValue* step = getKey(o.sd0, "base_optimizer_state_step")) {
            ParamState s;
            s.name = "step";
            s.value = step;
            out.addState(m.fqn, std::move(s));
        }
    // the FQN mapping: where it lies in the partitions
    FlatPartitionSlot slot;
    slot.fqn = m.fqn;
    slot.buffer = static_cast<int>(g);
    slot.bufferName = "ZeRO-" + std::to_string(o.stage) + " group " + std::to_string(g);
    slot.offset = m.offset;
    slot.note = (pieces.size() > 1 ? "split over ranks: " : "") + rangesText(pieces) + " of " + std::to_string(m.numel)
        + " elements; partitions of " + std::to_string(P) + " per rank";
    const int64_t pad = layout.rankPadding(W - 1);
    if (k + 1 == layout.members.size() && pad > 0)
        slot.note += ", the group's last " + std::to_string(W * P - layout.unpaddedNumel) + " elements padding";
    out.slots.push_back(std::move(slot));
}

/// ZeRO-3: each parameter partitioned on its own (ceil(numel / W) per rank); a rank's sub-group flats joined in
/// param_shapes order
void ZeroReading::readZero3(const OptimFiles& o, const ModelStates& model, Params& out)
{
    const int W = o.worldSize;
    std::vector<Zero3Param> params;
    int64_t pos = 0;
    for (size_t s = 0; s < model.groups.size(); ++s)
        for (const auto& m : model.groups[s]) {
            Zero3Param p;
            p.m = m;
            p.subGroup = static_cast<int>(s);
            p.q = ceilDiv(m.numel, W);
            p.at = pos;
            pos += p.q;
            params.push_back(std::move(p));
        }
    std::vector<std::string> stateNames;
    std::map<int, const PyValue*> subState0; // sub-group -> first rank's state dict
    const Zero3Flats flats = readZero3Flats(o, stateNames, subState0);
    checkZero3Lengths(o, model, flats, pos);
    std::vector<std::vector<std::string>> subFqns(model.groups.size());
    for (const auto& p : params) {
        subFqns[static_cast<size_t>(p.subGroup)].push_back(p.m.fqn);
        const auto sub = subState0.find(p.subGroup);
        addZero3Param(o, flats, p, stateNames, sub == subState0.end() ? nullptr : sub->second, out);
    }
    // param groups list their sub-groups
    const PyValue* pg0 = getKey(getKey(o.sd0, "optimizer_state_dict"), "param_groups");
    if (pg0 && pg0->isSequence()) {
        for (const auto* g : pg0->items()) {
            out.groupFqns.emplace_back();
            const PyValue* ids = getKey(g, "params");
            if (ids && ids->isSequence())
                for (const auto* id : ids->items())
                    if (auto s = asInt(id); s && *s >= 0 && static_cast<size_t>(*s) < subFqns.size())
                        for (const auto& f : subFqns[static_cast<size_t>(*s)])
                            out.groupFqns.back().push_back(f);
            out.groupDicts.push_back(g);
        }
    } else {
        for (const auto& f : subFqns) {
            out.groupFqns.push_back(f);
            out.groupDicts.push_back(nullptr);
        }
    }
    detail = "DeepSpeed ZeRO stage 3";
}

ZeroReading::Zero3Flats ZeroReading::readZero3Flats(
    const OptimFiles& o, std::vector<std::string>& stateNames, std::map<int, const PyValue*>& subState0)
{
    const int W = o.worldSize;
    Zero3Flats buf;
    for (const auto& [dp, sd] : o.stateDicts) {
        if (dp >= W) continue;
        const Loaded& l = *o.files.at(dp);
        const PyValue* flats = getKey(sd, "fp32_flat_groups");
        const PyValue* st = getKey(getKey(sd, "optimizer_state_dict"), "state");
        if (!flats || !flats->isSequence())
            throw Error(ErrorKind::Format, l.abs, "has no fp32_flat_groups list (ZeRO-3)");
        auto& joined = buf[dp];
        joined[""]; // the fp32 flats, even when the list is empty (then their lengths are what is wrong)
        for (size_t s = 0; s < flats->size(); ++s) {
            const PyValue* sub = getIntKey(st, static_cast<int64_t>(s));
            if (subState0.find(static_cast<int>(s)) == subState0.end()) subState0[static_cast<int>(s)] = sub;
            if (stateNames.empty() && sub && sub->isMapping())
                for (size_t i = 0; i < sub->size(); ++i)
                    if (sub->dictKey(i)->kind == PyKind::Str) stateNames.push_back(std::string(sub->dictKey(i)->text));
            auto push = [&](const std::string& name, const PyValue* v, const std::string& what) {
                Zero3Joined& j = joined[name];
                FlatTensor f = flat(v, l, what);
                j.starts.push_back(j.total);
                j.parts.push_back(f);
                j.total += f.numel;
            };
            push("", flats->item(s), "fp32_flat_groups[" + std::to_string(s) + "]");
            for (const auto& name : stateNames) {
                const PyValue* t = getKey(sub, name);
                if (t && t->kind == PyKind::Tensor && !t->tensor->sizes.empty())
                    push(name, t, "optimizer_state_dict state " + std::to_string(s) + " '" + name + "'");
            }
        }
    }
    if (buf.empty())
        throw Error(ErrorKind::Format, m_dir.string(), "holds no optimizer file of a rank below " + std::to_string(W));
    return buf;
}

void ZeroReading::checkZero3Lengths(const OptimFiles& o, const ModelStates& model, const Zero3Flats& buf, int64_t pos)
{
    const int W = o.worldSize;
    const int r0 = buf.begin()->first;
    const int64_t avail = buf.at(r0).at("").total;
    if (pos != avail)
        warn(ReaderCode::ZeroWorldSizeMismatch,
            "param_shapes in " + model.file->rel + " need " + std::to_string(pos) + " elements per rank (partitions of "
                + "ceil(numel / " + std::to_string(W) + ")) but rank " + std::to_string(r0)
                + "'s fp32_flat_groups hold " + std::to_string(avail),
            true,
            "ValueError: consumed " + std::to_string(pos * W) + " numels out of " + std::to_string(avail * W)
                + " - something is wrong");
    for (const auto& [dp, j] : buf)
        if (j.at("").total != avail)
            throw Error(ErrorKind::Format, o.files.at(dp)->abs,
                "fp32_flat_groups hold " + std::to_string(j.at("").total) + " elements, rank " + std::to_string(r0)
                    + "'s " + std::to_string(avail) + ": the rank files do not belong together");
}

void ZeroReading::addZero3Param(const OptimFiles& o, const Zero3Flats& buf, const Zero3Param& p,
    const std::vector<std::string>& stateNames, const PyValue* sub0, Params& out)
{
    const int W = o.worldSize;
    const int r0 = buf.begin()->first;
    const Zero3Joined& fp32 = buf.at(r0).at("");
    // elements [at, at + n) of a rank's joined flats, as pieces of the tensor from @p begin
    auto place = [&](TensorEntry& e, const Zero3Joined& j, int64_t at, int64_t begin, int64_t n, int rank) {
        for (size_t i = 0; i < j.parts.size() && n > 0; ++i) {
            const int64_t s = j.starts[i];
            const int64_t end = s + j.parts[i].numel;
            if (at >= end || at + n <= s) continue;
            const int64_t lo = std::max(at, s);
            const int64_t hi = std::min(at + n, end);
            addPieces(e, begin + (lo - at), begin + (hi - at), j.parts[i], lo - s, rank);
        }
    };
    TensorEntry w;
    w.shape = p.m.shape;
    w.dtype = fp32.parts.empty() ? DType::Float32 : fp32.parts.front().dtype;
    std::map<std::string, TensorEntry> tensorStates;
    std::vector<std::pair<int, std::pair<int64_t, int64_t>>> pieces;
    for (const auto& [dp, j] : buf) {
        const int64_t begin = int64_t(dp) * p.q;
        const int64_t n = std::min(p.q, p.m.numel - begin);
        if (n <= 0 || p.at + n > j.at("").total) continue;
        pieces.push_back({dp, {begin, begin + n}});
        place(w, j.at(""), p.at, begin, n, dp);
        for (const auto& [name, joined] : j) {
            if (name.empty() || p.at + n > joined.total) continue;
            auto& e = tensorStates[name];
            e.shape = p.m.shape;
            e.dtype = joined.parts.front().dtype;
            place(e, joined, p.at, begin, n, dp);
        }
    }
    out.weights[p.m.fqn] = std::move(w);
    for (const auto& name : stateNames) {
        ParamState s;
        s.name = name;
        const PyValue* t0 = getKey(sub0, name);
        if (auto it = tensorStates.find(name); it != tensorStates.end()) {
            s.tensor = true;
            s.entry = std::move(it->second);
        } else if (t0 && t0->kind == PyKind::Tensor && t0->tensor->sizes.empty()) {
            s.tensor = true;
            s.entry = wholeTensor(t0, *o.files.at(r0), "optimizer_state_dict '" + name + "'", r0);
        } else if (t0 && t0->kind == PyKind::Tensor) {
            continue;
        } else {
            s.value = t0 ? t0 : m_cp.arena->makeNone();
        }
        out.addState(p.m.fqn, std::move(s));
    }
    FlatPartitionSlot slot;
    slot.fqn = p.m.fqn;
    slot.buffer = p.subGroup;
    slot.bufferName = "ZeRO-3 sub-group " + std::to_string(p.subGroup);
    int64_t sgStart = 0;
    if (!fp32.starts.empty() && static_cast<size_t>(p.subGroup) < fp32.starts.size())
        sgStart = fp32.starts[static_cast<size_t>(p.subGroup)];
    slot.offset = p.at - sgStart;
    const int64_t pad = p.q * W - p.m.numel;
    slot.note = "partitioned on its own: " + std::to_string(p.q) + " per rank (" + rangesText(pieces) + ")"
        + (pad > 0 ? ", " + std::to_string(pad) + " elements padding on the last rank" : std::string());
    out.slots.push_back(std::move(slot));
}

/// what the model states hold beyond the optimizer's groups: frozen parameters, buffers, shared parameters; the
/// model's own order of its tensors
std::vector<std::string> ZeroReading::readModelOnlyTensors(const OptimFiles& o, const ModelStates& model, Params& out)
{
    const Loaded* modelFile = model.file;
    const PyValue* ms = model.root;
    const PyValue* module = getKey(ms, "module");
    const int W = o.worldSize, stage = o.stage;
    auto& weights = out.weights;
    const PyValue* bufferNames = getKey(ms, "buffer_names");
    std::set<std::string> buffers;
    if (bufferNames && bufferNames->isSequence())
        for (const auto* b : bufferNames->items())
            if (b->kind == PyKind::Str) buffers.insert(std::string(b->text));
    const PyValue* frozen = getKey(ms, "frozen_param_shapes");
    if (frozen && frozen->isMapping()) {
        for (size_t i = 0; i < frozen->size(); ++i) {
            const PyValue* k = frozen->dictKey(i);
            auto shape = asShape(frozen->dictValue(i));
            const auto numel = shape ? boundedNumel(*shape) : std::nullopt;
            if (k->kind != PyKind::Str || !numel) {
                warn(ReaderCode::BadMetadata,
                    modelFile->rel + ": frozen_param_shapes entry " + pyRepr(k, 60) + " is malformed", true);
                continue;
            }
            const std::string fqn(k->text);
            if (stage <= 2) {
                const PyValue* frag = getKey(getKey(ms, "frozen_param_fragments"), fqn);
                if (frag)
                    weights[fqn] = wholeTensor(frag, *modelFile, "frozen_param_fragments '" + fqn + "'", 0);
                else
                    warn(ReaderCode::MissingStorageInfo,
                        "frozen parameter '" + fqn + "' has no frozen_param_fragments entry in " + modelFile->rel,
                        true);
                continue;
            }
            TensorEntry w;
            w.shape = *shape;
            const int64_t n = *numel;
            const int64_t q = ceilDiv(n, W);
            for (const auto& [dp, l] : model.zero3) {
                const PyValue* frag = getKey(getKey(l->ar.root, "frozen_param_fragments"), fqn);
                if (!frag || dp >= W) continue;
                FlatTensor f = flat(frag, *l, "frozen_param_fragments '" + fqn + "'");
                w.dtype = f.dtype;
                const int64_t begin = int64_t(dp) * q;
                const int64_t len = std::min(q, n - begin);
                if (len > 0 && f.numel >= len) addPieces(w, begin, begin + len, f, 0, dp);
            }
            weights[fqn] = std::move(w);
        }
    }
    std::vector<std::string> moduleOrder;
    if (module && module->isMapping()) {
        for (size_t i = 0; i < module->size(); ++i) {
            const PyValue* k = module->dictKey(i);
            const PyValue* v = module->dictValue(i);
            if (k->kind != PyKind::Str || v->kind != PyKind::Tensor) continue;
            const std::string fqn(k->text);
            moduleOrder.push_back(fqn);
            if (weights.count(fqn)) continue;
            if (buffers.count(fqn)) {
                weights[fqn] = wholeTensor(v, *modelFile, "module '" + fqn + "'", 0);
            } else if (stage <= 2) {
                // a parameter no optimizer group holds: frozen at ZeRO-1, which records none (zero_to_fp32 drops it)
                weights[fqn] = wholeTensor(v, *modelFile, "module '" + fqn + "'", 0);
                warn(ReaderCode::ZeroFrozenFromModule,
                    "'" + fqn + "' is in no param group and in no frozen_param_shapes: taken from 'module' in "
                        + modelFile->rel + " (its " + std::string(dtypeName(v->tensor->dtype))
                        + " model weights); zero_to_fp32 leaves it out",
                    false);
            } else {
                warn(ReaderCode::ZeroFrozenMissing,
                    "'" + fqn
                        + "' is in no param group and in no frozen_param_shapes, and ZeRO-3's 'module' holds only "
                        + "an empty placeholder: its values are not in the checkpoint",
                    false);
            }
        }
    }
    if (const PyValue* shared = getKey(ms, "shared_params"); shared && shared->isMapping())
        for (size_t i = 0; i < shared->size(); ++i) {
            const PyValue* a = shared->dictKey(i);
            const PyValue* t = shared->dictValue(i);
            if (a->kind != PyKind::Str || t->kind != PyKind::Str) continue;
            auto it = weights.find(std::string(t->text));
            if (it != weights.end()) {
                weights[std::string(a->text)] = it->second;
                moduleOrder.push_back(std::string(a->text));
            }
        }
    return moduleOrder;
}

/// the entries: model (module order), optimizer state (param group order), param groups
void ZeroReading::addEntries(const KeyPath& prefix, const std::vector<std::string>& moduleOrder, Params& params)
{
    auto& weights = params.weights;
    auto& states = params.states;
    const auto& groupFqns = params.groupFqns;
    const auto& groupDicts = params.groupDicts;
    auto path = [&](std::initializer_list<KeyPathElem> rest) {
        KeyPath p = prefix;
        p.insert(p.end(), rest.begin(), rest.end());
        return p;
    };
    std::set<std::string> added;
    auto addWeight = [&](const std::string& fqn) {
        auto it = weights.find(fqn);
        if (it == weights.end() || !added.insert(fqn).second) return;
        m_builder.addTensor(path({KeyPathElem::fromKey("model"), KeyPathElem::fromKey(fqn)}), std::move(it->second));
    };
    for (const auto& fqn : moduleOrder)
        addWeight(fqn);
    for (const auto& g : groupFqns)
        for (const auto& fqn : g)
            addWeight(fqn);
    for (auto& [fqn, w] : weights)
        addWeight(fqn);
    for (const auto& g : groupFqns)
        for (const auto& fqn : g) {
            auto it = states.find(fqn);
            if (it == states.end()) continue;
            for (auto& s : it->second) {
                KeyPath p = path({KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("state"),
                    KeyPathElem::fromKey(fqn), KeyPathElem::fromKey(s.name)});
                if (s.tensor)
                    m_builder.addTensor(std::move(p), std::move(s.entry));
                else
                    m_builder.addValue(std::move(p), s.value);
            }
            states.erase(it);
        }
    for (size_t g = 0; g < groupFqns.size(); ++g) {
        PyValue* names = m_cp.arena->makeContainer(PyKind::List);
        for (const auto& f : groupFqns[g])
            names->container->items.push_back(m_cp.arena->makeStr(f, true));
        const auto gi = static_cast<int64_t>(g);
        auto groupPath = [&](const std::string& field) {
            return path({KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("param_groups"),
                KeyPathElem::fromIndex(gi), KeyPathElem::fromKey(field)});
        };
        const PyValue* d = g < groupDicts.size() ? groupDicts[g] : nullptr;
        bool hasParams = false;
        if (d && d->isMapping())
            for (size_t i = 0; i < d->size(); ++i) {
                const PyValue* k = d->dictKey(i);
                if (k->kind != PyKind::Str) continue;
                const std::string field(k->text);
                if (field == "params" || field == "param_names") {
                    hasParams = hasParams || field == "params";
                    m_builder.addValue(groupPath(field), names);
                } else {
                    m_builder.addValue(groupPath(field), d->dictValue(i));
                }
            }
        if (!hasParams) m_builder.addValue(groupPath("params"), names);
    }
}

void ZeroReading::readMp(int mp, const MpFiles& files, const KeyPath& prefix, bool main)
{
    const OptimFiles optim = readOptimFiles(mp, files);
    const ModelStates model = readModelStates(mp, files, optim.stage);
    const std::vector<int> missing = checkRankFiles(mp, optim, model, main);
    Params params;
    if (optim.stage <= 2)
        readZero12(optim, model, missing, params);
    else
        readZero3(optim, model, params);
    const std::vector<std::string> moduleOrder = readModelOnlyTensors(optim, model, params);
    addEntries(prefix, moduleOrder, params);
    if (main) {
        const int W = optim.worldSize;
        m_cp.flatSlots = std::move(params.slots);
        m_cp.zero = ZeroRunFacts {optim.stage, W};
        detail += ", " + std::to_string(W) + (W == 1 ? " data-parallel rank" : " data-parallel ranks");
        detail += precisionText(model.root, optim.sd0);
        if (const PyValue* v = getKey(model.root, "ds_version"); v && v->kind == PyKind::Str)
            detail += ", DeepSpeed " + std::string(v->text);
    }
}

} // namespace

bool DeepSpeedZeroReader::looksLikeZero(const std::string& path)
{
    std::error_code ec;
    const Location p(path);
    if (isFolder(p)) {
        if (isFile(p / DeepSpeedZeroReader::kLatestFile)) return true;
        if (hasZeroFiles(p)) return true;
        // the save folder without `latest`: a tag folder inside holds the files
        for (const FolderEntry& it : listFolder(p))
            if (isFolder(it.location) && hasZeroFiles(Location(it.location))) return true;
        return false;
    }
    const FileName f = parseFileName(p.filename().string());
    return f.kind != FileName::Other && hasZeroFiles(p.parent_path().empty() ? Location(".") : p.parent_path());
}

namespace {

/// The tag folder of the checkpoint at @p dir: @p dir itself when it holds ZeRO files, the one `latest` names, or (no
/// `latest`) the newest one holding ZeRO files, which is a warning in @p early. @p tagNote says which.
Location zeroTagFolder(
    Location dir, const std::string& path, std::vector<CheckpointWarning>& early, std::string& tagNote)
{
    if (!hasZeroFiles(dir)) {
        const Location latest = dir / DeepSpeedZeroReader::kLatestFile;
        if (isFile(latest)) {
            const std::string tag = readTag(latest);
            if (tag.empty() || tag.find('/') != std::string::npos || tag == "." || tag == "..")
                throw Error(ErrorKind::Format, latest.string(), "does not name a checkpoint tag ('" + tag + "')");
            // over plain HTTP every name is a "folder" (no listing tells): there the tag folder is one with ZeRO files
            if (!isFolder(dir / tag) || (!canListFolder(dir.string()) && !hasZeroFiles(dir / tag)))
                throw Error(ErrorKind::Format, latest.string(),
                    "names tag '" + tag + "', but there is no folder '" + (dir / tag).string()
                        + "' (DeepSpeed's load_checkpoint finds no checkpoint files and fails with AssertionError in "
                          "SDLoaderBase.check_ckpt_list)");
            refuseFolderOutside(dir.string(), tag, "named by " + latest.string());
            dir = dir / tag;
            tagNote = "tag '" + tag + "' from latest";
        } else {
            std::string best;
            int64_t bestNum = -2;
            size_t count = 0;
            for (const FolderEntry& it : listFolder(dir)) {
                if (!isFolder(it.location) || !hasZeroFiles(Location(it.location))) continue;
                ++count;
                const std::string name = it.name;
                const int64_t n = tagNumber(name);
                if (n > bestNum || (n == bestNum && name > best)) {
                    best = name;
                    bestNum = n;
                }
            }
            if (best.empty())
                throw Error(ErrorKind::Format, path, "holds no DeepSpeed checkpoint (no 'latest' and no tag folder)");
            CheckpointWarning w;
            w.code = ReaderCode::ZeroMissingLatest;
            w.message = "no 'latest' file in " + dir.string() + ": read tag '" + best + "', the newest of "
                + std::to_string(count) + " tag folder(s)";
            w.isError = true;
            w.loadError = "DeepSpeed's load_checkpoint(dir) without a tag logs \"Unable to find latest file at "
                + (dir / DeepSpeedZeroReader::kLatestFile).string()
                + ", if trying to load latest checkpoint please ensure this file exists or pass an explicit "
                  "checkpoint tag when loading a checkpoint.\" and returns (None, None): nothing is loaded and "
                  "training restarts from scratch";
            w.fix = "write the tag into " + (dir / DeepSpeedZeroReader::kLatestFile).string() + " (echo " + best
                + " > latest) or pass tag='" + best + "' to load_checkpoint";
            early.push_back(std::move(w));
            refuseFolderOutside(dir.string(), best, "of the newest tag");
            dir = dir / best;
            tagNote = "tag '" + best + "' (no latest)";
        }
    }
    return dir;
}

/// the tag folder's ZeRO files by model-parallel rank; @p other: the .pt files of other names
std::map<int, MpFiles> zeroFilesByMpRank(const Location& dir, std::vector<std::string>& other)
{
    std::map<int, MpFiles> mps;
    for (const FolderEntry& it : zeroFolderFiles(dir)) {
        if (!isFile(it.location)) continue;
        const std::string name = it.name;
        const FileName f = parseFileName(name);
        switch (f.kind) {
        case FileName::ModelStates:
            mps[f.mp].model = name;
            break;
        case FileName::Zero3ModelStates:
            mps[f.mp].model3[f.dp] = name;
            break;
        case FileName::OptimStates:
            mps[f.mp].optim[f.dp] = name;
            break;
        case FileName::Other:
            if (name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0) other.push_back(name);
            break;
        }
    }
    if (mps.empty()) throw Error(ErrorKind::Format, dir.string(), "holds no DeepSpeed model or optim states files");

    return mps;
}

} // namespace

std::shared_ptr<const Checkpoint> DeepSpeedZeroReader::open(const std::string& path, const Progress& progress)
{
    progress(0.0, "reading");
    Location dir(path);
    if (!isFolder(dir)) dir = dir.parent_path().empty() ? Location(".") : dir.parent_path();

    auto cp = std::make_shared<Checkpoint>();
    cp->format = CheckpointFormat::DeepSpeedZero;
    cp->path = path;
    cp->arena = std::make_shared<PyArena>();
    std::vector<CheckpointWarning> early;

    // the tag folder: this one, the one `latest` names, or (no `latest`) the newest one holding ZeRO files
    std::string tagNote;
    dir = zeroTagFolder(dir, path, early, tagNote);
    cp->files = std::make_shared<CheckpointFiles>(dir.string());

    // the files, per model-parallel rank
    std::vector<std::string> other;
    const std::map<int, MpFiles> mps = zeroFilesByMpRank(dir, other);
    CheckpointBuilder builder(*cp);
    for (auto& w : early)
        cp->warnings.push_back(std::move(w));
    ZeroReading reading(*cp, builder, dir, progress);
    reading.m_mpCount = static_cast<int>(mps.size());
    if (isUrl(dir.string())) {
        std::vector<std::string> order; // readMp's: the optimizer files by rank, then the model states
        for (const auto& [mp, files] : mps) {
            for (const auto& [dp, rel] : files.optim)
                order.push_back(rel);
            for (const auto& [dp, rel] : files.model3)
                order.push_back(rel);
            if (files.model3.empty() && !files.model.empty()) order.push_back(files.model);
        }
        reading.willLoad(std::move(order));
    }
    std::string detail;
    bool main = true;
    for (const auto& [mp, files] : mps) {
        KeyPath prefix;
        if (!main) prefix.push_back(KeyPathElem::fromKey(mpName(mp)));
        reading.readMp(mp, files, prefix, main);
        if (main) detail = reading.detail;
        main = false;
    }
    if (mps.size() > 1) {
        std::string names;
        for (const auto& [mp, files] : mps)
            if (mp != mps.begin()->first) names += (names.empty() ? "" : ", ") + mpName(mp);
        builder.warn(ReaderCode::ZeroModelParallel,
            std::to_string(mps.size()) + " model-parallel ranks (tensor/pipeline parallel): each holds its own slices "
                + "of the parameters; " + names + " are separate shards, each read under its own name as a key "
                + "prefix ('" + names.substr(0, names.find(',')) + ".model...'), not merged into one model");
        detail += ", " + std::to_string(mps.size()) + " model-parallel ranks";
    }
    for (const auto& name : other)
        builder.warn(ReaderCode::ZeroUnreadFile,
            name + " is not a ZeRO model/optim states file this reader knows (MoE expert files are not read)");
    cp->formatDetail = detail + (tagNote.empty() ? "" : ", " + tagNote);
    builder.finish();
    progress(1.0, "reading");
    return cp;
}

} // namespace optscope
