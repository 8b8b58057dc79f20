// SPDX-License-Identifier: GPL-3.0-or-later
// computeTensorStats against values PyTorch 2.6 computed on the same fixtures (torch.min/max/mean/std/norm/histc in
// float64), and against simple known tensors.
#include "optscope/analysis/diff_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/optim/optimizer_steps.h"
#include "optscope/tensor/scalar_value.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_stats.h"
#include "optscope/tensor/tensor_values.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

using namespace optscope;

namespace {

const std::string kData = OPTSCOPE_TEST_DATA;

struct Expected
{
    const char* key;
    double min, max, mean, std, norm;
    int64_t zeros;
    std::vector<int64_t> hist8;
};

void expectNear(double got, double want, const char* what, const std::string& key)
{
    EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, std::abs(want))) << what << " of " << key;
}

} // namespace

TEST(TensorStats, DtypesMatchPyTorch)
{
    const auto cp = openCheckpoint(kData + "/dtypes.pt");
    // python: d = t.to(torch.float64) (complex: t.real); d.min(), d.max(), d.mean(), d.std(), d.norm(), (d == 0).sum(),
    // torch.histc(d, 8, d.min(), d.max())
    const std::vector<Expected> cases = {
        {"dtypes.float32", -2.5273351669311523, 1.477784276008606, -0.1483791976546248, 0.9229634333908354,
            4.485666924413906, 0, {1, 0, 2, 4, 7, 4, 4, 2}},
        {"dtypes.bfloat16", -2.53125, 1.4765625, -0.14881388346354166, 0.9229361681449175, 4.485883485634302, 0,
            {1, 0, 2, 4, 7, 4, 4, 2}},
        {"dtypes.int16", -2527.0, 1477.0, -148.33333333333334, 922.5328398380788, 4483.592755815363, 0,
            {1, 0, 2, 4, 7, 4, 4, 2}},
        {"dtypes.float8_e4m3fn", -2.5, 1.5, -0.14990234375, 0.9238323888672398, 4.49099338748626, 0,
            {1, 0, 2, 4, 7, 4, 3, 3}},
        {"dtypes.uint16", 53.0, 2527.0, 720.5, 576.485529061564, 4483.592755815363, 0, {6, 8, 4, 2, 3, 0, 0, 1}},
        {"dtypes.complex64", -2.5273351669311523, 1.477784276008606, -0.1483791976546248, 0.9229634333908354,
            4.485666924413906, 0, {1, 0, 2, 4, 7, 4, 4, 2}},
        {"dtypes.bool", 0.0, 1.0, 0.4166666666666667, 0.5036101551853348, 3.1622776601683795, 14,
            {14, 0, 0, 0, 0, 0, 0, 10}},
    };
    for (const auto& c : cases) {
        const Entry* e = cp->find(c.key);
        ASSERT_NE(e, nullptr) << c.key;
        const TensorStats s = computeTensorStats(*cp, *e, 8);
        EXPECT_EQ(s.numel, 24) << c.key;
        EXPECT_EQ(s.finite, 24) << c.key;
        EXPECT_EQ(s.nanCount, 0) << c.key;
        EXPECT_EQ(s.infCount, 0) << c.key;
        EXPECT_EQ(s.zeroCount, c.zeros) << c.key;
        expectNear(s.min, c.min, "min", c.key);
        expectNear(s.max, c.max, "max", c.key);
        expectNear(s.mean, c.mean, "mean", c.key);
        expectNear(s.std, c.std, "std", c.key);
        expectNear(s.l2Norm, c.norm, "norm", c.key);
        EXPECT_EQ(s.histogramCounts, c.hist8) << c.key;
        ASSERT_EQ(s.histogramEdges.size(), 9u) << c.key;
        EXPECT_DOUBLE_EQ(s.histogramEdges.front(), c.min) << c.key;
        EXPECT_DOUBLE_EQ(s.histogramEdges.back(), c.max) << c.key;
        EXPECT_EQ(s.complexRealPart, std::string(c.key) == "dtypes.complex64");
    }
}

