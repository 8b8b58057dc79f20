// SPDX-License-Identifier: GPL-3.0-or-later
// Megatron-Core dist_checkpointing folders (torch_dist backend): the samples Megatron-Core core_v0.16.1 wrote on 2
// ranks (tests/data/megatron: a plain sharded state dict and a DistributedOptimizer in the dp_reshardable and
// fully_reshardable sharding types) read into the one model, checked against the parameters gathered inside the
// training processes (reference/<fqn>.bin from reference.pt) and the moments real PyTorch reads from the model-space
// items (tests/fixtures/make_megatron_reference.py); and damaged copies of them.
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/analysis/checkpoint_fix.h"
#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/diff_report.h"
#include "optscope/analysis/gather.h"
#include "optscope/analysis/reshard.h"
#include "optscope/analysis/verify_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/tensor/tensor_assembler.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

const std::string kMegatron = std::string(OPTSCOPE_TEST_DATA) + "/megatron";
const std::vector<std::string> kParams = {"inp.weight", "inp.bias", "out.weight", "out.bias"};

std::string bytesOf(const Checkpoint& cp, const std::string& key)
{
    const Entry* e = cp.find(key);
    if (!e || !e->isTensor()) return "<no tensor " + key + ">";
    std::string out;
    TensorAssembler(cp, *e).stream(
        [&](const uint8_t* p, size_t n) { out.append(reinterpret_cast<const char*>(p), n); });
    return out;
}

std::string fileBytes(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) return "<missing " + path + ">";
    return std::string(std::istreambuf_iterator<char>(in), {});
}

const CheckpointWarning* warningOf(const Checkpoint& cp, const std::string& code)
{
    for (const auto& w : cp.warnings)
        if (readerCodeName(w.code) == code) return &w;
    return nullptr;
}

std::string allWarnings(const Checkpoint& cp)
{
    std::string s;
    for (const auto& w : cp.warnings)
        s += std::string(readerCodeName(w.code)) + ": " + w.message + "\n";
    return s;
}

class TempCopy
{
public:
    explicit TempCopy(const std::string& from)
    {
        std::random_device rd;
        path = fs::temp_directory_path() / ("optscope-megatron-" + std::to_string(rd()));
        fs::create_directories(path);
        fs::copy(from, path, fs::copy_options::recursive);
    }
    ~TempCopy()
    {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    fs::path path;
};

void expectMatchesReference(const Checkpoint& cp, const std::string& variant)
{
    const std::string ref = kMegatron + "/" + variant + "/reference/";
    for (const auto& p : kParams) {
        SCOPED_TRACE(p);
        EXPECT_EQ(bytesOf(cp, "model." + p), fileBytes(ref + p + ".bin"));
        // the fp32 main copy the optimizer stepped
        EXPECT_EQ(bytesOf(cp, "optimizer.state.param.model." + p), fileBytes(ref + p + ".bin"));
        EXPECT_EQ(bytesOf(cp, "optim.state." + p + ".exp_avg"), fileBytes(ref + p + ".exp_avg.bin"));
        EXPECT_EQ(bytesOf(cp, "optim.state." + p + ".exp_avg_sq"), fileBytes(ref + p + ".exp_avg_sq.bin"));
        const Entry* step = cp.find("optim.state." + p + ".step");
        ASSERT_TRUE(step && step->value);
        EXPECT_EQ(pyRepr(step->value), "2.0");
        const Entry* model = cp.find("model." + p);
        ASSERT_TRUE(model);
        ASSERT_EQ(model->path.size(), 2u);
        EXPECT_EQ(model->path[0].key, "model");
        EXPECT_EQ(model->path[1].key, p);
    }
    // Megatron's default param groups: weights decay, biases (and 1-D weights) do not
    const Entry* g0 = cp.find("optim.param_groups.0.params");
    const Entry* g1 = cp.find("optim.param_groups.1.params");
    ASSERT_TRUE(g0 && g1);
    EXPECT_EQ(pyRepr(g0->value), "['inp.weight', 'out.weight']");
    EXPECT_EQ(pyRepr(g1->value), "['inp.bias', 'out.bias']");
    ASSERT_TRUE(cp.find("optim.param_groups.1.wd_mult"));
    EXPECT_EQ(pyRepr(cp.find("optim.param_groups.1.wd_mult")->value), "0.0");
    ASSERT_TRUE(cp.find("optim.param_groups.0.lr"));
    ASSERT_TRUE(cp.find("iteration"));
    EXPECT_EQ(pyRepr(cp.find("iteration")->value), "2");
}

} // namespace

