// SPDX-License-Identifier: GPL-3.0-or-later
// DeepSpeed ZeRO checkpoints: the samples DeepSpeed v0.19.5 wrote (tests/data/zero, stages 1-3 on 2 ranks) read into
// the one model, checked against DeepSpeed's own conversions of the same files (zero_to_fp32's pytorch_model.bin for
// the weights, ds_to_universal's per-parameter files for exp_avg/exp_avg_sq/step) and the parameters gathered inside
// the training processes (reference.pt); and damaged copies of them (a rank file gone, `latest` missing or wrong, the
// rank files of two runs mixed, a file cut short), which must give DeepSpeed's own error text.
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/diff_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/model/flat_param_layout.h"
#include "optscope/model/shard_layout.h"
#include "optscope/optim/param_table.h"
#include "optscope/tensor/tensor_assembler.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <set>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

const std::string kZero = std::string(OPTSCOPE_TEST_DATA) + "/zero";
const std::vector<std::string> kParams
    = {"inp.weight", "hid.weight", "out.weight", "emb_scale", "inp.bias", "hid.bias", "out.bias"};

std::string bytesOf(const Checkpoint& cp, const std::string& key)
{
    const Entry* e = cp.find(key);
    if (!e || !e->isTensor()) return "<no tensor " + key + ">";
    std::string out;
    TensorAssembler(cp, *e).stream(
        [&](const uint8_t* p, size_t n) { out.append(reinterpret_cast<const char*>(p), n); });
    return out;
}

const CheckpointWarning* warningOf(const Checkpoint& cp, const std::string& code)
{
    for (const auto& w : cp.warnings)
        if (readerCodeName(w.code) == code) return &w;
    return nullptr;
}

/// the finding check/diagnose report for @p code, with the loader's own error text
const Finding* findingOf(const std::vector<Finding>& findings, FindingCode code)
{
    for (const auto& f : findings)
        if (f.code == code) return &f;
    return nullptr;
}