TEST(TensorStats, EveryReadableDtypeAgreesWithReadTensorValues)
{
    const auto cp = openCheckpoint(kData + "/dtypes.pt");
    for (const auto& e : cp->entries) {
        if (!e.isTensor() || e.key.rfind("dtypes.", 0) != 0) continue;
        const TensorStats s = computeTensorStats(*cp, e, 4);
        const auto v = readTensorValues(*cp, e, 1000);
        double lo = INFINITY, hi = -INFINITY, sum = 0.0;
        int64_t finite = 0;
        for (double x : v)
            if (std::isfinite(x)) {
                lo = std::min(lo, x);
                hi = std::max(hi, x);
                sum += x;
                ++finite;
            }
        EXPECT_EQ(s.finite, finite) << e.key;
        EXPECT_EQ(s.finite + s.nanCount + s.infCount, s.numel) << e.key;
        if (finite) {
            EXPECT_DOUBLE_EQ(s.min, lo) << e.key;
            EXPECT_DOUBLE_EQ(s.max, hi) << e.key;
            EXPECT_NEAR(s.sum, sum, 1e-6 * std::max(1.0, std::abs(sum))) << e.key;
            int64_t total = 0;
            for (auto c : s.histogramCounts)
                total += c;
            EXPECT_EQ(total, finite) << e.key;
        }
    }
}

TEST(TensorStats, KnownLayouts)
{
    const auto cp = openCheckpoint(kData + "/dtypes.pt");
    // torch.arange(10): a view over a shared storage
    TensorStats s = computeTensorStats(*cp, *cp->find("layouts.view_whole"), 10);
    EXPECT_EQ(s.numel, 10);
    EXPECT_EQ(s.zeroCount, 1);
    EXPECT_DOUBLE_EQ(s.min, 0.0);
    EXPECT_DOUBLE_EQ(s.max, 9.0);
    EXPECT_DOUBLE_EQ(s.mean, 4.5);
    EXPECT_NEAR(s.std, std::sqrt(82.5 / 9.0), 1e-12);
    EXPECT_NEAR(s.l2Norm, std::sqrt(285.0), 1e-12);
    EXPECT_EQ(s.histogramCounts, std::vector<int64_t>(10, 1));
    // shared[3:7] = [3, 4, 5, 6] (storage offset)
    s = computeTensorStats(*cp, *cp->find("layouts.view_offset"), 0);
    EXPECT_DOUBLE_EQ(s.min, 3.0);
    EXPECT_DOUBLE_EQ(s.max, 6.0);
    EXPECT_DOUBLE_EQ(s.sum, 18.0);
    EXPECT_TRUE(s.histogramCounts.empty());
    // 0-dim 3.5: one element, std 0, a widened single-value histogram
    s = computeTensorStats(*cp, *cp->find("layouts.scalar"), 3);
    EXPECT_EQ(s.numel, 1);
    EXPECT_DOUBLE_EQ(s.mean, 3.5);
    EXPECT_DOUBLE_EQ(s.std, 0.0);
    EXPECT_EQ(s.histogramCounts, (std::vector<int64_t> {0, 1, 0}));
    EXPECT_DOUBLE_EQ(s.histogramEdges.front(), 3.0);
    EXPECT_DOUBLE_EQ(s.histogramEdges.back(), 4.0);
    // stride-0 expansion of ones(3, 1) to [3, 4]
    s = computeTensorStats(*cp, *cp->find("layouts.expanded"), 2);
    EXPECT_EQ(s.numel, 12);
    EXPECT_DOUBLE_EQ(s.sum, 12.0);
    EXPECT_DOUBLE_EQ(s.l2Norm, std::sqrt(12.0));
    // zeros(0, 5): nothing to summarise
    s = computeTensorStats(*cp, *cp->find("layouts.empty"), 8);
    EXPECT_EQ(s.numel, 0);
    EXPECT_TRUE(std::isnan(s.min));
    EXPECT_TRUE(s.histogramCounts.empty());
    // a value entry is not a tensor
    EXPECT_THROW(computeTensorStats(*cp, *cp->find("values.int"), 8), Error);
}

TEST(TensorStats, ShardedDcpTensorMatchesPyTorch)
{
    // FSDP2 on 3 ranks: uneven dim-0 chunks assembled across three .distcp files
    const auto cp = openCheckpoint(kData + "/fsdp2_r3");
    const Entry* e = cp->find("optim.state.blocks.0.qkv.weight.exp_avg");
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->tensor->chunks.size(), 3u);
    const TensorStats s = computeTensorStats(*cp, *e, 4);
    EXPECT_EQ(s.numel, 42);
    expectNear(s.min, -0.35204219818115234, "min", e->key);
    expectNear(s.max, 0.15582334995269775, "max", e->key);
    expectNear(s.mean, -0.05488828943288397, "mean", e->key);
    expectNear(s.std, 0.11267490445591472, "std", e->key);
    expectNear(s.l2Norm, 0.8043975504491467, "norm", e->key);
    EXPECT_EQ(s.histogramCounts, (std::vector<int64_t> {3, 14, 14, 11}));

    const Entry* sq = cp->find("optim.state.blocks.0.head.weight.exp_avg_sq");
    ASSERT_NE(sq, nullptr);
    const TensorStats t = computeTensorStats(*cp, *sq, 0);
    expectNear(t.min, 0.00022742865257896483, "min", sq->key);
    expectNear(t.max, 0.010590898804366589, "max", sq->key);
    expectNear(t.mean, 0.002214645390631631, "mean", sq->key);
    expectNear(t.std, 0.0022630756010932765, "std", sq->key);
    expectNear(t.l2Norm, 0.013978619262070512, "norm", sq->key);
}