TEST(Megatron, ShardedStateDictMergesCommonAndNamesWeights)
{
    auto cp = openCheckpoint(kMegatron + "/sharded_torch_dist");
    EXPECT_EQ(cp->format, CheckpointFormat::MegatronDist);
    EXPECT_FALSE(cp->hasErrors()) << allWarnings(*cp);
    EXPECT_NE(cp->formatDetail.find("torch_dist"), std::string::npos) << cp->formatDetail;
    const Entry* w = cp->find("model.w");
    ASSERT_TRUE(w && w->isTensor());
    EXPECT_EQ(w->tensor->shape, (std::vector<int64_t> {6, 4}));
    EXPECT_EQ(w->tensor->chunks.size(), 2u);
    EXPECT_EQ(w->tensor->ranks(), (std::vector<int> {0, 1}));
    ASSERT_TRUE(cp->find("optim.state.w.exp_avg"));
    EXPECT_EQ(cp->find("optim.state.w.exp_avg")->tensor->shape, (std::vector<int64_t> {6, 4}));
    EXPECT_FALSE(cp->find("optimizer.state.exp_avg.model.w"));
    ASSERT_TRUE(cp->find("iteration"));
    EXPECT_EQ(pyRepr(cp->find("iteration")->value), "2");
    ASSERT_TRUE(cp->find("args.note"));
    EXPECT_EQ(pyRepr(cp->find("args.note")->value), "'optscope megatron sample'");
    // the weights read as the DCP chunks hold them (6x4 from two 3x4 chunks)
    EXPECT_EQ(bytesOf(*cp, "model.w").size(), 24u * 4);
}

TEST(Megatron, CachedSavePlansInTheMetadataAreNotUnsafe)
{
    // Megatron-Core caches DCP's SavePlan / WriteItem dataclasses in .metadata: torch's own reader unpickles them, so
    // a healthy checkpoint checks clean (they were four unsafe-global warnings, exit 1)
    const CheckReport r = checkCheckpoint(*openCheckpoint(kMegatron + "/sharded_torch_dist"));
    for (const auto& f : r.findings)
        EXPECT_NE(f.code, FindingCode::UnsafeGlobal) << f.message;
    EXPECT_TRUE(r.clean());
}

TEST(Megatron, FullyReshardableMatchesReference)
{
    auto cp = openCheckpoint(kMegatron + "/distopt_fully_reshardable/iter_0000002");
    EXPECT_EQ(cp->format, CheckpointFormat::MegatronDist);
    EXPECT_FALSE(cp->hasErrors()) << allWarnings(*cp);
    EXPECT_NE(cp->formatDetail.find("fully_reshardable"), std::string::npos) << cp->formatDetail;
    expectMatchesReference(*cp, "distopt_fully_reshardable");
}

TEST(Megatron, ParentWithLatestOpensTheIteration)
{
    auto cp = openCheckpoint(kMegatron + "/distopt_fully_reshardable");
    EXPECT_EQ(cp->format, CheckpointFormat::MegatronDist);
    expectMatchesReference(*cp, "distopt_fully_reshardable");
}

TEST(Megatron, DpReshardableBucketsMapBackToParameters)
{
    auto cp = openCheckpoint(kMegatron + "/distopt_dp_reshardable");
    EXPECT_EQ(cp->format, CheckpointFormat::MegatronDist);
    EXPECT_FALSE(cp->hasErrors()) << allWarnings(*cp);
    EXPECT_FALSE(warningOf(*cp, "megatron-bucket-layout")) << allWarnings(*cp);
    expectMatchesReference(*cp, "distopt_dp_reshardable");
    // the flat buckets became the per-parameter entries: no padding is data
    for (const auto& e : cp->entries)
        EXPECT_FALSE(e.isTensor() && e.key.find("bucket_idx_") != std::string::npos) << e.key;
    // reverse registration order, 64-element aligned
    std::map<std::string, int64_t> offsets;
    for (const auto& s : cp->flatSlots)
        offsets[s.fqn] = s.offset;
    EXPECT_EQ(offsets,
        (std::map<std::string, int64_t> {{"out.bias", 0}, {"out.weight", 64}, {"inp.bias", 128}, {"inp.weight", 192}}));
    // each moment points into the storage inside the DCP items, on the rank that wrote that range
    const Entry* e = cp->find("optim.state.inp.weight.exp_avg");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->tensor->ranks(), (std::vector<int> {1}));
    for (size_t i = 0; i < e->tensor->chunks.size(); ++i)
        EXPECT_EQ(e->tensor->chunks[i].source.kind, ChunkSource::Kind::StorageRecord);
    int64_t numel = 0;
    for (size_t i = 0; i < e->tensor->chunks.size(); ++i)
        numel += e->tensor->chunks.numelOf(i);
    EXPECT_EQ(numel, 35);
}