class TempCopy
{
public:
    explicit TempCopy(const std::string& from)
    {
        std::random_device rd;
        path = fs::temp_directory_path() / ("optscope-zero-" + std::to_string(rd()));
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

class ZeroStage : public ::testing::TestWithParam<int>
{
protected:
    std::string stageDir() const { return kZero + "/stage" + std::to_string(GetParam()); }
};

} // namespace

TEST(FlatRangeBoxes, EveryRangeOfSmallShapesIsTiledInFlatOrder)
{
    for (const std::vector<int64_t>& shape : {std::vector<int64_t> {7}, {7, 7}, {3, 4, 5}, {2, 3, 2, 3}}) {
        const int64_t n = [&] {
            int64_t x = 1;
            for (auto d : shape)
                x *= d;
            return x;
        }();
        const auto strides = contiguousStrides(shape);
        for (int64_t a = 0; a <= n; ++a)
            for (int64_t b = a; b <= n; ++b) {
                const auto boxes = flatRangeBoxes(shape, a, b);
                ASSERT_LE(boxes.size(), 2 * shape.size() - 1) << a << " " << b;
                int64_t next = a;
                for (const auto& box : boxes) {
                    // the box is contiguous in flat order, starts where the previous ended
                    int64_t start = 0, numel = 1;
                    for (size_t d = 0; d < shape.size(); ++d) {
                        start += box.offsets[d] * strides[d];
                        numel *= box.sizes[d];
                        ASSERT_LE(box.offsets[d] + box.sizes[d], shape[d]);
                    }
                    EXPECT_EQ(start, box.flatStart);
                    EXPECT_EQ(start, next) << a << " " << b;
                    EXPECT_GT(numel, 0);
                    next += numel;
                }
                EXPECT_EQ(next, b) << a << " " << b;
            }
    }
    // a 0-dim tensor is one box without dimensions
    ASSERT_EQ(flatRangeBoxes({}, 0, 1).size(), 1u);
    EXPECT_TRUE(flatRangeBoxes({}, 0, 1)[0].offsets.empty());
}

TEST_P(ZeroStage, OpensFromTheSaveFolderTheTagFolderAndAFile)
{
    const auto a = openCheckpoint(stageDir() + "/ckpt");
    const auto b = openCheckpoint(stageDir() + "/ckpt/global_step2");
    const auto c = openCheckpoint(stageDir() + "/ckpt/global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt");
    for (const auto& cp : {a, b, c}) {
        EXPECT_EQ(cp->format, CheckpointFormat::DeepSpeedZero);
        EXPECT_EQ(cp->entries.size(), a->entries.size());
        EXPECT_FALSE(cp->hasErrors());
        EXPECT_NE(cp->formatDetail.find("ZeRO stage " + std::to_string(GetParam())), std::string::npos)
            << cp->formatDetail;
    }
    EXPECT_STREQ(checkpointFormatName(a->format), "deepspeed_zero");
    // 7 weights, 3 states each, 2 param groups of 11 fields
    EXPECT_EQ(a->entries.size(), 7u + 21u + 22u);
    // the DeepSpeed classes stay inert; each is reported once
    std::vector<std::string> unsafe;
    for (const auto& w : a->warnings)
        if (w.code == ReaderCode::UnsafeGlobal) unsafe.push_back(w.message);
    EXPECT_EQ(std::set<std::string>(unsafe.begin(), unsafe.end()).size(), unsafe.size());
    EXPECT_GE(unsafe.size(), 2u);
}

TEST_P(ZeroStage, WeightsEqualZeroToFp32AndTheTrainingProcessesBitForBit)
{
    const auto cp = openCheckpoint(stageDir() + "/ckpt");
    const auto z2f = openCheckpoint(stageDir() + "/fp32/pytorch_model.bin");
    const auto ref = openCheckpoint(stageDir() + "/reference.pt");
    for (const auto& p : kParams) {
        const std::string got = bytesOf(*cp, "model." + p);
        EXPECT_EQ(got, bytesOf(*z2f, p)) << p;
        EXPECT_EQ(got, bytesOf(*ref, "params." + p)) << p;
        EXPECT_EQ(cp->find("model." + p)->tensor->shape, z2f->find(p)->tensor->shape) << p;
    }
}

TEST_P(ZeroStage, OptimizerStateEqualsDeepSpeedsUniversalConversion)
{
    const auto cp = openCheckpoint(stageDir() + "/ckpt");
    for (const auto& p : kParams)
        for (const std::string name : {"exp_avg", "exp_avg_sq"}) {
            // stages 1/2: {"param": tensor in the parameter's shape, "cat_dim"}; stage 3: the bare flat tensor
            const auto u = openCheckpoint(stageDir() + "/universal/zero/" + p + "/" + name + ".pt");
            const std::string key = GetParam() == 3 ? "" : "param";
            ASSERT_TRUE(u->find(key)) << p;
            EXPECT_EQ(bytesOf(*cp, "optim.state." + p + "." + name), bytesOf(*u, key)) << p << " " << name;
        }
    if (GetParam() != 3)
        for (const auto& p : kParams) {
            const auto step = openCheckpoint(stageDir() + "/universal/zero/" + p + "/step.pt");
            EXPECT_EQ(bytesOf(*cp, "optim.state." + p + ".step"), bytesOf(*step, "")) << p;
        }
}

TEST_P(ZeroStage, ChunksPointIntoThePartitionsOfBothRanksWithoutPadding)
{
    const auto cp = openCheckpoint(stageDir() + "/ckpt");
    std::set<int> ranks;
    for (const auto& e : cp->entries) {
        if (!e.isTensor()) continue;
        const ShardLayout L = ShardLayout::of(*e.tensor);
        EXPECT_TRUE(L.complete()) << e.key;
        int64_t covered = 0;
        std::map<int, size_t> perRank;
        for (const auto& c : e.tensor->chunks) {
            covered += c.numel();
            ranks.insert(c.rank);
            ++perRank[c.rank];
            EXPECT_EQ(c.source.kind, ChunkSource::Kind::StorageRecord);
            EXPECT_NE(c.source.file.find("optim_states.pt"), std::string::npos) << e.key;
        }
        // one flat range per rank: at most 2*ndim-1 rectangular pieces
        for (const auto& [rank, n] : perRank)
            EXPECT_LE(n, std::max<size_t>(1, 2 * e.tensor->shape.size() - 1)) << e.key;
        EXPECT_EQ(covered, e.tensor->numel()) << e.key; // no element twice, none from padding
    }
    EXPECT_EQ(ranks, (std::set<int> {0, 1}));
    // hid.weight (49 elements) spans both ranks at every stage
    std::set<int> hid;
    for (const auto& c : cp->find("model.hid.weight")->tensor->chunks)
        hid.insert(c.rank);
    EXPECT_EQ(hid, (std::set<int> {0, 1}));
    // the check finds nothing but the inert DeepSpeed classes (info: DeepSpeed's own, its loader imports them)
    for (const auto& f : checkCheckpoint(*cp).findings)
        EXPECT_EQ(f.code, FindingCode::LibraryGlobal) << f.message;
}

TEST_P(ZeroStage, FqnMappingShowsWhereEachParameterLiesInThePartitions)
{
    const auto cp = openCheckpoint(stageDir() + "/ckpt");
    const ParamTable t = ParamTable::build(*cp);
    ASSERT_EQ(t.optimizers.size(), 1u);
    EXPECT_EQ(t.fqnsInOrder(0),
        (std::vector<std::string> {
            "inp.weight", "hid.weight", "out.weight", "emb_scale", "inp.bias", "hid.bias", "out.bias"}));
    for (const auto& r : t.rows) {
        EXPECT_GE(r.flatParam, 0) << r.fqn;
        EXPECT_EQ(r.flatParam, r.group) << r.fqn; // one flat buffer per group in these samples
        EXPECT_NE(r.flatUnit.find("ZeRO-" + std::to_string(GetParam())), std::string::npos);
        if (r.fqn == "hid.weight") {
            EXPECT_NE(r.note.find("rank 0"), std::string::npos) << r.note;
            EXPECT_NE(r.note.find("rank 1"), std::string::npos) << r.note;
        }
    }
    // ZeRO-1/2: offsets in the group's flat buffer (35 + 49 = 84 for out.weight); ZeRO-3: in each rank's part
    const auto out
        = std::find_if(t.rows.begin(), t.rows.end(), [](const ParamRow& r) { return r.fqn == "out.weight"; });
    EXPECT_EQ(out->flatOffset, GetParam() == 3 ? 18 + 25 : 35 + 49);
}

INSTANTIATE_TEST_SUITE_P(DeepSpeed, ZeroStage, ::testing::Values(1, 2, 3));

TEST(ZeroCheck, DeepSpeedsOwnClassesAreInfoAndAHealthyCheckpointIsClean)
{
    // LossScaler, ZeroStageEnum and fragment_address are DeepSpeed's: its loader imports them (weights_only=False).
    // Info, naming them; the same classes in a plain torch.save file stay unsafe-global warnings.
    for (const char* stage : {"stage1", "stage2", "stage3"}) {
        const CheckReport r = checkCheckpoint(*openCheckpoint(kZero + "/" + stage + "/ckpt"));
        size_t library = 0;
        for (const auto& f : r.findings) {
            EXPECT_NE(f.code, FindingCode::UnsafeGlobal) << stage << ": " << f.message;
            if (f.code == FindingCode::LibraryGlobal) {
                ++library;
                EXPECT_EQ(f.severity, Severity::Info);
                EXPECT_NE(f.message.find("'deepspeed."), std::string::npos) << f.message;
            }
        }
        EXPECT_GE(library, 1u) << stage;
        EXPECT_TRUE(r.clean()) << stage;
    }
    const CheckReport plain = checkCheckpoint(*openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/dangerous.pt"));
    EXPECT_FALSE(plain.clean());
}

TEST(ZeroRaw, OneRankFileOpensAsTheTorchSaveFileItIs)
{
    // inspect --raw: a rank file as torch.save wrote it (flat partitions, DeepSpeed objects), not the whole checkpoint
    const std::string file = kZero + "/stage2/ckpt/global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt";
    const auto whole = openCheckpoint(file);
    EXPECT_EQ(whole->format, CheckpointFormat::DeepSpeedZero);
    const auto raw = openCheckpointFile(file);
    EXPECT_EQ(raw->format, CheckpointFormat::TorchSave);
    EXPECT_TRUE(raw->find("optimizer_state_dict.base_optimizer_state.state.0.exp_avg"));
    EXPECT_TRUE(raw->find("optimizer_state_dict.loss_scaler"));
    EXPECT_FALSE(raw->find("optim.state.inp.weight.exp_avg"));
    // a plain torch.save file opens the same either way; a folder is refused
    EXPECT_EQ(openCheckpointFile(std::string(OPTSCOPE_TEST_DATA) + "/adam_int.pt")->entries.size(),
        openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/adam_int.pt")->entries.size());
    EXPECT_THROW(openCheckpointFile(kZero + "/stage2/ckpt"), Error);
}

// ---- damaged copies of the real samples ----------------------------------------------------------------------------

TEST(ZeroDamaged, MissingRankFileIsAnErrorWithDeepSpeedsTextAndLeavesGaps)
{
    TempCopy t(kZero + "/stage2/ckpt");
    fs::remove(t.path / "global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt");
    const auto cp = openCheckpoint(t.path.string());
    const CheckpointWarning* w = warningOf(*cp, "zero-missing-rank-file");
    ASSERT_TRUE(w);
    EXPECT_TRUE(w->isError);
    EXPECT_NE(w->message.find("zero_pp_rank_1_mp_rank_00_optim_states.pt"), std::string::npos) << w->message;
    EXPECT_NE(w->loadError.find("Expected 2 of '*_optim_states.pt' under '"), std::string::npos) << w->loadError;
    EXPECT_NE(w->loadError.find("but found 1 files"), std::string::npos) << w->loadError;
    // what rank 1 held is gone: a gap, not padding or zeros
    bool gap = false;
    for (const auto& f : checkCheckpoint(*cp).findings) {
        gap = gap || (f.code == FindingCode::ChunkGap && f.key == "model.hid.weight");
        if (f.code == FindingCode::ChunkGap) {
            EXPECT_NE(f.key, "model.inp.weight"); // all on rank 0
        }
    }
    EXPECT_TRUE(gap);
    const auto report = checkCheckpoint(*cp);
    const Finding* f = findingOf(report.findings, FindingCode::ZeroMissingRankFile);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->severity, Severity::Error);
    EXPECT_EQ(f->pytorchError, w->loadError);
    EXPECT_STREQ(findingLoader(f->code), "DeepSpeed"); // DeepSpeed's words, not PyTorch's (CLI and GUI say so)
    EXPECT_STREQ(findingLoader(FindingCode::ChunkGap), "PyTorch");
    EXPECT_FALSE(f->fix.empty());
    EXPECT_EQ(bytesOf(*cp, "model.inp.weight"),
        bytesOf(*openCheckpoint(kZero + "/stage2/fp32/pytorch_model.bin"), "inp.weight"));
    // a parameter whose partition lay wholly on rank 1, and its moments, are there without data: a gap of all of
    // it, not a tensor "saved without data (meta device)" (said before; its moments were left out altogether)
    for (const char* key : {"model.out.bias", "optim.state.out.bias.exp_avg", "optim.state.out.bias.exp_avg_sq"}) {
        const Entry* e = cp->find(key);
        ASSERT_TRUE(e) << key;
        EXPECT_TRUE(e->tensor->storesNoData()) << key;
        EXPECT_FALSE(e->tensor->withoutData()) << key;
        const Finding* g = nullptr;
        for (const auto& x : report.findings)
            if (x.key == key && x.code == FindingCode::ChunkGap) g = &x;
        ASSERT_TRUE(g) << key;
        EXPECT_NE(g->message.find("no chunk covers [0:3] of the tensor [3]"), std::string::npos) << g->message;
    }
    EXPECT_EQ(findingOf(report.findings, FindingCode::TensorWithoutData), nullptr);
}

TEST(ZeroDamaged, MissingLatestReadsTheNewestTagAndSaysDeepSpeedLoadsNothing)
{
    TempCopy t(kZero + "/stage1/ckpt");
    fs::remove(t.path / "latest");
    const auto cp = openCheckpoint(t.path.string());
    const CheckpointWarning* w = warningOf(*cp, "zero-missing-latest");
    ASSERT_TRUE(w);
    EXPECT_NE(w->loadError.find("Unable to find latest file at " + (t.path / "latest").string()
                  + ", if trying to load latest checkpoint please ensure this file exists or pass an explicit "
                    "checkpoint tag when loading a checkpoint."),
        std::string::npos)
        << w->loadError;
    EXPECT_NE(cp->formatDetail.find("global_step2"), std::string::npos);
    EXPECT_EQ(cp->entries.size(), 50u);
    const auto report = checkCheckpoint(*cp);
    const Finding* f = findingOf(report.findings, FindingCode::ZeroMissingLatest);
    ASSERT_TRUE(f);
    EXPECT_NE(f->fix.find("global_step2"), std::string::npos) << f->fix;
}

TEST(ZeroDamaged, LatestNamingAnAbsentTagFailsNamingIt)
{
    TempCopy t(kZero + "/stage1/ckpt");
    std::ofstream(t.path / "latest") << "global_step9";
    try {
        openCheckpoint(t.path.string());
        FAIL() << "opened";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("names tag 'global_step9'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find((t.path / "latest").string()), std::string::npos) << e.what();
    }
}

TEST(ZeroDamaged, RankFilesOfTwoRunsGiveStageMismatch)
{
    TempCopy t(kZero + "/stage2/ckpt");
    // rank 1's file from the stage-1 run of the same model replaces the stage-2 one
    fs::copy_file(kZero + "/stage1/ckpt/global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt",
        t.path / "global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt", fs::copy_options::overwrite_existing);
    const auto cp = openCheckpoint(t.path.string());
    const CheckpointWarning* w = warningOf(*cp, "zero-stage-mismatch");
    ASSERT_TRUE(w);
    EXPECT_TRUE(w->isError);
    EXPECT_NE(w->message.find("stage 1"), std::string::npos) << w->message;
    EXPECT_TRUE(findingOf(checkCheckpoint(*cp).findings, FindingCode::ZeroStageMismatch));
}

TEST(ZeroDamaged, ARankFileLeftFromALargerRunIsAWorldSizeMismatch)
{
    TempCopy t(kZero + "/stage3/ckpt");
    fs::copy_file(t.path / "global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt",
        t.path / "global_step2/zero_pp_rank_2_mp_rank_00_optim_states.pt");
    const auto cp = openCheckpoint(t.path.string());
    const CheckpointWarning* w = warningOf(*cp, "zero-world-size-mismatch");
    ASSERT_TRUE(w);
    EXPECT_NE(w->loadError.find("Expected 2 of '*_optim_states.pt'"), std::string::npos) << w->loadError;
    EXPECT_NE(w->loadError.find("found 3 files"), std::string::npos) << w->loadError;
    EXPECT_TRUE(findingOf(checkCheckpoint(*cp).findings, FindingCode::ZeroWorldSizeMismatch));
}

TEST(ZeroDamaged, AFileCutShortIsAnErrorNamingIt)
{
    TempCopy t(kZero + "/stage1/ckpt");
    const fs::path f = t.path / "global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt";
    fs::resize_file(f, fs::file_size(f) / 2);
    try {
        openCheckpoint(t.path.string());
        FAIL() << "opened";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("zero_pp_rank_0_mp_rank_00_optim_states.pt"), std::string::npos)
            << e.what();
    }
}

TEST(ZeroDamaged, ModelParallelRanksAreReadAsSeparateShards)
{
    // the file layout of a 2-way tensor-parallel run, made by copying the mp_rank_00 files (their contents still
    // say mp_world_size 1, which is reported as DeepSpeed would assert on it)
    TempCopy t(kZero + "/stage2/ckpt");
    const fs::path d = t.path / "global_step2";
    fs::copy_file(d / "mp_rank_00_model_states.pt", d / "mp_rank_01_model_states.pt");
    for (int r = 0; r < 2; ++r)
        fs::copy_file(d / ("zero_pp_rank_" + std::to_string(r) + "_mp_rank_00_optim_states.pt"),
            d / ("zero_pp_rank_" + std::to_string(r) + "_mp_rank_01_optim_states.pt"));
    const auto cp = openCheckpoint(t.path.string());
    EXPECT_EQ(cp->entries.size(), 100u);
    ASSERT_TRUE(cp->find("mp_rank_01.model.hid.weight"));
    EXPECT_EQ(bytesOf(*cp, "mp_rank_01.model.hid.weight"), bytesOf(*cp, "model.hid.weight"));
    EXPECT_TRUE(warningOf(*cp, "zero-model-parallel"));
    const CheckpointWarning* w = warningOf(*cp, "zero-world-size-mismatch");
    ASSERT_TRUE(w);
    EXPECT_NE(w->loadError.find("checkpoint count 2 is different from saved mp_world_size 1"), std::string::npos)
        << w->loadError;
}

// ---- universal checkpoints (DeepSpeed's own ds_to_universal output of the same samples) ----------------------------

TEST_P(ZeroStage, UniversalCheckpointIsTheSameModel)
{
    const auto u = openCheckpoint(stageDir()); // via latest_universal
    EXPECT_EQ(u->format, CheckpointFormat::DeepSpeedUniversal);
    EXPECT_STREQ(checkpointFormatName(u->format), "deepspeed_universal");
    EXPECT_FALSE(u->hasErrors());
    const auto z = openCheckpoint(stageDir() + "/ckpt");
    ASSERT_EQ(u->entries.size(), z->entries.size());
    for (const auto& e : z->entries) {
        const Entry* o = u->find(e.key);
        ASSERT_TRUE(o) << e.key;
        ASSERT_EQ(o->isTensor(), e.isTensor()) << e.key;
        if (e.isTensor()) {
            EXPECT_EQ(o->tensor->shape, e.tensor->shape) << e.key;
            EXPECT_EQ(bytesOf(*u, e.key), bytesOf(*z, e.key)) << e.key;
        } else {
            EXPECT_EQ(pyRepr(o->value), pyRepr(e.value)) << e.key;
        }
    }
    // opened directly and through a file in the folder too
    EXPECT_EQ(openCheckpoint(stageDir() + "/universal")->entries.size(), z->entries.size());
    const std::string states
        = GetParam() == 3 ? "zero_pp_rank_0_mp_rank_00_model_states.pt" : "mp_rank_00_model_states.pt";
    EXPECT_EQ(openCheckpoint(stageDir() + "/universal/" + states)->format, CheckpointFormat::DeepSpeedUniversal);
    // any other file in these folders opens on its own
    EXPECT_EQ(openCheckpoint(stageDir() + "/reference.pt")->format, CheckpointFormat::TorchSave);
    EXPECT_EQ(openCheckpoint(stageDir() + "/universal/zero/hid.weight/fp32.pt")->format, CheckpointFormat::TorchSave);
}

TEST(ZeroDamaged, UniversalWithoutAParameterFolderReportsItMissing)
{
    TempCopy t(kZero + "/stage2/universal");
    fs::remove_all(t.path / "zero/hid.bias");
    const auto cp = openCheckpoint(t.path.string());
    EXPECT_EQ(cp->format, CheckpointFormat::DeepSpeedUniversal);
    EXPECT_TRUE(cp->hasErrors());
    EXPECT_FALSE(cp->find("model.hid.bias"));
    EXPECT_TRUE(cp->find("model.hid.weight"));
}

TEST(ZeroDamaged, MissingZero3ModelStatesFileIsReported)
{
    // ZeRO-3 writes one model states file per rank; rank 1's is gone
    TempCopy t(kZero + "/stage3/ckpt");
    fs::remove(t.path / "global_step2/zero_pp_rank_1_mp_rank_00_model_states.pt");
    const auto cp = openCheckpoint(t.path.string());
    const auto report = checkCheckpoint(*cp);
    const Finding* f = findingOf(report.findings, FindingCode::ZeroMissingRankFile);
    ASSERT_TRUE(f);
    EXPECT_NE(f->message.find("zero_pp_rank_1_mp_rank_00_model_states.pt"), std::string::npos) << f->message;
    EXPECT_NE(f->pytorchError.find("AssertionError"), std::string::npos) << f->pytorchError;
    // the optimizer files hold all the data: the weights are still complete and right
    EXPECT_EQ(bytesOf(*cp, "model.hid.weight"),
        bytesOf(*openCheckpoint(kZero + "/stage3/fp32/pytorch_model.bin"), "hid.weight"));
}

TEST(ZeroDamaged, RandomlyCorruptedFilesFailCleanly)
{
    // bytes flipped in the pickles and storages of real files: every outcome is a checkpoint or an Error, never a
    // crash, and every tensor the reader accepts can be read or fails with an Error
    std::mt19937 rng(17);
    for (int round = 0; round < 120; ++round) {
        TempCopy t(kZero + (round % 2 ? "/stage3/ckpt" : "/stage2/ckpt"));
        const fs::path d = t.path / "global_step2";
        const std::vector<fs::path> files = {d / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
            d / (round % 2 ? "zero_pp_rank_0_mp_rank_00_model_states.pt" : "mp_rank_00_model_states.pt")};
        const fs::path f = files[static_cast<size_t>(round / 2) % files.size()];
        std::string bytes;
        {
            std::ifstream in(f, std::ios::binary);
            bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        for (int k = 0; k < 1 + round % 4; ++k)
            bytes[rng() % bytes.size()] = static_cast<char>(rng());
        std::ofstream(f, std::ios::binary | std::ios::trunc) << bytes;
        try {
            const auto cp = openCheckpoint(t.path.string());
            for (const auto& e : cp->entries)
                if (e.isTensor()) try {
                        bytesOf(*cp, e.key);
                    } catch (const Error&) { }
            checkCheckpoint(*cp);
        } catch (const Error&) { }
    }
}

TEST(ZeroDamaged, Bf16PrefixedOptimizerFileNamesAreFound)
{
    // only the names: DeepSpeed's BF16_Optimizer writes bf16_zero_pp_rank_R_mp_rank_MM_optim_states.pt; these files
    // keep the ZeRO-1 contents (zero_stage present, partitions unpadded), so the data must read as before
    TempCopy t(kZero + "/stage1/ckpt");
    const fs::path d = t.path / "global_step2";
    for (int r = 0; r < 2; ++r)
        fs::rename(d / ("zero_pp_rank_" + std::to_string(r) + "_mp_rank_00_optim_states.pt"),
            d / ("bf16_zero_pp_rank_" + std::to_string(r) + "_mp_rank_00_optim_states.pt"));
    const auto cp = openCheckpoint(t.path.string());
    EXPECT_FALSE(cp->hasErrors());
    const auto orig = openCheckpoint(kZero + "/stage1/ckpt");
    for (const auto& p : kParams)
        EXPECT_EQ(bytesOf(*cp, "optim.state." + p + ".exp_avg"), bytesOf(*orig, "optim.state." + p + ".exp_avg")) << p;
}

// ---- variants the real samples do not show (tests/data/zero/synthetic: written by tests/fixtures/
// make_zero_synthetic.py with real PyTorch in the layout DeepSpeed v0.19.5's save code writes, not by DeepSpeed;
// reference.pt holds the parameters and optimizer state of the same steps run on whole tensors)

namespace {

struct SyntheticVariant
{
    const char* name;
    int worldSize;
    const char* detail; ///< in Checkpoint::formatDetail
};

std::vector<std::string> stringList(const PyValue* v)
{
    std::vector<std::string> out;
    if (v && v->isSequence())
        for (const auto* item : v->items())
            out.push_back(pyStr(item));
    return out;
}

void PrintTo(const SyntheticVariant& v, std::ostream* os)
{
    *os << v.name;
}

class ZeroSynthetic : public ::testing::TestWithParam<SyntheticVariant>
{
protected:
    std::string dir() const { return kZero + "/synthetic/" + GetParam().name; }
};

} // namespace

TEST_P(ZeroSynthetic, WeightsStateAndGroupsEqualTheWholeTensorRun)
{
    const auto cp = openCheckpoint(dir() + "/ckpt");
    const auto ref = openCheckpoint(dir() + "/reference.pt");
    EXPECT_EQ(cp->format, CheckpointFormat::DeepSpeedZero);
    EXPECT_FALSE(cp->hasErrors());
    for (const auto& w : cp->warnings)
        EXPECT_TRUE(w.code == ReaderCode::UnsafeGlobal) << readerCodeName(w.code) << ": " << w.message;
    // the stage, the world size and the precision the run trained in (the weights here are its fp32 masters)
    EXPECT_NE(cp->formatDetail.find(GetParam().detail), std::string::npos) << cp->formatDetail;
    // every reference tensor (params.<fqn>, state.<fqn>.<name>) is in the checkpoint, bit for bit, and nothing more
    size_t compared = 0;
    std::set<std::string> expected;
    for (const auto& e : ref->entries) {
        if (!e.isTensor()) continue;
        std::string key;
        if (e.key.rfind("params.", 0) == 0) key = "model." + e.key.substr(7);
        if (e.key.rfind("state.", 0) == 0) key = "optim.state." + e.key.substr(6);
        if (key.empty()) continue;
        expected.insert(key);
        ASSERT_TRUE(cp->find(key)) << key;
        EXPECT_EQ(cp->find(key)->tensor->shape, e.tensor->shape) << key;
        EXPECT_EQ(bytesOf(*cp, key), bytesOf(*ref, e.key)) << key;
        ++compared;
    }
    EXPECT_GT(compared, 10u);
    for (const auto& e : cp->entries) {
        if (e.isTensor()) {
            EXPECT_TRUE(expected.count(e.key)) << "not in the reference: " << e.key;
        }
    }
    // frozen parameters have weights (no fp32 master: in the model's dtype, as in reference.pt) and no state
    for (const auto& fqn : stringList(ref->find("frozen")->value)) {
        EXPECT_TRUE(cp->find("model." + fqn)) << fqn;
        for (const auto& e : cp->entries)
            EXPECT_NE(e.key.rfind("optim.state." + fqn + ".", 0), 0u) << e.key;
    }
    // param groups: the same FQNs in the same order, the same hyperparameters
    for (size_t g = 0;; ++g) {
        const Entry* params = ref->find("param_groups." + std::to_string(g) + ".params");
        if (!params) {
            EXPECT_FALSE(cp->find("optim.param_groups." + std::to_string(g) + ".params")) << g;
            EXPECT_GE(g, 1u);
            break;
        }
        const Entry* got = cp->find("optim.param_groups." + std::to_string(g) + ".params");
        ASSERT_TRUE(got) << g;
        EXPECT_EQ(stringList(got->value), stringList(params->value)) << g;
        for (const char* h : {"lr", "weight_decay", "momentum", "betas"})
            if (const Entry* want = ref->find("param_groups." + std::to_string(g) + "." + h)) {
                const Entry* have = cp->find("optim.param_groups." + std::to_string(g) + "." + h);
                ASSERT_TRUE(have) << g << " " << h;
                EXPECT_EQ(pyRepr(have->value), pyRepr(want->value)) << g << " " << h;
            }
    }
}

TEST_P(ZeroSynthetic, ChunksTileEachTensorFromEveryRankWithoutPadding)
{
    const auto cp = openCheckpoint(dir() + "/ckpt");
    std::set<int> ranks;
    for (const auto& e : cp->entries) {
        if (!e.isTensor()) continue;
        EXPECT_TRUE(ShardLayout::of(*e.tensor).complete()) << e.key;
        int64_t covered = 0;
        for (const auto& c : e.tensor->chunks) {
            covered += c.numel();
            ranks.insert(c.rank);
        }
        EXPECT_EQ(covered, e.tensor->numel()) << e.key;
    }
    std::set<int> all;
    for (int r = 0; r < GetParam().worldSize; ++r)
        all.insert(r);
    ranks.erase(-1); // frozen weights and buffers from the model states file
    EXPECT_EQ(ranks, all);
    const CheckReport report = checkCheckpoint(*cp);
    for (const auto& f : report.findings)
        EXPECT_EQ(f.code, FindingCode::LibraryGlobal) << f.message;
}

INSTANTIATE_TEST_SUITE_P(DeepSpeed, ZeroSynthetic,
    ::testing::Values(SyntheticVariant {"bf16_z1_w3", 3, "BF16_Optimizer (ZeRO stage 1), 3 data-parallel ranks, bf16"},
        SyntheticVariant {"z2_frozen_w4", 4, "ZeRO stage 2, 4 data-parallel ranks, DeepSpeed"},
        SyntheticVariant {"z3_frozen_w3", 3, "ZeRO stage 3, 3 data-parallel ranks, DeepSpeed"},
        SyntheticVariant {"z2_w1", 1, "ZeRO stage 2, 1 data-parallel rank, DeepSpeed"},
        SyntheticVariant {"z1_w3_sgd", 3, "ZeRO stage 1, 3 data-parallel ranks, DeepSpeed"},
        SyntheticVariant {"bf16_z2_w2", 2, "ZeRO stage 2, 2 data-parallel ranks, bf16 weights, DeepSpeed"},
        SyntheticVariant {"bf16_z3_w2", 2, "ZeRO stage 3, 2 data-parallel ranks, bf16 weights, DeepSpeed"},
        SyntheticVariant {
            "fp16_z2_w3", 3, "ZeRO stage 2, 3 data-parallel ranks, fp16 weights, dynamic loss scale 65536, DeepSpeed"}),
    [](const ::testing::TestParamInfo<SyntheticVariant>& info) { return std::string(info.param.name); });

TEST(ZeroDiagnose, LoadingOnAnotherWorldSizeIsDeepSpeedsRefusalWithTheWayAround)
{
    // DeepSpeed v0.19.5 engine.py _load_zero_checkpoint (read in its source): any stage, before any optimizer file
    for (const char* stage : {"stage1", "stage2", "stage3"}) {
        const auto cp = openCheckpoint(kZero + "/" + stage + "/ckpt");
        ASSERT_TRUE(cp->zero);
        EXPECT_EQ(cp->zero->dataParallelSize, 2);
        EXPECT_EQ(cp->zero->stage, stage[5] - '0');
        const Diagnosis same = diagnoseCheckpoint(*cp, nullptr, {}, nullptr, 2);
        EXPECT_FALSE(findingOf(same.findings, FindingCode::ZeroWorldSizeChange)) << stage;
        EXPECT_FALSE(same.notes.empty());
        EXPECT_FALSE(findingOf(diagnoseCheckpoint(*cp, nullptr).findings, FindingCode::ZeroWorldSizeChange)) << stage;
        const Diagnosis d = diagnoseCheckpoint(*cp, nullptr, {}, nullptr, 3);
        const Finding* f = findingOf(d.findings, FindingCode::ZeroWorldSizeChange);
        ASSERT_TRUE(f) << stage;
        EXPECT_EQ(f->severity, Severity::Error);
        EXPECT_STREQ(findingLoader(f->code), "DeepSpeed");
        // (ZeRO-3: rank 2 has no model states file of its own and fails first; see below)
        const std::string text = std::string(stage) == "stage3"
            ? f->pytorchError.substr(f->pytorchError.find("ZeRORuntime"))
            : f->pytorchError;
        EXPECT_EQ(text,
            "ZeRORuntimeException: The checkpoint being loaded used a DP world size of 2 but the current world size "
            "is 3. Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is not currently "
            "supported.");
        EXPECT_NE(f->fix.find("ds_to_universal.py --input_folder SAVE_DIR/global_step2"), std::string::npos) << f->fix;
        EXPECT_NE(f->fix.find("\"load_universal\": true"), std::string::npos);
        EXPECT_NE(f->fix.find("reshard " + cp->path + " --layout fsdp2 --world-size 3"), std::string::npos);
        EXPECT_TRUE(d.hasProblems());
    }
    // ZeRO-3 on more ranks: the new ranks have no model states file of their own and fail first
    const Diagnosis more = diagnoseCheckpoint(*openCheckpoint(kZero + "/stage3/ckpt"), nullptr, {}, nullptr, 4);
    const Finding* f = findingOf(more.findings, FindingCode::ZeroWorldSizeChange);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->pytorchError.rfind("ranks 2 to 3 (no zero_pp_rank_R", 0), 0u) << f->pytorchError;
    EXPECT_EQ(findingOf(diagnoseCheckpoint(*openCheckpoint(kZero + "/stage3/ckpt"), nullptr, {}, nullptr, 3).findings,
                  FindingCode::ZeroWorldSizeChange)
                  ->pytorchError.rfind("rank 2 (no", 0),
        0u);
    EXPECT_NE(f->pytorchError.find("AssertionError"), std::string::npos);
    EXPECT_NE(f->pytorchError.find("ZeRORuntimeException"), std::string::npos);
    // the synthetic BF16_Optimizer on 3 ranks: the same check
    const Diagnosis bf16
        = diagnoseCheckpoint(*openCheckpoint(kZero + "/synthetic/bf16_z1_w3/ckpt"), nullptr, {}, nullptr, 2);
    ASSERT_TRUE(findingOf(bf16.findings, FindingCode::ZeroWorldSizeChange));
    EXPECT_NE(findingOf(bf16.findings, FindingCode::ZeroWorldSizeChange)->pytorchError.find("DP world size of 3"),
        std::string::npos);
    // a universal checkpoint and a DCP checkpoint load on any world size: a note, no finding
    for (const std::string& path : {kZero + "/stage2/universal", std::string(OPTSCOPE_TEST_DATA) + "/fsdp2_r3"}) {
        const auto cp = openCheckpoint(path);
        EXPECT_FALSE(cp->zero);
        const Diagnosis d = diagnoseCheckpoint(*cp, nullptr, {}, nullptr, 5);
        EXPECT_FALSE(findingOf(d.findings, FindingCode::ZeroWorldSizeChange)) << path;
        bool noted = false;
        for (const auto& n : d.notes)
            noted = noted || n.find("any other number") != std::string::npos
                || n.find("resharded on load") != std::string::npos;
        EXPECT_TRUE(noted) << path;
    }
}

// a DeepSpeed checkpoint against DeepSpeed's own zero_to_fp32 output: the checkpoint's model part pairs with the bare
// model state dict without its root ("model.inp.weight" with "inp.weight"), bit for bit; before, every key was only
// on one side and nothing was compared (found by a hunt)
TEST(ZeroSamples, DiffPairsTheModelPartWithAZeroToFp32StateDict)
{
    for (const char* stage : {"stage1", "stage2", "stage3"}) {
        const auto ckpt = openCheckpoint(kZero + "/" + stage + "/ckpt");
        const auto fp32 = openCheckpoint(kZero + "/" + stage + "/fp32/pytorch_model.bin");
        for (const bool fp32First : {false, true}) {
            const DiffReport r = fp32First ? diffCheckpoints(*fp32, *ckpt) : diffCheckpoints(*ckpt, *fp32);
            size_t equal = 0, onlyFp32 = 0;
            for (const auto& e : r.entries) {
                if (e.status == DiffStatus::Equal) {
                    ++equal;
                    EXPECT_NE(e.match.find("model part 'model'"), std::string::npos) << stage << " " << e.match;
                }
                if (e.status == (fp32First ? DiffStatus::OnlyA : DiffStatus::OnlyB)) ++onlyFp32;
                EXPECT_NE(e.status, DiffStatus::Changed) << stage << " " << e.key();
            }
            EXPECT_EQ(equal, fp32->entries.size()) << stage;
            EXPECT_EQ(onlyFp32, 0u) << stage;
        }
    }
}