TEST(TensorStats, ProgressAndCancel)
{
    const auto cp = openCheckpoint(kData + "/fsdp2_r3");
    const Entry* e = cp->find("optim.state.blocks.0.qkv.weight.exp_avg");
    std::atomic<int> reports {0};
    double last = 0.0;
    Progress p;
    p.report = [&](double f, std::string_view) {
        ++reports;
        last = f;
    };
    computeTensorStats(*cp, *e, 4, p);
    EXPECT_GT(reports.load(), 0);
    EXPECT_DOUBLE_EQ(last, 1.0);
    Progress cancel;
    cancel.cancelled = [] { return true; };
    try {
        computeTensorStats(*cp, *e, 4, cancel);
        FAIL() << "not cancelled";
    } catch (const Error& err) {
        EXPECT_EQ(err.kind(), ErrorKind::Cancelled);
    }
}

TEST(ScalarValue, StepAndHyperparametersAsPythonPrintsThem)
{
    // step of torch.optim.Adam is a float32 0-dim tensor: tensor(3.).item() prints 3.0
    const auto cp = openCheckpoint(kData + "/diff/step3.pt");
    const Entry* step = cp->find("optim.state.0.weight.step");
    ASSERT_NE(step, nullptr);
    EXPECT_TRUE(isScalarEntry(*step));
    EXPECT_EQ(scalarValueText(*cp, *step), std::optional<std::string>("3.0"));
    const Entry* moment = cp->find("optim.state.0.weight.exp_avg");
    ASSERT_NE(moment, nullptr);
    EXPECT_FALSE(isScalarEntry(*moment));
    EXPECT_EQ(scalarValueText(*cp, *moment), std::nullopt);
    const Entry* lr = cp->find("optim.param_groups.0.lr");
    ASSERT_NE(lr, nullptr);
    EXPECT_TRUE(isScalarEntry(*lr));
    EXPECT_EQ(scalarValueText(*cp, *lr), std::optional<std::string>(pyRepr(lr->value)));
    // steps saved as Python ints print as ints
    const auto ints = openCheckpoint(kData + "/diag/step_int.pt");
    const Entry* intStep = ints->find("state.0.step");
    ASSERT_NE(intStep, nullptr);
    const auto text = scalarValueText(*ints, *intStep);
    ASSERT_TRUE(text.has_value());
    EXPECT_EQ(text->find('.'), std::string::npos) << *text;
}

TEST(ScalarValue, StepChangeHeadline)
{
    const auto a = openCheckpoint(kData + "/diff/step3.pt");
    const auto b = openCheckpoint(kData + "/diff/step4.pt");
    EXPECT_EQ(stepChangeText(*a, *b), "step 3 \u2192 4");
    EXPECT_EQ(stepChangeText(*b, *a), "step 4 \u2192 3");
    EXPECT_EQ(stepChangeText(*a, *a), "");
    // no optimizer on one side: nothing to say
    const auto plain = openCheckpoint(kData + "/dangerous.pt");
    EXPECT_EQ(stepChangeText(*a, *plain), "");
}

TEST(ScalarValue, TrainingOrderBySteps)
{
    // the later of two checkpoints of a run, whichever is named first: by the optimizers' step
    const auto step3 = openCheckpoint(kData + "/diff/step3.pt");
    const auto step4 = openCheckpoint(kData + "/diff/step4.pt");
    EXPECT_EQ(trainingOrder(*step4, *step3).later, 1);
    EXPECT_EQ(trainingOrder(*step3, *step4).later, -1);
    EXPECT_EQ(trainingOrder(*step3, *step4).by, TrainingOrder::By::Step);
    EXPECT_EQ(trainingOrder(*step3, *step3).later, 0);
}