TEST(Megatron, MissingCommonIsAnErrorNamingIt)
{
    TempCopy t(kMegatron + "/distopt_fully_reshardable/iter_0000002");
    fs::remove(t.path / "common.pt");
    auto cp = openCheckpoint(t.path.string());
    ASSERT_TRUE(cp->hasErrors());
    const CheckpointWarning* w = warningOf(*cp, "megatron-missing-common");
    ASSERT_TRUE(w) << allWarnings(*cp);
    EXPECT_NE(w->message.find((t.path / "common.pt").string()), std::string::npos) << w->message;
    // Megatron-Core's words (strategies/common.py, core_v0.16.1), under its name
    EXPECT_EQ(w->loadError,
        "dist_checkpointing.load raises CheckpointingException: Common file " + (t.path / "common.pt").string()
            + " does not exist");
    bool found = false;
    for (const auto& f : checkCheckpoint(*cp).findings)
        if (f.code == FindingCode::MegatronMissingCommon) {
            found = true;
            EXPECT_EQ(std::string(findingLoader(f.code)), "Megatron-Core");
            EXPECT_EQ(f.pytorchError, w->loadError);
        }
    EXPECT_TRUE(found);
    // the sharded part still reads
    EXPECT_EQ(
        bytesOf(*cp, "model.inp.weight"), fileBytes(kMegatron + "/distopt_fully_reshardable/reference/inp.weight.bin"));
    // but nothing that writes or verifies all of it runs without the iteration, args and param_groups (gather,
    // reshard and verify wrote or passed without them, exit 0): each refuses, naming the file
    const std::string out = (t.path / "out").string();
    for (const auto& run : std::vector<std::function<void()>> {[&] { gatherCheckpoint(*cp, out + ".pt", {}); },
             [&] { reshardCheckpoint(*cp, out, ReshardOptions {}); }, [&] { verifyByLoad(*cp, VerifyOptions {}); }}) {
        try {
            run();
            ADD_FAILURE() << "ran on a checkpoint without its common.pt";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("common.pt' is missing"), std::string::npos) << e.what();
        }
    }
    EXPECT_FALSE(fs::exists(out + ".pt"));
    EXPECT_FALSE(fs::exists(out));
}

TEST(Megatron, DamagedCommonIsAnErrorNamingIt)
{
    TempCopy t(kMegatron + "/distopt_fully_reshardable/iter_0000002");
    fs::resize_file(t.path / "common.pt", 100);
    auto cp = openCheckpoint(t.path.string());
    ASSERT_TRUE(cp->hasErrors());
    const CheckpointWarning* w = warningOf(*cp, "unreadable-value");
    ASSERT_TRUE(w) << allWarnings(*cp);
    EXPECT_NE(w->message.find("common.pt"), std::string::npos) << w->message;
}

TEST(Megatron, OtherBackendIsRefusedNamingMetadataJson)
{
    TempCopy t(kMegatron + "/sharded_torch_dist");
    std::ofstream(t.path / "metadata.json", std::ios::trunc)
        << R"({"sharded_backend": "zarr", "sharded_backend_version": 1, "common_backend": "torch", "common_backend_version": 1})";
    try {
        openCheckpoint(t.path.string());
        FAIL() << "opened a zarr checkpoint";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("metadata.json"), std::string::npos) << e.what();
        // strategies/base.py, get_default_strategy (core_v0.16.1)
        EXPECT_NE(std::string(e.what()).find(
                      "CheckpointingException: Cannot find a default strategy for: ('load_sharded', 'zarr', 1)"),
            std::string::npos)
            << e.what();
    }
    std::ofstream(t.path / "metadata.json", std::ios::trunc) << R"({"sharded_backend": )";
    EXPECT_THROW(openCheckpoint(t.path.string()), Error);
}

TEST(Megatron, WithoutMetadataJsonItIsReadWithMegatronsError)
{
    // metadata.json lost (the DCP index and common.pt copied without it): dist_checkpointing.load refuses the folder;
    // optscope reads it as torch_dist all the same, and says what Megatron does and what to write
    for (const char* variant : {"distopt_fully_reshardable", "distopt_dp_reshardable"}) {
        SCOPED_TRACE(variant);
        TempCopy t(kMegatron + "/" + variant + "/iter_0000002");
        fs::remove(t.path / "metadata.json");
        auto cp = openCheckpoint(t.path.string());
        EXPECT_EQ(cp->format, CheckpointFormat::MegatronDist);
        auto intact = openCheckpoint(kMegatron + "/" + variant + "/iter_0000002");
        ASSERT_EQ(cp->entries.size(), intact->entries.size());
        for (size_t i = 0; i < cp->entries.size(); ++i)
            EXPECT_EQ(cp->entries[i].key, intact->entries[i].key);
        EXPECT_EQ(bytesOf(*cp, "optim.state.inp.weight.exp_avg"), bytesOf(*intact, "optim.state.inp.weight.exp_avg"));
        const CheckpointWarning* w = warningOf(*cp, "megatron-missing-metadata");
        ASSERT_TRUE(w) << allWarnings(*cp);
        EXPECT_TRUE(w->isError);
        // validation.py, verify_checkpoint_and_load_strategy (core_v0.16.1)
        EXPECT_NE(w->loadError.find("CheckpointingException: " + t.path.string() + " is not a distributed checkpoint"),
            std::string::npos)
            << w->loadError;
        EXPECT_NE(w->fix.find(R"("sharded_backend": "torch_dist")"), std::string::npos) << w->fix;
        // the fix works: the metadata.json it names makes the folder whole again
        std::ofstream(t.path / "metadata.json") << w->fix.substr(w->fix.find('{'));
        auto fixed = openCheckpoint(t.path.string());
        EXPECT_EQ(warningOf(*fixed, "megatron-missing-metadata"), nullptr) << allWarnings(*fixed);
        EXPECT_EQ(fixed->entries.size(), intact->entries.size());
    }
}

TEST(Megatron, InvalidTrackerFileQuotesMegatron)
{
    TempCopy t(kMegatron + "/distopt_dp_reshardable");
    std::ofstream(t.path / "latest_checkpointed_iteration.txt", std::ios::trunc) << "iter_2\n";
    try {
        openCheckpoint(t.path.string());
        FAIL() << "opened with an invalid tracker file";
    } catch (const Error& e) {
        // megatron/training/checkpointing.py, read_metadata (core_v0.16.1)
        EXPECT_NE(std::string(e.what()).find("ERROR: Invalid metadata file "
                      + (t.path / "latest_checkpointed_iteration.txt").string() + ". Exiting"),
            std::string::npos)
            << e.what();
    }
}

TEST(Megatron, LatestNamingAMissingIterationIsAnError)
{
    TempCopy t(kMegatron + "/distopt_dp_reshardable");
    std::ofstream(t.path / "latest_checkpointed_iteration.txt", std::ios::trunc) << "7\n";
    try {
        openCheckpoint(t.path.string());
        FAIL() << "opened a missing iteration";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("iter_0000007"), std::string::npos) << e.what();
    }
}

TEST(Megatron, MissingDistcpIsAnErrorNamingIt)
{
    // the fully_reshardable sample has one rank's files only (__0_*): rank 0 wrote all of its model-space state
    for (const auto& [variant, file] :
        std::vector<std::pair<std::string, std::string>> {{"distopt_dp_reshardable/iter_0000002", "__1_0.distcp"},
            {"distopt_fully_reshardable/iter_0000002", "__0_1.distcp"}, {"sharded_torch_dist", "__1_0.distcp"}}) {
        SCOPED_TRACE(variant);
        TempCopy t(kMegatron + "/" + variant);
        ASSERT_TRUE(fs::remove(t.path / file));
        auto cp = openCheckpoint(t.path.string());
        ASSERT_TRUE(cp->hasErrors());
        bool named = false;
        for (const auto& w : cp->warnings)
            named = named || (w.isError && w.message.find(file) != std::string::npos);
        EXPECT_TRUE(named) << allWarnings(*cp);
    }
    // what the other files hold still reads: out.bias lies in rank 0's part of the bucket
    TempCopy t(kMegatron + "/distopt_dp_reshardable/iter_0000002");
    fs::remove(t.path / "__1_0.distcp");
    auto cp = openCheckpoint(t.path.string());
    EXPECT_EQ(bytesOf(*cp, "optim.state.out.bias.exp_avg"),
        fileBytes(kMegatron + "/distopt_dp_reshardable/reference/out.bias.exp_avg.bin"));
}

TEST(Megatron, TruncatedDistcpNeverCrashes)
{
    TempCopy t(kMegatron + "/distopt_dp_reshardable/iter_0000002");
    for (const char* f : {"__0_0.distcp", "__1_1.distcp"})
        fs::resize_file(t.path / f, fs::file_size(t.path / f) / 2);
    try {
        auto cp = openCheckpoint(t.path.string());
        EXPECT_TRUE(cp->hasErrors()) << allWarnings(*cp);
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(".distcp"), std::string::npos) << e.what();
    }
}