TEST(ScalarValue, TrainingOrderByWriteTimeWithoutSteps)
{
    // no optimizer steps to go by: the one written later is the later one; equal times cannot tell
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("optscope_order_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::copy_file(kData + "/dangerous.pt", dir / "old.pt", fs::copy_options::overwrite_existing);
    fs::copy_file(kData + "/dangerous.pt", dir / "new.pt", fs::copy_options::overwrite_existing);
    const auto now = fs::last_write_time(dir / "new.pt");
    fs::last_write_time(dir / "old.pt", now - std::chrono::hours(1));
    const auto older = openCheckpoint((dir / "old.pt").string());
    const auto newer = openCheckpoint((dir / "new.pt").string());
    EXPECT_EQ(trainingOrder(*newer, *older).later, 1);
    EXPECT_EQ(trainingOrder(*older, *newer).later, -1);
    EXPECT_EQ(trainingOrder(*older, *newer).by, TrainingOrder::By::WriteTime);
    fs::last_write_time(dir / "old.pt", now);
    EXPECT_EQ(trainingOrder(*older, *newer).later, 0);
    fs::remove_all(dir);
}

// A broadcast view too large to expand (torch.expand: stride 0) is summarised and hashed through its storage, in no
// time: statistics against PyTorch's over every element (tests/data/hostile/broadcast_views.json), the hash of its
// stored elements, and two such views compared element for element without expanding either.
TEST(TensorStats, ABroadcastViewTooLargeToExpandIsSummarisedThroughItsStorage)
{
    const nlohmann::json expected = [] {
        std::ifstream in(kData + "/hostile/broadcast_views.json");
        return nlohmann::json::parse(in);
    }();
    CheckpointPtr cp = openCheckpoint(kData + "/hostile/broadcast_views.pt");
    // the process's first statistics load libtorch (half a second here, more on a busy machine): not what is timed
    computeTensorStats(*cp, *cp->find("rows"), 4);
    for (const char* key : {"rows", "cols"}) {
        SCOPED_TRACE(key);
        const nlohmann::json& want = expected[key];
        const Entry* e = cp->find(key);
        ASSERT_TRUE(e);
        const auto view = broadcastStorageOf(*e);
        ASSERT_TRUE(view);
        const auto start = std::chrono::steady_clock::now();
        const TensorStats s = computeTensorStats(*cp, *e, 4);
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)); // 512 MiB expanded: not read
        EXPECT_EQ(s.numel, want["numel"].get<int64_t>());
        EXPECT_EQ(s.nanCount, want["nan"].get<int64_t>());
        EXPECT_EQ(s.finite, want["finite"].get<int64_t>());
        EXPECT_EQ(s.zeroCount, want["zero"].get<int64_t>());
        for (const auto& [name, got] : {std::pair {"min", s.min}, {"max", s.max}, {"sum", s.sum}, {"mean", s.mean},
                 {"std", s.std}, {"l2", s.l2Norm}})
            EXPECT_NEAR(got, want[name].get<double>(), 1e-9 * std::max(1.0, std::abs(want[name].get<double>())))
                << name;
        int64_t binned = 0;
        for (int64_t c : s.histogramCounts)
            binned += c;
        EXPECT_EQ(binned, s.finite);
        EXPECT_EQ(hashTensor(*cp, *e), want["stored_sha256"].get<std::string>());
    }

    // two views of 2^60 elements: 0 against 2 everywhere, and one against itself
    CheckpointPtr zeros = openCheckpoint(kData + "/hostile/expanded.pt");
    CheckpointPtr twos = openCheckpoint(kData + "/hostile/expanded_twos.pt");
    DiffOptions opt;
    opt.histogramBins = 4;
    const DiffReport differ = diffCheckpoints(*zeros, *twos, opt);
    ASSERT_EQ(differ.entries.size(), 1u);
    const DiffEntry& d = differ.entries[0];
    EXPECT_TRUE(d.valuesCompared);
    EXPECT_EQ(d.numel, int64_t(1) << 60);
    EXPECT_EQ(d.numDiff, int64_t(1) << 60);
    EXPECT_EQ(d.maxAbsDiff, 2.0);
    EXPECT_EQ(d.shapeA, (std::vector<int64_t> {int64_t(1) << 30, int64_t(1) << 30}));
    int64_t binned = 0;
    for (int64_t c : d.histogramCounts)
        binned += c;
    EXPECT_EQ(binned, int64_t(1) << 60);
    EXPECT_FALSE(differ.equal);
    EXPECT_TRUE(diffCheckpoints(*zeros, *zeros).equal);
}