// Forms the samples do not show (tests/fixtures/make_megatron_synthetic.py, real PyTorch DCP on 3 ranks in
// Megatron's layout): bf16 weights with fp32 buckets, two buckets, writer chunks that cut a parameter mid-row.
TEST(Megatron, Bf16TwoBucketsChunksCuttingParameters)
{
    auto cp = openCheckpoint(kMegatron + "/synthetic_bf16_r3");
    EXPECT_FALSE(cp->hasErrors()) << allWarnings(*cp);
    EXPECT_FALSE(warningOf(*cp, "megatron-bucket-layout")) << allWarnings(*cp);
    const std::string ref = kMegatron + "/synthetic_bf16_r3/reference/";
    for (const std::string p : {"a.weight", "a.bias", "b.weight", "b.bias"}) {
        SCOPED_TRACE(p);
        EXPECT_EQ(cp->find("model." + p)->tensor->dtype, DType::BFloat16);
        EXPECT_EQ(bytesOf(*cp, "model." + p), fileBytes(ref + p + ".bin"));
        EXPECT_EQ(bytesOf(*cp, "optimizer.state.param.model." + p), fileBytes(ref + p + ".param.bin"));
        EXPECT_EQ(bytesOf(*cp, "optim.state." + p + ".exp_avg"), fileBytes(ref + p + ".exp_avg.bin"));
        EXPECT_EQ(bytesOf(*cp, "optim.state." + p + ".exp_avg_sq"), fileBytes(ref + p + ".exp_avg_sq.bin"));
        EXPECT_EQ(pyRepr(cp->find("optim.state." + p + ".step")->value), "5.0");
    }
    // a.weight lies at [64, 99) of bucket 1, whose writers hold [0, 33), [33, 66), [66, 99)
    EXPECT_EQ(cp->find("optim.state.a.weight.exp_avg")->tensor->ranks(), (std::vector<int> {1, 2}));
    for (const auto& e : cp->entries)
        EXPECT_FALSE(e.isTensor() && e.key.find("bucket_idx_") != std::string::npos) << e.key;
    EXPECT_EQ(pyRepr(cp->find("optim.param_groups.1.params")->value), "['a.bias', 'b.bias']");
}

TEST(Megatron, UnexplainedBucketLayoutKeepsTheBuckets)
{
    // a model tensor the buckets do not hold (a buffer): the order rule does not explain the layout
    auto cp = openCheckpoint(kMegatron + "/synthetic_buffer_r3");
    const CheckpointWarning* w = warningOf(*cp, "megatron-bucket-layout");
    ASSERT_TRUE(w) << allWarnings(*cp);
    EXPECT_FALSE(w->isError);
    size_t buckets = 0;
    for (const auto& e : cp->entries)
        buckets += e.isTensor() && e.key.find("bucket_idx_") != std::string::npos;
    EXPECT_EQ(buckets, 6u);
    EXPECT_FALSE(cp->find("optim.state.a.weight.exp_avg"));
    EXPECT_EQ(bytesOf(*cp, "model.a.weight"), fileBytes(kMegatron + "/synthetic_buffer_r3/reference/a.weight.bin"));
}

TEST(Megatron, CheckReportsTheUnexplainedLayout)
{
    const auto report = checkCheckpoint(*openCheckpoint(kMegatron + "/synthetic_buffer_r3"));
    bool found = false;
    for (const auto& f : report.findings)
        found = found || f.code == FindingCode::MegatronBucketLayout;
    EXPECT_TRUE(found);
}

TEST(Megatron, GroupStepsAreNoStepDtypeFindingAndHealthySamplesCheckClean)
{
    // Megatron's optimizers count steps per param group: the per-parameter step the reader gives is that Python
    // number, not a broken PyTorch state, so the healthy samples check clean (check exits 0)
    for (const char* name : {"distopt_dp_reshardable", "distopt_fully_reshardable", "synthetic_bf16_r3"}) {
        SCOPED_TRACE(name);
        auto cp = openCheckpoint(kMegatron + "/" + name);
        const Entry* step = cp->find("optim.state.a.weight.step");
        if (!step) step = cp->find("optim.state.inp.weight.step");
        ASSERT_TRUE(step && !step->isTensor());
        const auto report = checkCheckpoint(*cp);
        for (const auto& f : report.findings)
            ADD_FAILURE() << findingInfo(f.code).name << ": " << f.message;
    }
}

TEST(Megatron, UnknownParamGroupsAreAFindingNotOrphanedState)
{
    // three groups (wd_mult x lr_mult): the files do not say which parameter is in which; the state is read all
    // the same (the weights and moments are synthetic_bf16_r3's) and is not reported as state no group lists
    auto cp = openCheckpoint(kMegatron + "/synthetic_groups_r3");
    const CheckpointWarning* w = warningOf(*cp, "megatron-param-groups");
    ASSERT_TRUE(w) << allWarnings(*cp);
    EXPECT_NE(w->message.find("3 param_groups"), std::string::npos) << w->message;
    EXPECT_FALSE(w->fix.empty());
    for (const char* key : {"a.weight", "a.bias", "b.weight", "b.bias"})
        for (const char* state : {"exp_avg", "exp_avg_sq"})
            EXPECT_EQ(bytesOf(*cp, std::string("optim.state.") + key + "." + state),
                fileBytes(kMegatron + "/synthetic_bf16_r3/reference/" + key + "." + state + ".bin"))
                << key << "." << state;
    const auto report = checkCheckpoint(*cp);
    std::set<FindingCode> codes;
    for (const auto& f : report.findings)
        codes.insert(f.code);
    EXPECT_EQ(codes, std::set<FindingCode> {FindingCode::MegatronParamGroups});
}

TEST(Megatron, SaveFolderWithoutTrackerFileReadsTheNewestIterationWithMegatronsText)
{
    // latest_checkpointed_iteration.txt lost (a copy of the iter_ folders only): Megatron-LM loads nothing and
    // starts from random; optscope reads the newest iteration and says so, with Megatron's words and the fix
    TempCopy t(kMegatron + "/distopt_dp_reshardable");
    fs::remove(t.path / "latest_checkpointed_iteration.txt");
    fs::create_directories(t.path / "iter_0000001"); // an older, empty one: not an iteration folder
    auto cp = openCheckpoint(t.path.string());
    auto withLatest = openCheckpoint(kMegatron + "/distopt_dp_reshardable");
    EXPECT_EQ(cp->entries.size(), withLatest->entries.size());
    const CheckpointWarning* w = warningOf(*cp, "megatron-missing-latest");
    ASSERT_TRUE(w) << allWarnings(*cp);
    EXPECT_TRUE(w->isError);
    EXPECT_NE(w->message.find("iter_0000002"), std::string::npos) << w->message;
    EXPECT_NE(w->loadError.find("will not load any checkpoints and will start from random"), std::string::npos)
        << w->loadError;
    EXPECT_NE(w->fix.find("echo 2 > latest_checkpointed_iteration.txt"), std::string::npos) << w->fix;
    bool found = false;
    for (const auto& f : checkCheckpoint(*cp).findings)
        if (f.code == FindingCode::MegatronMissingLatest) {
            found = true;
            EXPECT_EQ(std::string(findingLoader(f.code)), "Megatron-LM");
            EXPECT_EQ(f.pytorchError, w->loadError);
        }
    EXPECT_TRUE(found);
}

TEST(Megatron, ConversionWritesStepsAsPyTorchDoesAndCompareCallsThemEqual)
{
    // Megatron counts steps per param group, a Python number; PyTorch's Adam saves a 0-dim float32 tensor per
    // parameter: the conversion writes the tensor, and verify and diff call the two the same number
    const auto src = openCheckpoint(kMegatron + "/distopt_fully_reshardable");
    TempCopy out(kMegatron + "/distopt_fully_reshardable/reference");
    ReshardOptions o;
    o.worldSize = 2;
    reshardCheckpoint(*src, (out.path / "rs").string(), o);
    const auto rs = openCheckpoint((out.path / "rs").string());
    for (const char* p : {"inp.weight", "inp.bias", "out.weight", "out.bias"}) {
        const Entry* e = rs->find(std::string("optim.state.") + p + ".step");
        ASSERT_TRUE(e && e->isTensor()) << p;
        EXPECT_EQ(e->tensor->dtype, DType::Float32);
        EXPECT_TRUE(e->tensor->shape.empty());
        EXPECT_EQ(bytesOf(*rs, e->key), std::string("\x00\x00\x00\x40", 4)); // 2.0f, little-endian
    }
    for (const auto& f : checkCheckpoint(*rs).findings)
        EXPECT_NE(f.code, FindingCode::StepDtype) << f.message;
    const VerifyReport v = verifyAgainst(*src, *rs);
    EXPECT_TRUE(v.identical());
    const DiffReport d = diffCheckpoints(*src, *rs);
    EXPECT_TRUE(d.equal);
    bool said = false;
    for (const auto& e : d.entries)
        said = said
            || (e.key() == "optim.state.inp.weight.step" && e.reason.find("the same number") != std::string::npos);
    EXPECT_TRUE(said);

    // a step that float32 cannot hold exactly stays the number it is (check then warns step-dtype): never a silent
    // change
    auto big = std::make_shared<Checkpoint>(*src);
    PyValue* huge = big->arena->makeInt((int64_t(1) << 24) + 1);
    for (auto& e : big->entries)
        if (e.key == "optim.state.inp.weight.step") e.value = huge;
    const DcpPlan plan = planReshard(*big, o);
    bool asValue = false;
    for (const auto& pv : plan.values)
        asValue = asValue || joinKeyPath(pv.path) == "optim.state.inp.weight.step";
    for (const auto& pt : plan.tensors)
        EXPECT_NE(joinKeyPath(pt.path), "optim.state.inp.weight.step");
    EXPECT_TRUE(asValue);
}

// ---- tensor and pipeline parallel layouts (tests/data/megatron/synthetic_{tp2,pp2,gpt}_*: written by
// tests/fixtures/make_megatron_synthetic.py with real PyTorch DCP in the layout core_v0.16.1's save code makes, not by
// Megatron; reference/index.json lists every parameter with its checkpoint key)

namespace {

struct ParallelVariant
{
    const char* name;
    bool optimizerMapped; ///< per-parameter optimizer state expected (else: flat buckets with a warning)
};

void PrintTo(const ParallelVariant& v, std::ostream* os)
{
    *os << v.name;
}

class MegatronParallel : public ::testing::TestWithParam<ParallelVariant>
{ };

/// the parameters of a variant's reference/index.json, in its order, with their checkpoint keys
std::vector<std::pair<std::string, std::string>> referenceParams(const std::string& dir)
{
    std::ifstream in(dir + "/reference/index.json");
    const auto index = nlohmann::ordered_json::parse(in);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [fqn, info] : index.items())
        out.emplace_back(fqn, info["key"].get<std::string>());
    return out;
}

} // namespace

TEST_P(MegatronParallel, WeightsAndOptimizerStateEqualTheReference)
{
    const std::string dir = kMegatron + "/" + GetParam().name;
    const auto cp = openCheckpoint(dir);
    EXPECT_FALSE(cp->hasErrors()) << allWarnings(*cp);
    const auto params = referenceParams(dir);
    ASSERT_FALSE(params.empty());
    for (const auto& [p, key] : params) {
        SCOPED_TRACE(p);
        // the weights, with or without the "model." prefix in the files, are model.<fqn>, bit for bit
        EXPECT_EQ(bytesOf(*cp, "model." + p), fileBytes(dir + "/reference/" + p + ".bin"));
        if (!GetParam().optimizerMapped) continue;
        // the fp32 main copy: from the buckets of every tensor-parallel rank (dp_reshardable), or model space
        EXPECT_EQ(bytesOf(*cp, "optimizer.state.param." + key), fileBytes(dir + "/reference/" + p + ".param.bin"));
        EXPECT_EQ(bytesOf(*cp, "optim.state." + p + ".exp_avg"), fileBytes(dir + "/reference/" + p + ".exp_avg.bin"));
        EXPECT_EQ(
            bytesOf(*cp, "optim.state." + p + ".exp_avg_sq"), fileBytes(dir + "/reference/" + p + ".exp_avg_sq.bin"));
        EXPECT_TRUE(cp->find("optim.state." + p + ".step"));
    }
    if (GetParam().optimizerMapped) {
        EXPECT_FALSE(warningOf(*cp, "megatron-bucket-layout")) << allWarnings(*cp);
        // every state tensor tiled exactly once (a replicated bias is in every tensor-parallel rank's buckets)
        for (const auto& f : checkCheckpoint(*cp).findings)
            EXPECT_TRUE(f.severity == Severity::Info || f.code == FindingCode::UnsafeGlobal)
                << f.name() << ": " << f.message;
        // Megatron's default groups: every parameter in one of them
        size_t listed = 0;
        for (const char* g : {"optim.param_groups.0.params", "optim.param_groups.1.params"})
            if (const Entry* e = cp->find(g)) listed += e->value->size();
        EXPECT_EQ(listed, params.size());
    } else {
        // buckets the weights do not explain: shown flat, said so, never mapped wrongly
        const CheckpointWarning* w = warningOf(*cp, "megatron-bucket-layout");
        ASSERT_TRUE(w) << allWarnings(*cp);
        for (const auto& e : cp->entries)
            EXPECT_NE(e.key.rfind("optim.state.", 0), 0u) << e.key;
    }
}

INSTANTIATE_TEST_SUITE_P(Megatron, MegatronParallel,
    ::testing::Values(ParallelVariant {"synthetic_pp2_dp2", true}, ParallelVariant {"synthetic_tp2_dp2", true},
        ParallelVariant {"synthetic_tp2_dp2_fully", true}, ParallelVariant {"synthetic_gpt_pp2_dp2", true},
        ParallelVariant {"synthetic_gpt_tp2_pp2_dp2_fully", true}),
    [](const ::testing::TestParamInfo<ParallelVariant>& info) { return std::string(info.param.name); });

TEST(Megatron, StackedLayerNormsAreInTheNoWeightDecayGroup)
{
    // decoder.layers.<name> with a leading layer axis: the per-layer parameter is 1-D, so Megatron's default
    // no_weight_decay_cond puts it with the biases
    const auto cp = openCheckpoint(kMegatron + "/synthetic_gpt_tp2_pp2_dp2_fully");
    EXPECT_EQ(pyRepr(cp->find("optim.param_groups.1.params")->value),
        "['decoder.layers.mlp.linear_fc1.layer_norm_weight', 'decoder.final_layernorm.weight']");
    EXPECT_EQ(cp->find("model.decoder.layers.mlp.linear_fc1.weight")->tensor->shape, (std::vector<int64_t> {4, 12, 6}));
}

TEST(Megatron, ArgsNamespaceIsLeftOutOfGatherAndWrittenByReshard)
{
    // Megatron-LM saves its args as an argparse.Namespace, which a weights-only load refuses: gather writes everything
    // else and names what it left out; reshard writes it back as it was pickled (DCP's loader unpickles values with
    // weights_only=False). Both refused the whole checkpoint before.
    const auto cp = openCheckpoint(kMegatron + "/synthetic_gpt_tp2_pp2_dp2_fully");
    ASSERT_TRUE(cp->find("args"));
    const fs::path tmp
        = fs::temp_directory_path() / ("optscope-megatron-args-" + std::to_string(std::random_device {}()));
    fs::create_directories(tmp);
    const GatherResult g = gatherCheckpoint(*cp, (tmp / "g.pt").string(), {});
    EXPECT_EQ(g.leftOut,
        (std::vector<std::string> {"args: an object of class 'argparse.Namespace' (a weights-only load refuses classes "
                                   "outside its safe set)"}));
    const auto back = openCheckpoint((tmp / "g.pt").string());
    EXPECT_FALSE(back->find("args"));
    EXPECT_TRUE(back->find("iteration"));
    ReshardOptions ro;
    ro.worldSize = 2;
    const DcpWriteStats r = reshardCheckpoint(*cp, (tmp / "rs").string(), ro);
    EXPECT_TRUE(r.leftOut.empty());
    const auto rs = openCheckpoint((tmp / "rs").string());
    ASSERT_TRUE(rs->find("args"));
    EXPECT_EQ(rs->find("args")->value->className(), "argparse.Namespace");
    VerifyOptions vo;
    vo.worldSize = 3;
    const VerifyReport v = verifyByLoad(*cp, vo);
    EXPECT_TRUE(v.identical());
    EXPECT_EQ(v.count(VerifyStatus::Identical), v.entries.size());
    fs::remove_all(tmp);
}

// fix of a Megatron folder writes one torch.save file of per-parameter state: Megatron's per-group steps (Python
// numbers, which diagnose accepts in its own format) become 0-dim float32 tensors there, as reshard writes them.
// Before, the fixed copy's own diagnosis found a step-dtype the fix had made (found by a hunt)
TEST(Megatron, FixWritesPerParameterStepsAsFloat32Tensors)
{
    const auto cp = openCheckpoint(kMegatron + "/distopt_dp_reshardable");
    TempCopy out(kMegatron + "/distopt_dp_reshardable/latest_checkpointed_iteration.txt");
    const std::string fixed = (out.path / "fixed.pt").string();
    applyFixes(*cp, diagnoseCheckpoint(*cp, nullptr), fixed, {}, {}, {UserRename::parse("inp=inp_renamed")});
    const auto back = openCheckpoint(fixed);
    size_t steps = 0;
    for (const auto& e : back->entries)
        if (e.key.rfind("optim.state.", 0) == 0 && e.key.size() > 5 && e.key.substr(e.key.size() - 5) == ".step") {
            ++steps;
            ASSERT_TRUE(e.isTensor()) << e.key;
            EXPECT_EQ(e.tensor->dtype, DType::Float32) << e.key;
            EXPECT_TRUE(e.tensor->shape.empty()) << e.key;
        }
    EXPECT_EQ(steps, 4u);
    EXPECT_TRUE(back->find("optim.state.inp_renamed.weight.step"));
    for (const auto& f : diagnoseCheckpoint(*back, nullptr).findings)
        EXPECT_NE(f.code, FindingCode::StepDtype) << f.message;
}
