// SPDX-License-Identifier: GPL-3.0-or-later
// Diff numbers against the numbers PyTorch computes on the same real pairs; key alignment across formats, wrappers
// and id/FQN keying; one real checkpoint per diagnosis code; fixes that re-key, rename, unflatten and cast.
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/analysis/checkpoint_fix.h"
#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/diff_report.h"
#include "optscope/analysis/inspect_report.h"
#include "optscope/base/error.h"
#include "optscope/base/pattern.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/io/csv.h"
#include "optscope/optim/fqn_normalizer.h"
#include "optscope/optim/optimizer_view.h"
#include "optscope/optim/param_table.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

const std::string kData = OPTSCOPE_TEST_DATA;

CheckpointPtr open(const std::string& rel)
{
    return openCheckpoint(kData + "/" + rel);
}

class TempDir
{
public:
    TempDir()
    {
        std::random_device rd;
        path = fs::temp_directory_path() / ("optscope-test-" + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
    fs::path path;
};

const DiffEntry* entry(const DiffReport& r, const std::string& key)
{
    for (const auto& e : r.entries)
        if (e.key() == key || e.keyB == key) return &e;
    return nullptr;
}

// ------------------------------------------------------------------------------------------- diff numbers

struct PairCase
{
    const char* name;
    const char* a;
    const char* b;
    double rtol, atol;
    const char* expected = "diff/expected.json"; ///< what torch computed (tests/fixtures/make_fixtures.py)
};

// both engines (the fused kernel and the ATen reference) must give PyTorch's numbers
class DiffAgainstTorch : public ::testing::TestWithParam<std::tuple<PairCase, DiffEngine>>
{ };

TEST_P(DiffAgainstTorch, NumbersEqualTorchs)
{
    const PairCase& c = std::get<0>(GetParam());
    std::ifstream in(kData + "/" + c.expected);
    const auto expected = nlohmann::json::parse(in)[c.name];
    DiffOptions o;
    o.rtol = c.rtol;
    o.atol = c.atol;
    o.engine = std::get<1>(GetParam());
    const DiffReport r = diffCheckpoints(*open(c.a), *open(c.b), o);
    EXPECT_FALSE(r.equal);
    ASSERT_FALSE(expected.empty());
    for (auto it = expected.begin(); it != expected.end(); ++it) {
        SCOPED_TRACE(it.key());
        const DiffEntry* d = entry(r, it.key());
        ASSERT_NE(d, nullptr);
        const auto& e = it.value();
        EXPECT_EQ(d->numel, e["numel"].get<int64_t>());
        EXPECT_EQ(d->numDiff, e["num_diff"].get<int64_t>());
        EXPECT_NEAR(
            d->maxAbsDiff, e["max_abs_diff"].get<double>(), 1e-7 * std::max(1.0, e["max_abs_diff"].get<double>()));
        EXPECT_NEAR(
            d->maxRelDiff, e["max_rel_diff"].get<double>(), 1e-6 * std::max(1.0, e["max_rel_diff"].get<double>()));
        EXPECT_NEAR(d->rmsDiff, e["rms_diff"].get<double>(), 1e-6 * std::max(1.0, e["rms_diff"].get<double>()));
        EXPECT_EQ(d->nanA, e["nan"][0].get<int64_t>());
        EXPECT_EQ(d->nanB, e["nan"][1].get<int64_t>());
        EXPECT_EQ(d->infA, e["inf"][0].get<int64_t>());
        EXPECT_EQ(d->infB, e["inf"][1].get<int64_t>());
        EXPECT_EQ(d->status, d->numDiff > 0 || d->dtypeA != d->dtypeB ? DiffStatus::Changed : DiffStatus::Equal);
    }
}

INSTANTIATE_TEST_SUITE_P(RealPairs, DiffAgainstTorch,
    ::testing::Combine(::testing::Values(PairCase {"step3_vs_step4", "diff/step3.pt", "diff/step4.pt", 0, 0},
                           PairCase {"step3_vs_step4_tol", "diff/step3.pt", "diff/step4.pt", 1e-2, 1e-3},
                           PairCase {"step4_vs_step4_bf16", "diff/step4.pt", "diff/step4_bf16.pt", 0, 0},
                           // complex tensors: moduli, as torch takes them
                           PairCase {"complex_step2_vs_step4", "diff/complex_step2.pt", "diff/complex_step4.pt", 0, 0,
                               "diff/expected_complex.json"},
                           PairCase {"complex_step2_vs_step4_tol", "diff/complex_step2.pt", "diff/complex_step4.pt",
                               1e-2, 1e-3, "diff/expected_complex.json"}),
        ::testing::Values(DiffEngine::Auto, DiffEngine::Aten)),
    [](const ::testing::TestParamInfo<std::tuple<PairCase, DiffEngine>>& info) {
        return std::string(std::get<0>(info.param).name)
            + (std::get<1>(info.param) == DiffEngine::Aten ? "_aten" : "_auto");
    });

// --json writes the report entry by entry: the same text as the whole document's dump, notes, ranks, histograms,
// non-finite numbers and an empty report included
TEST(Diff, StreamedJsonIsTheDocumentsDump)
{
    const std::pair<const char*, const char*> pairs[] = {{"diff/step3.pt", "diff/step4.pt"}, {"fsdp2_r3", "fsdp2_r2"},
        {"adamw_fqn.pt", "compiled.pt"}, {"hostile/deep_lists_a.pt", "hostile/deep_lists_b.pt"}};
    for (const auto& [a, b] : pairs) {
        SCOPED_TRACE(std::string(a) + " vs " + b);
        DiffOptions options;
        options.histogramBins = 4;
        const DiffReport report = diffCheckpoints(*open(a), *open(b), options);
        ASSERT_FALSE(report.entries.empty());
        std::ostringstream streamed;
        report.writeJson(streamed);
        EXPECT_EQ(
            streamed.str(), report.toJson().dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    }
    DiffReport none;
    none.notes = {"a note with [] in it"};
    std::ostringstream streamed;
    none.writeJson(streamed);
    EXPECT_EQ(streamed.str(), none.toJson().dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

// `diff` without --all keeps no row of an equal entry compared whole (a million equal values were 464 MB of rows):
// the rows it keeps are the full report's others, in its order and field for field, and the counts are the same
TEST(Diff, EqualEntriesLeftOutAreCountedAndTheRestIsTheFullReport)
{
    const std::pair<const char*, const char*> pairs[] = {{"diff/step3.pt", "diff/step4.pt"}, {"fsdp2_r3", "fsdp2_r2"},
        {"inert_values/numbers_a.pt", "inert_values/numbers_b.pt"},
        {"hostile/deep_lists_a.pt", "hostile/deep_lists_b.pt"}, {"adam_int.pt", "adam_int_proto4.pt"}};
    size_t leftOutSeen = 0, partlySeen = 0;
    const auto check = [&](const Checkpoint& ca, const Checkpoint& cb) {
        const DiffReport full = diffCheckpoints(ca, cb);
        DiffOptions listing;
        listing.keepEqual = false;
        const DiffReport part = diffCheckpoints(ca, cb, listing);
        const nlohmann::ordered_json fullEntries = full.toJson()["entries"];
        nlohmann::ordered_json want = nlohmann::ordered_json::array();
        size_t equalWhole = 0;
        for (const auto& e : full.entries) {
            partlySeen += e.comparedInPart;
            if (e.status == DiffStatus::Equal && !e.comparedInPart)
                ++equalWhole;
            else
                want.push_back(fullEntries[static_cast<size_t>(&e - full.entries.data())]);
        }
        EXPECT_EQ(part.toJson()["entries"], want);
        EXPECT_EQ(part.equalLeftOut, equalWhole);
        leftOutSeen += part.equalLeftOut;
        EXPECT_EQ(part.equal, full.equal);
        for (auto s : {DiffStatus::Equal, DiffStatus::Changed, DiffStatus::OnlyA, DiffStatus::OnlyB})
            EXPECT_EQ(part.count(s), full.count(s)) << diffStatusName(s);
        EXPECT_EQ(part.notes, full.notes);
    };
    for (const auto& [a, b] : pairs) {
        SCOPED_TRACE(std::string(a) + " vs " + b);
        check(*open(a), *open(b));
    }
    EXPECT_GT(leftOutSeen, 20u); // the cases hold equal entries to leave out
    // a value whose tensors' bytes cannot be found (no file recorded for it) is equal in part only, and stays listed
    const auto deep = open("hostile/deep_lists_a.pt");
    const auto unlocated = open("hostile/deep_lists_a.pt");
    for (Entry& e : const_cast<Checkpoint&>(*unlocated).entries)
        e.valueFile = std::string();
    check(*deep, *unlocated);
    EXPECT_GT(partlySeen, 0u);
}
// the two engines agree on every entry of every real pair, ranks included, not only on the keys torch computed
TEST(Diff, FusedKernelAndAtenGiveTheSameReport)
{
    const std::pair<const char*, const char*> pairs[]
        = {{"diff/step3.pt", "diff/step4.pt"}, {"diff/step4.pt", "diff/step4_bf16.pt"}, {"fsdp2_r3", "fsdp2_r2"},
            {"dtypes.pt", "dtypes.pt"}, {"adam_bf16.pt", "adam_fp16.pt"}, {"adam_fp64.pt", "adam_int.pt"}};
    for (const auto& [a, b] : pairs) {
        SCOPED_TRACE(std::string(a) + " vs " + b);
        for (const double rtol : {0.0, 1e-3}) {
            DiffOptions fused;
            fused.rtol = rtol;
            fused.atol = rtol / 10;
            fused.histogramBins = 16;
            DiffOptions ref = fused;
            ref.engine = DiffEngine::Aten;
            const DiffReport x = diffCheckpoints(*open(a), *open(b), fused);
            const DiffReport y = diffCheckpoints(*open(a), *open(b), ref);
            EXPECT_EQ(x.equal, y.equal);
            ASSERT_EQ(x.entries.size(), y.entries.size());
            for (size_t i = 0; i < x.entries.size(); ++i) {
                const DiffEntry& p = x.entries[i];
                const DiffEntry& q = y.entries[i];
                SCOPED_TRACE(p.key());
                EXPECT_EQ(p.key(), q.key());
                EXPECT_EQ(p.status, q.status);
                EXPECT_EQ(p.numDiff, q.numDiff);
                EXPECT_EQ(p.maxAbsDiff, q.maxAbsDiff);
                EXPECT_NEAR(p.maxRelDiff, q.maxRelDiff, 1e-6 * std::max(1.0, q.maxRelDiff));
                EXPECT_NEAR(p.rmsDiff, q.rmsDiff, 1e-9 + 1e-9 * q.rmsDiff);
                EXPECT_EQ(std::tie(p.nanA, p.nanB, p.infA, p.infB), std::tie(q.nanA, q.nanB, q.infA, q.infB));
                ASSERT_EQ(p.ranks.size(), q.ranks.size());
                for (size_t r = 0; r < p.ranks.size(); ++r) {
                    EXPECT_EQ(p.ranks[r].numDiff, q.ranks[r].numDiff);
                    EXPECT_EQ(p.ranks[r].maxAbsDiff, q.ranks[r].maxAbsDiff);
                }
                EXPECT_EQ(p.histogramCounts, q.histogramCounts);
            }
        }
    }
}

TEST(Diff, DcpEqualsItsOwnTorchSaveConversion)
{
    // fsdp2_r3_converted.pt was written by PyTorch's dcp_to_torch_save from the fsdp2_r3 folder
    const DiffReport same = diffCheckpoints(*open("fsdp2_r3"), *open("fsdp2_r3_converted.pt"));
    EXPECT_TRUE(same.equal) << same.toJson().dump().substr(0, 1000);
    EXPECT_EQ(same.count(DiffStatus::Equal), same.entries.size());
    EXPECT_EQ(same.entries.size(), 75u);
    // every tensor was compared per rank of the 3-rank side
    const DiffEntry* e = entry(same, "optim.state.blocks.0.qkv.weight.exp_avg");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->ranks.size(), 3u);
    // and across world sizes: the same training state saved on 2 ranks
    EXPECT_TRUE(diffCheckpoints(*open("fsdp2_r3"), *open("fsdp2_r2")).equal);
}

TEST(Diff, TensorsKeptInertAreComparedByTheirData)
{
    // sparse, quantized and nested tensors, a storage and a tensor inside an object are values whose pickled metadata
    // (dtype, shape) is the same in a.pt and b.pt; PyTorch finds their data different. diff said EQUAL, exit 0
    const DiffReport r = diffCheckpoints(*open("inert_values/a.pt"), *open("inert_values/b.pt"));
    EXPECT_FALSE(r.equal);
    for (const char* key : {"sp", "csr", "q", "nested", "storage", "ns"}) {
        const DiffEntry* e = entry(r, key);
        ASSERT_NE(e, nullptr) << key;
        EXPECT_EQ(e->status, DiffStatus::Changed) << key;
        EXPECT_EQ(e->reason, "the data of a tensor inside differs") << key;
    }
    // the same state saved again, and a DCP bytes item against its own
    EXPECT_TRUE(diffCheckpoints(*open("inert_values/a.pt"), *open("inert_values/a2.pt")).equal);
    const DiffReport dcp = diffCheckpoints(*open("inert_values/dcp_a"), *open("inert_values/dcp_b"));
    ASSERT_NE(entry(dcp, "extra.ns"), nullptr);
    EXPECT_EQ(entry(dcp, "extra.ns")->status, DiffStatus::Changed);
    EXPECT_TRUE(diffCheckpoints(*open("inert_values/dcp_a"), *open("inert_values/dcp_a")).equal);
    // views inside a value compare what they look at, as torch.equal does (make_inert_values asserts it): storages
    // that differ only outside the views are equal (before: "the data of a tensor inside differs"); a strided view
    // whose own element differs is not
    EXPECT_TRUE(diffCheckpoints(*open("inert_values/views_a.pt"), *open("inert_values/views_b.pt")).equal);
    const DiffReport views = diffCheckpoints(*open("inert_values/views_a.pt"), *open("inert_values/views_c.pt"));
    ASSERT_NE(entry(views, "ns"), nullptr);
    EXPECT_EQ(entry(views, "ns")->status, DiffStatus::Changed);
    EXPECT_EQ(entry(views, "ns")->reason, "the data of a tensor inside differs");
}

TEST(Diff, NumbersCompareAsPythonDoesBitIdenticalByDefault)
{
    const auto a = open("inert_values/numbers_a.pt"), b = open("inert_values/numbers_b.pt");
    const DiffReport r = diffCheckpoints(*a, *b);
    const std::map<std::string, DiffStatus> want {
        {"x", DiffStatus::Changed}, // 2**53 + 1 != 2.0**53 (was equal: both went through a double)
        {"y", DiffStatus::Equal}, // 10**20 == 1e20 (was "type int -> float")
        {"z", DiffStatus::Changed}, // -0.0 vs 0.0: bit-identical, as tensors (was equal)
        {"i", DiffStatus::Equal}, // 1 == 1.0
        {"big", DiffStatus::Changed}, // 2**70 vs 2**70 + 1
        {"lr", DiffStatus::Changed}, {"same", DiffStatus::Equal}};
    for (const auto& [key, status] : want) {
        ASSERT_NE(entry(r, key), nullptr) << key;
        EXPECT_EQ(entry(r, key)->status, status) << key;
    }
    // --rtol and --atol apply to values too (were ignored)
    DiffOptions tolerant;
    tolerant.rtol = 1e-6;
    EXPECT_TRUE(diffCheckpoints(*a, *b, tolerant).equal);
}

TEST(Diff, LegacyTorchSaveOfEveryPickleProtocolReadsAsItsZipTwin)
{
    // torch.save(..., _use_new_zipfile_serialization=False, pickle_protocol=3/4/5) was "not a torch.save file"
    for (int p : {2, 3, 4, 5}) {
        SCOPED_TRACE(p);
        const auto legacy = open("legacy_proto/p" + std::to_string(p) + ".pt");
        EXPECT_NE(legacy->formatDetail.find("legacy"), std::string::npos);
        const DiffReport r = diffCheckpoints(*legacy, *open("legacy_proto/zip.pt"));
        EXPECT_TRUE(r.equal) << r.toJson().dump().substr(0, 600);
        EXPECT_EQ(r.entries.size(), 5u);
    }
}

TEST(Diff, BitIdenticalFilesAreEqualAndExitSemanticsHold)
{
    const DiffReport r = diffCheckpoints(*open("adam_int.pt"), *open("adam_int_proto4.pt"));
    EXPECT_TRUE(r.equal);
    EXPECT_EQ(r.count(DiffStatus::Changed), 0u);
    EXPECT_EQ(r.entries.size(), 23u);
}

TEST(Diff, OnePairsHistogramEqualsTheReportsHistogram)
{
    // the GUI reads the selected pair's histogram when it shows it: the same counts and edges as a report made
    // with histogramBins, for every pair that has one, across layouts (2 ranks vs 3)
    const auto a = open("fsdp2_r2");
    const auto b = open("diff/step4.pt");
    size_t withHistogram = 0;
    for (const auto& [x, y] : {std::make_pair(open("diff/step3.pt"), b), std::make_pair(a, open("fsdp2_r3"))}) {
        DiffOptions withBins;
        withBins.histogramBins = 16;
        const DiffReport full = diffCheckpoints(*x, *y, withBins);
        const DiffReport plain = diffCheckpoints(*x, *y);
        ASSERT_EQ(full.entries.size(), plain.entries.size());
        for (size_t i = 0; i < full.entries.size(); ++i) {
            EXPECT_TRUE(plain.entries[i].histogramCounts.empty());
            const DiffHistogram h = diffHistogram(*x, *y, plain.entries[i], 16);
            EXPECT_EQ(h.counts, full.entries[i].histogramCounts) << full.entries[i].key();
            EXPECT_EQ(h.edges, full.entries[i].histogramEdges) << full.entries[i].key();
            withHistogram += h.counts.empty() ? 0 : 1;
        }
    }
    EXPECT_GE(withHistogram, 8u);
}

// per-rank torch.save files whose replicated state disagrees (real PyTorch, tests/data/rank_desync: rank 1 took one
// more step and set lr 0.5): each rank loads its own file, so check says so (before: clean), and diff --ranks leaves
// the replicated copies out, saying why (before: "only_a ... not in rank 1" for each step counter)
TEST(Diff, PerRankFilesWhoseReplicatedStateDisagreesAreSaidToDisagree)
{
    const auto both = open("rank_desync");
    ASSERT_EQ(both->format, CheckpointFormat::TorchSaveRanks);
    const CheckReport c = checkCheckpoint(*both);
    ASSERT_EQ(c.findings.size(), 1u) << c.toJson().dump(1);
    EXPECT_EQ(c.findings[0].severity, Severity::Error);
    const std::string text = c.findings[0].message;
    // 16 step counters and the lr, as torch.load of the two files says (make_rank_desync asserts it)
    EXPECT_NE(text.find("dtensor_rank1.pt holds 17 replicated value(s) that differ from dtensor_rank0.pt's"),
        std::string::npos)
        << text;
    EXPECT_NE(text.find("(3.0, rank 0: 2.0)"), std::string::npos) << text;
    // the same run without the extra step agrees with itself
    EXPECT_TRUE(checkCheckpoint(*open("partial")).clean());
    const DiffReport ranks = diffRanks(*both, 0, 1);
    for (const auto& e : ranks.entries)
        EXPECT_NE(e.status, DiffStatus::OnlyA) << e.key() << ": " << e.reason;
    ASSERT_EQ(ranks.notes.size(), 1u);
    EXPECT_EQ(ranks.notes[0].rfind("16 replicated tensor(s)", 0), 0u) << ranks.notes[0];
}

TEST(Diff, FilesHoldingPartOfATensorCompareWhatTheyHold)
{
    // one rank's torch.save of FSDP2 DTensor state dicts (real PyTorch, tests/data/partial): each tensor holds that
    // rank's shard. A file against itself is equal, compared where it stores data; two ranks store different parts,
    // which is said, with no numbers (nothing was compared)
    const auto r0 = open("partial/dtensor_rank0.pt");
    const auto r1 = open("partial/dtensor_rank1.pt");
    const DiffReport self = diffCheckpoints(*r0, *r0);
    EXPECT_TRUE(self.equal);
    size_t partial = 0;
    for (const auto& e : self.entries)
        if (e.reason.find("compared where both store it") != std::string::npos) {
            ++partial;
            EXPECT_TRUE(e.valuesCompared) << e.key();
        }
    EXPECT_GT(partial, 10u);
    const DiffReport ranks = diffCheckpoints(*r0, *r1);
    EXPECT_FALSE(ranks.equal);
    size_t different = 0;
    for (const auto& e : ranks.entries)
        if (e.reason.find("store different parts") != std::string::npos) {
            ++different;
            EXPECT_FALSE(e.valuesCompared) << e.key();
            EXPECT_EQ(e.status, DiffStatus::Changed) << e.key();
        }
    EXPECT_GT(different, 10u);

    // both ranks' files together are one checkpoint (torch_save_ranks): every shard in place, no gap, and equal to
    // PyTorch's own DCP save of the same run (fsdp2_r2: same model, seed and steps)
    const auto both = open("partial");
    EXPECT_EQ(both->format, CheckpointFormat::TorchSaveRanks);
    EXPECT_EQ(both->ranks(), (std::vector<int> {0, 1}));
    const CheckReport whole = checkCheckpoint(*both);
    EXPECT_TRUE(whole.clean()) << whole.toJson().dump(1);
    const DiffReport vsDcp = diffCheckpoints(*both, *open("fsdp2_r2"));
    EXPECT_TRUE(vsDcp.equal);
    EXPECT_EQ(vsDcp.entries.size(), both->entries.size());
    // raw FSDP1 optimizer files are per-rank files too, but without DTensors: each stands alone, and unflatten
    // reads them
    try {
        open("fsdp1_raw_r2");
        ADD_FAILURE() << "raw FSDP1 rank files opened as one checkpoint";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unflatten"), std::string::npos) << e.what();
    }

    // a set with a gap (rank1 of 3 lost) names the missing file, not "not a recognised folder"
    {
        TempDir tmp;
        fs::copy_file(kData + "/partial/dtensor_rank0.pt", tmp.path / "dtensor_rank0.pt");
        fs::copy_file(kData + "/partial/dtensor_rank1.pt", tmp.path / "dtensor_rank2.pt");
        try {
            openCheckpoint(tmp.path.string());
            ADD_FAILURE() << "a set with a gap opened";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("dtensor_rank1.pt is missing"), std::string::npos) << e.what();
        }
    }

    // a meta-device tensor stores nothing: equal to itself, a warning in check (not a chunk gap), no hash
    const auto meta = open("partial/meta.pt");
    const DiffReport m = diffCheckpoints(*meta, *meta);
    EXPECT_TRUE(m.equal);
    const CheckReport c = checkCheckpoint(*meta);
    ASSERT_EQ(c.findings.size(), 1u) << c.toJson().dump(1);
    EXPECT_EQ(c.findings[0].code, FindingCode::TensorWithoutData);
    InspectOptions hashed;
    hashed.hash = true;
    const InspectReport ir = inspectCheckpoint(*meta, hashed);
    EXPECT_TRUE(ir.ok);
    for (const auto& e : ir.json["entries"])
        EXPECT_EQ(e["sha256"].is_null(), e["key"] == "meta") << e.dump();
}

TEST(Diff, CancelsAndHandsWorkerExceptionsToTheCaller)
{
    const CheckpointPtr a = open("adam_int.pt"), b = open("adam_int_proto4.pt");
    DiffOptions opt;
    opt.threads = 4;
    Progress cancel;
    cancel.cancelled = [] { return true; };
    try {
        diffCheckpoints(*a, *b, opt, cancel);
        FAIL() << "not cancelled";
    } catch (const Error& err) {
        EXPECT_EQ(err.kind(), ErrorKind::Cancelled);
    }
    // a callback that throws something other than Error on a worker thread: it must reach the caller (before,
    // it escaped the thread and std::terminate ended the process)
    Progress throwing;
    throwing.report = [](double, std::string_view) { throw std::runtime_error("callback failed"); };
    EXPECT_THROW(diffCheckpoints(*a, *b, opt, throwing), std::runtime_error);
}

TEST(Diff, HandsOverEachEntryAsItFinishesWithProgressByElements)
{
    // the GUI fills its table from onEntry while the comparison runs: every entry once, complete, and the progress
    // fraction grows with the elements compared (the largest tensors come first)
    const CheckpointPtr a = open("diff/step3.pt"), b = open("diff/step4.pt");
    DiffOptions opt;
    opt.threads = 3;
    std::mutex m;
    std::vector<DiffEntry> streamed;
    opt.onEntry = [&](const DiffEntry& e) {
        std::lock_guard<std::mutex> lock(m);
        streamed.push_back(e);
    };
    std::vector<double> fractions;
    Progress progress;
    progress.report = [&](double f, std::string_view) { fractions.push_back(f); };
    const DiffReport r = diffCheckpoints(*a, *b, opt, progress);
    ASSERT_EQ(streamed.size(), r.entries.size());
    std::map<std::string, const DiffEntry*> byKey;
    for (const auto& e : r.entries)
        byKey[e.key()] = &e;
    for (const auto& e : streamed) {
        ASSERT_TRUE(byKey.count(e.key())) << e.key();
        EXPECT_EQ(e.status, byKey[e.key()]->status) << e.key();
        EXPECT_EQ(e.numDiff, byKey[e.key()]->numDiff) << e.key();
        byKey.erase(e.key()); // once each
    }
    ASSERT_FALSE(fractions.empty());
    EXPECT_DOUBLE_EQ(fractions.back(), 1.0);
    EXPECT_TRUE(std::is_sorted(fractions.begin(), fractions.end()));
    // the first entry finished is a large tensor: more than its share of the entry count
    EXPECT_GT(fractions.front(), 1.0 / double(r.entries.size()));
    // ranks too
    streamed.clear();
    const DiffReport ranks = diffRanks(*open("fsdp2_r2"), 0, 1, opt);
    EXPECT_EQ(streamed.size(), ranks.entries.size());
}

TEST(Diff, StripsTorchCompilePrefixAndSaysSo)
{
    const DiffReport r = diffCheckpoints(*open("compiled.pt"), *open("adam_step_mismatch.pt"));
    const DiffEntry* e = entry(r, "model._orig_mod.0.weight");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->keyB, "model.0.weight");
    EXPECT_NE(e->match.find("strip '_orig_mod.'"), std::string::npos) << e->match;
    EXPECT_EQ(r.count(DiffStatus::OnlyA) + r.count(DiffStatus::OnlyB), 0u);
}

TEST(Diff, MapsIntegerIdsToFqnsThroughParamNames)
{
    // the optimizer built from named_parameters() of a compiled model: ids, with param_names; against an FQN-keyed
    // re-keying of the same state: ids map through param_names, the prefix is stripped on both sides
    const DiffReport r = diffCheckpoints(*open("diag/compiled_param_names.pt"), *open("diag/compiled_fqn.pt"));
    EXPECT_EQ(r.count(DiffStatus::OnlyA) + r.count(DiffStatus::OnlyB), 0u) << r.toJson().dump().substr(0, 2000);
    EXPECT_TRUE(r.equal);
    bool viaNames = false;
    for (const auto& e : r.entries)
        viaNames = viaNames || e.match.find("param_names") != std::string::npos;
    EXPECT_TRUE(viaNames);
}

TEST(Diff, FlattenedAgainstNestedOptimizerFormat)
{
    // same training recipe (mlp, Adam, two fake steps), one saved nested, one in DSD's flattened format
    const DiffReport r = diffCheckpoints(*open("diag/flattened.pt"), *open("diag/compiled_fqn.pt"));
    EXPECT_EQ(r.count(DiffStatus::OnlyA) + r.count(DiffStatus::OnlyB), 0u) << r.toJson().dump().substr(0, 3000);
    for (const auto& n : r.notes)
        if (n.find("flattened") != std::string::npos) SUCCEED();
}

TEST(Diff, RanksOfOneCheckpoint)
{
    // two ranks of a 2-rank FSDP2 checkpoint hold different rows: every shared tensor differs
    const DiffReport r = diffRanks(*open("fsdp2_r2"), 0, 1);
    EXPECT_FALSE(r.equal);
    EXPECT_GT(r.count(DiffStatus::Changed), 0u);
    // a rank against itself is equal
    EXPECT_TRUE(diffRanks(*open("fsdp2_r2"), 1, 1).equal);
}

TEST(Diff, HistogramOfDifferencesWhenAsked)
{
    DiffOptions o;
    o.histogramBins = 16;
    const DiffReport r = diffCheckpoints(*open("diff/step3.pt"), *open("diff/step4.pt"), o);
    const DiffEntry* e = entry(r, "optim.state.2.weight.exp_avg");
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->histogramCounts.size(), 16u);
    ASSERT_EQ(e->histogramEdges.size(), 17u);
    int64_t total = 0;
    for (auto c : e->histogramCounts)
        total += c;
    EXPECT_EQ(total, e->numel);
}

TEST(Diff, HistogramCountsEveryElementOfEveryChangedTensor)
{
    // the range is max|a-b| taken in float32; the float64 difference of the extreme pair can round above it, and
    // must still land in the outer bin (regression: adam_int vs adam_step_mismatch lost one element of 30)
    DiffOptions o;
    o.histogramBins = 64;
    for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>> {
             {"adam_int.pt", "adam_step_mismatch.pt"}, {"diff/step3.pt", "diff/step4.pt"}}) {
        const DiffReport r = diffCheckpoints(*open(a), *open(b), o);
        size_t checked = 0;
        for (const auto& e : r.entries) {
            if (e.histogramCounts.empty() || e.nanA + e.nanB + e.infA + e.infB > 0)
                continue; // non-finite differences are left out of the histogram by design
            int64_t total = 0;
            for (auto c : e.histogramCounts)
                total += c;
            EXPECT_EQ(total, e.numel) << a << " vs " << b << ": " << e.key();
            ++checked;
        }
        EXPECT_GT(checked, 0u) << a << " vs " << b;
    }
}

// ------------------------------------------------------------------------------------------- diagnose

const DiagnosisFinding* finding(const Diagnosis& d, const std::string& code)
{
    for (const auto& f : d.findings)
        if (std::string(f.name()) == code) return &f;
    return nullptr;
}

Diagnosis diagnose(const std::string& optim, const std::string& model = "diag/model.pt")
{
    const auto cp = open(optim);
    if (model.empty()) return diagnoseCheckpoint(*cp, nullptr);
    const ExpectedParams exp = ExpectedParams::fromCheckpoint(*open(model));
    return diagnoseCheckpoint(*cp, &exp);
}

TEST(Diagnose, AGroupWithoutAKeyItsOwnClassReadsIsFoundWithoutATarget)
{
    // SGD's state dict with 'dampening' deleted from its group (PyTorch 2.6: loads, the first step raises KeyError:
    // 'dampening'): without --target-optim the saved optimizer's own class is the one that loads it
    const Diagnosis d = diagnose(
        "load_cases/sgd_group_without_dampening/optim.pt", "load_cases/sgd_group_without_dampening/model.pt");
    const DiagnosisFinding* f = finding(d, "optimizer-class-mismatch");
    ASSERT_NE(f, nullptr);
    EXPECT_NE(f->pytorchError.find("KeyError: 'dampening'"), std::string::npos) << f->pytorchError;
    ASSERT_FALSE(d.verdicts.empty());
    EXPECT_EQ(d.verdicts[0].path, LoadPath::OptimizerLoadStateDict);
    EXPECT_EQ(d.verdicts[0].outcome, LoadOutcome::Loads);
    EXPECT_EQ(d.verdicts[0].stepAfterLoad, "KeyError");
    // the same SGD's complete state dict: nothing missing
    EXPECT_EQ(finding(diagnose("load_cases/sgd_nesterov/optim.pt", "load_cases/sgd_nesterov/model.pt"),
                  "optimizer-class-mismatch"),
        nullptr);
}

TEST(Diagnose, WithoutATargetALayerReplacedByOneOfOtherShapesFailsTheFirstStep)
{
    // decay / no-decay groups saved FQN-keyed; the model replaces fc1 by a Conv1d fc_in of other shapes (load case
    // replaced_layer_other_shape; PyTorch 2.6: load_state_dict loads 6 of 6, the first step() raises RuntimeError).
    // Without --target-optim the same groups are assumed and rows are compared with the parameter of their name:
    // fc1.weight names none, so it was not compared and the step was said to work (a hunt's Megatron case). It takes
    // the place of a parameter no row names, and none of those has its state's shape.
    const std::string c = "load_cases/replaced_layer_other_shape/";
    const Diagnosis d = diagnose(c + "optim.pt", c + "model.pt");
    ASSERT_FALSE(d.verdicts.empty());
    EXPECT_EQ(d.verdicts[0].path, LoadPath::OptimizerLoadStateDict);
    EXPECT_EQ(d.verdicts[0].outcome, LoadOutcome::Loads);
    EXPECT_EQ(d.verdicts[0].stepAfterLoad, "RuntimeError");
    // a rename to the same shapes still steps (renamed_layer: PyTorch loads and steps)
    const Diagnosis same = diagnose("load_cases/renamed_layer/optim.pt", "load_cases/renamed_layer/model.pt");
    ASSERT_FALSE(same.verdicts.empty());
    EXPECT_EQ(same.verdicts[0].stepAfterLoad, "ok");
}

TEST(Diagnose, StateThatDsdDropsForAFrozenTargetLayerIsNamed)
{
    // saved fully trainable (FQN keys); the target freezes fc1 and its optimizer holds it without state: PyTorch 2.6's
    // set_optimizer_state_dict gives fc1 no state (4 of 6), silently. The verdict says so, and a warning names fc1
    const std::string c = "load_cases/saved_trainable_target_frozen_dsd/";
    const auto cp = open(c + "optim.pt");
    const ExpectedParams exp = ExpectedParams::fromCheckpoint(*open(c + "model.pt"));
    const TargetOptimizer target = TargetOptimizer::fromCheckpoint(*open(c + "target_optim.pt"));
    const Diagnosis d = diagnoseCheckpoint(*cp, &exp, {}, &target);
    const DiagnosisFinding* f = finding(d, "frozen-params");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->keys, (std::vector<std::string> {"fc1.weight", "fc1.bias"}));
    EXPECT_NE(f->message.find("drops theirs"), std::string::npos) << f->message;
    ASSERT_GE(d.verdicts.size(), 2u);
    EXPECT_EQ(d.verdicts[1].path, LoadPath::SetOptimizerStateDict);
    EXPECT_EQ(d.verdicts[1].paramsWithState, 4);
}

TEST(Diagnose, FrozenSavedTrainedInTargetAndAFixThatBreaksALoader)
{
    // fc1 frozen when saved (in the groups, no state), trainable in the target: DSD's set_optimizer_state_dict looks
    // its state up by name (KeyError; diagnose said it loads, found by a hunt). Saved with integer ids, it loads
    // (by position); re-keyed by name, as fix does for id-keyed state, it no longer does: the change says so
    const std::string c = "load_cases/frozen_saved_trained_in_target";
    const ExpectedParams exp = ExpectedParams::fromCheckpoint(*open(c + "/model.pt"));
    const TargetOptimizer target = TargetOptimizer::fromCheckpoint(*open(c + "/target_optim.pt"));
    const Diagnosis byName = diagnoseCheckpoint(*open(c + "/optim.pt"), &exp, {}, &target);
    ASSERT_GE(byName.verdicts.size(), 2u);
    EXPECT_EQ(byName.verdicts[1].path, LoadPath::SetOptimizerStateDict);
    EXPECT_EQ(byName.verdicts[1].outcomeText(), "raises KeyError: 'fc1.weight'");
    const Diagnosis byId = diagnoseCheckpoint(*open(c + "_ids/optim.pt"), &exp, {}, &target);
    EXPECT_EQ(byId.verdicts[1].outcome, LoadOutcome::Loads);
    const DiagnosisChange change = compareDiagnoses(byId, byName);
    ASSERT_EQ(change.broken.size(), 2u); // strict and not
    EXPECT_EQ(change.brokenText().substr(0, 55), "set_optimizer_state_dict raises KeyError: 'fc1.weight';");
    EXPECT_FALSE(change.noErrorsLeft());
    EXPECT_EQ(change.toJson()["broken"][0]["exception"], "KeyError");
}

TEST(Diagnose, WhatAFixChangedByCode)
{
    // before: a gap (error), two step warnings, an info; after: one step warning left and an unreadable chunk new
    Diagnosis before, after;
    before.findings = {Finding(FindingCode::ChunkGap, "gap", "a"), Finding(FindingCode::StepInconsistent, "s", "b"),
        Finding(FindingCode::StepInconsistent, "s", "c"), Finding(FindingCode::IdKeyed, "ids")};
    after.findings = {Finding(FindingCode::StepInconsistent, "s", "renamed.b"), Finding(FindingCode::IdKeyed, "ids"),
        Finding(FindingCode::UnreadableChunk, "bytes", "d")};
    const DiagnosisChange change = compareDiagnoses(before, after);
    ASSERT_EQ(change.resolved.size(), 1u);
    EXPECT_EQ(change.resolved[0].code, FindingCode::ChunkGap);
    ASSERT_EQ(change.remaining.size(), 1u); // infos are not problems: id-keyed is in neither list
    EXPECT_EQ(change.remaining[0].code, FindingCode::StepInconsistent);
    EXPECT_EQ(change.remaining[0].before, 2u);
    EXPECT_EQ(change.remaining[0].after, 1u);
    ASSERT_EQ(change.added.size(), 1u);
    EXPECT_EQ(change.added[0].code, FindingCode::UnreadableChunk);
    EXPECT_FALSE(change.noErrorsLeft());
    EXPECT_EQ(change.toJson()["remaining"][0]["code"], "step-inconsistent");
    after.findings.pop_back();
    EXPECT_TRUE(compareDiagnoses(before, after).noErrorsLeft()); // a warning left is not an error
}

TEST(Diagnose, AlikeFindingsGroup)
{
    // four or more with the same code, loader error and fix are one group; fewer stay one by one, in order
    std::vector<Finding> findings;
    findings.emplace_back(FindingCode::ChunkGap, "gap", "x");
    for (int r = 0; r < 5; ++r) {
        findings.emplace_back(FindingCode::UnreadableChunk, "rank " + std::to_string(r), "w");
        findings.back().fix = "copy it again";
    }
    findings.emplace_back(FindingCode::ChunkGap, "gap", "y");
    findings.emplace_back(FindingCode::UnreadableChunk, "other", "w"); // another fix: not alike
    const auto groups = groupAlikeFindings(findings);
    const std::vector<std::vector<size_t>> want {{0}, {1, 2, 3, 4, 5}, {6}, {7}};
    EXPECT_EQ(groups, want);
    EXPECT_EQ(groupAlikeFindings(findings, 6).size(), findings.size());
}

TEST(Diagnose, TorchCompilePrefix)
{
    for (const char* f : {"diag/compiled_fqn.pt", "diag/compiled_param_names.pt"}) {
        const Diagnosis d = diagnose(f);
        // FQN-keyed: the names are what loaders look up (an error); id-keyed: only param_names (a warning)
        const bool fqnKeyed = std::string(f) == "diag/compiled_fqn.pt";
        const DiagnosisFinding* p = finding(d, fqnKeyed ? "prefix-mismatch" : "param-names-prefix");
        ASSERT_NE(p, nullptr) << f << "\n" << d.toJson().dump(1);
        EXPECT_EQ(p->severity, fqnKeyed ? Severity::Error : Severity::Warning);
        EXPECT_NE(p->message.find("'_orig_mod.'"), std::string::npos) << p->message;
        EXPECT_NE(p->message.find("optimizer's names carry"), std::string::npos) << p->message;
        EXPECT_EQ(p->actions.size(), 4u);
        EXPECT_EQ(p->actions[0].to, "0.weight");
        if (std::string(f) == "diag/compiled_fqn.pt") {
            // FQN-keyed: set_optimizer_state_dict looks the model's names up
            EXPECT_NE(p->pytorchError.find("KeyError: '0.weight'"), std::string::npos) << p->pytorchError;
        } else {
            // id-keyed: optimizer.load_state_dict pairs by position and loads; only the names are wrong
            EXPECT_EQ(p->pytorchError, "") << p->pytorchError;
            ASSERT_FALSE(d.verdicts.empty());
            EXPECT_EQ(d.verdicts[0].path, LoadPath::OptimizerLoadStateDict);
            EXPECT_EQ(d.verdicts[0].outcome, LoadOutcome::Loads);
        }
    }
}

TEST(Diagnose, DdpAndFsdpWrapperPrefixes)
{
    const Diagnosis ddp = diagnose("diag/ddp_param_names.pt");
    ASSERT_NE(finding(ddp, "param-names-prefix"), nullptr);
    EXPECT_NE(finding(ddp, "param-names-prefix")->message.find("'module.'"), std::string::npos);
    const Diagnosis fsdp = diagnose("diag/fsdp1_param_names.pt");
    ASSERT_NE(finding(fsdp, "param-names-prefix"), nullptr);
    EXPECT_NE(finding(fsdp, "param-names-prefix")->message.find("_fsdp_wrapped_module."), std::string::npos);
    // the model side carries the prefix: DDP's own state dict as the reference. set_optimizer_state_dict strips
    // "module." from the model's names itself (torch 2.6 _get_fqns), so plain optimizer names are right as they are
    const Diagnosis other = diagnose("diag/two_groups.pt", "diag/ddp_model.pt");
    EXPECT_EQ(finding(other, "prefix-mismatch"), nullptr) << other.toJson().dump(1);
    EXPECT_EQ(finding(other, "missing-state"), nullptr) << other.toJson().dump(1);
    // both sides wrapped differently: a compiled model's optimizer against a DDP model: strip the optimizer's
    // '_orig_mod.', leave the model's 'module.' to DSD
    const Diagnosis both = diagnose("diag/compiled_fqn.pt", "diag/ddp_model.pt");
    const DiagnosisFinding* b = finding(both, "prefix-mismatch");
    ASSERT_NE(b, nullptr) << both.toJson().dump(1);
    EXPECT_NE(b->message.find("'_orig_mod.'"), std::string::npos) << b->message;
    EXPECT_EQ(b->actions.front().from, "_orig_mod.0.weight");
    EXPECT_EQ(b->actions.front().to, "0.weight");
    EXPECT_EQ(finding(both, "missing-state"), nullptr);
}

TEST(Diagnose, IntegerIdsMapToFqns)
{
    const Diagnosis d = diagnose("adam_int.pt");
    const DiagnosisFinding* f = finding(d, "id-keyed");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(f->actions.size(), 4u);
    EXPECT_EQ(f->actions[3].from, "3");
    EXPECT_EQ(f->actions[3].to, "2.bias");
    EXPECT_EQ(finding(d, "prefix-mismatch"), nullptr);
}

TEST(Diagnose, FrozenParameterHasNoState)
{
    const Diagnosis d = diagnose("sgd_momentum.pt", "");
    const DiagnosisFinding* f = finding(d, "frozen-params");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->severity, Severity::Warning); // both readings: frozen (fine), or never given a gradient
    EXPECT_EQ(f->keys, std::vector<std::string> {"id 1"}); // 0.bias, id 1, requires_grad=False
    EXPECT_EQ(finding(d, "missing-state"), nullptr);
}

TEST(Diagnose, ParamGroupsDifferFromTheReference)
{
    const Diagnosis d = diagnose("diag/two_groups.pt", "diag/one_group.pt");
    const DiagnosisFinding* f = finding(d, "param-groups-mismatch");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->pytorchError.rfind("ValueError: loaded state dict has a different number of parameter groups", 0), 0u)
        << f->pytorchError;
}

TEST(Diagnose, FlattenedFormat)
{
    const Diagnosis d = diagnose("diag/flattened.pt");
    const DiagnosisFinding* f = finding(d, "flattened-format");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->pytorchError, "KeyError: 'param_groups'"); // optimizer.load_state_dict reads param_groups first
    // the format stores no grouping: no conversion without the loading code's optimizer
    EXPECT_TRUE(f->actions.empty());
    EXPECT_NE(f->fix.find("--target-optim"), std::string::npos) << f->fix;
    const auto target = TargetOptimizer::fromCheckpoint(*open("diag/one_group.pt"));
    const Diagnosis withTarget = diagnoseCheckpoint(*open("diag/flattened.pt"), nullptr, {}, &target);
    f = finding(withTarget, "flattened-format");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(f->actions.size(), 1u);
    EXPECT_EQ(f->actions[0].paramGroups.size(), 1u);
}

TEST(Diagnose, FlattenedGroupsAreAGuess)
{
    // torchtitan-style per-parameter groups (10) whose hyperparameters repeat: the 6 groups of equal values are a
    // guess, and the conversion takes the target's 10, by position or by name
    const auto flat = open("torchtitan/flat/groups_1rank");
    const auto views = findOptimizers(*flat);
    ASSERT_EQ(views.size(), 1u);
    EXPECT_TRUE(views[0].groupsGuessed);
    EXPECT_EQ(views[0].groups.size(), 6u);
    EXPECT_EQ(views[0].flatParamHyperparams.size(), 10u);
    for (const char* t : {"torchtitan/flat/target_optim.pt", "torchtitan/flat/target_optim_names.pt"}) {
        const auto target = TargetOptimizer::fromCheckpoint(*open(t));
        const Diagnosis d = diagnoseCheckpoint(*flat, nullptr, {}, &target);
        const DiagnosisFinding* f = finding(d, "flattened-format");
        ASSERT_NE(f, nullptr);
        ASSERT_EQ(f->actions.size(), 1u) << t;
        ASSERT_EQ(f->actions[0].paramGroups.size(), 10u) << t;
        EXPECT_EQ(f->actions[0].paramGroups[1], std::vector<std::string> {"0.bias"}) << t;
    }
    // the model given, no target: a guessed grouping is never compared as if it were stored
    const auto model = ModelParams::modelPartOf(*flat);
    ASSERT_TRUE(model.has_value());
    const Diagnosis d = diagnoseCheckpoint(*flat, &*model);
    EXPECT_EQ(finding(d, "param-groups-mismatch"), nullptr) << d.toJson().dump(1);
}

TEST(Diagnose, OptimizerOverTheTrainableSubsetIsTheFrozenReading)
{
    // real PyTorch (tests/data/frozen/expected.json): each loads into an optimizer over the trainable parameters and
    // raises in one over model.parameters(); diagnose says both as a frozen-params warning, no error
    std::ifstream in(kData + "/frozen/expected.json");
    const auto expected = nlohmann::json::parse(in);
    TempDir tmp;
    const std::string fixed = (tmp.path / "compiled_fixed.pt").string();
    {
        const auto compiled = open("frozen/compiled_sgd.pt");
        const ExpectedParams model = ExpectedParams::fromCheckpoint(*open("frozen/compiled_sgd_model.pt"));
        applyFixes(*compiled, diagnoseCheckpoint(*compiled, &model), fixed);
    }
    for (const auto& [kind, optim] : std::vector<std::pair<std::string, std::string>> {
             {"lbfgs", "frozen/lbfgs.pt"}, {"compiled_sgd", fixed}, {"compiled_sgd", "frozen/compiled_sgd.pt"}}) {
        const ExpectedParams model = ExpectedParams::fromCheckpoint(*open("frozen/" + kind + "_model.pt"));
        const Diagnosis d = diagnoseCheckpoint(optim == fixed ? *openCheckpoint(fixed) : *open(optim), &model);
        for (const auto& f : d.findings)
            EXPECT_NE(f.severity, Severity::Error) << optim << ": " << f.name() << ": " << f.message;
        const DiagnosisFinding* f = finding(d, "frozen-params");
        ASSERT_NE(f, nullptr) << optim;
        EXPECT_EQ(f->pytorchError.rfind(expected[kind]["all"].get<std::string>(), 0), 0u) << f->pytorchError;
        ASSERT_FALSE(d.verdicts.empty());
        EXPECT_EQ(d.verdicts[0].path, LoadPath::OptimizerLoadStateDict);
        EXPECT_EQ(expected[kind]["trainable"], "loads");
        EXPECT_EQ(d.verdicts[0].outcome, LoadOutcome::Loads) << optim;
        if (kind == "compiled_sgd") { // param_names say exactly which are left out
            EXPECT_NE(f->message.find("'0.weight', '0.bias'"), std::string::npos) << f->message;
        }
    }
    // a target optimizer over model.parameters() decides: the error, as PyTorch raises it
    const auto all = TargetOptimizer::fromCheckpoint(*open("frozen/lbfgs.pt"));
    TargetOptimizer over9 = all;
    over9.groupSizes = {9};
    over9.shapes.assign(9, {});
    const ExpectedParams model = ExpectedParams::fromCheckpoint(*open("frozen/lbfgs_model.pt"));
    const Diagnosis d = diagnoseCheckpoint(*open("frozen/lbfgs.pt"), &model, {}, &over9);
    ASSERT_NE(finding(d, "param-groups-mismatch"), nullptr);
    EXPECT_EQ(finding(d, "frozen-params"), nullptr);
}

TEST(Diagnose, ShapesAgainstAWiderModel)
{
    const Diagnosis d = diagnose("diag/compiled_fqn.pt", "diag/model_wide.pt");
    // the names match after stripping _orig_mod., the shapes do not
    const DiagnosisFinding* f = finding(d, "shape-mismatch");
    ASSERT_NE(f, nullptr) << d.toJson().dump(1);
    EXPECT_NE(f->pytorchError.find("must match the size of tensor b"), std::string::npos) << f->pytorchError;
}

TEST(Diagnose, RawFsdp1ShardsAreFlat)
{
    const Diagnosis d = diagnose("fsdp1_raw_r2/optim_rank0.pt", "fsdp1_r2");
    const DiagnosisFinding* f = finding(d, "fsdp1-flat-state");
    ASSERT_NE(f, nullptr);
    EXPECT_NE(f->message.find("raw FSDP1 flat-parameter state"), std::string::npos);
    EXPECT_NE(f->fix.find("optscope-cli unflatten"), std::string::npos);
}

TEST(Diagnose, OneRanksUseOrigParamsSlicesAreNotFrozenOrMisshapen)
{
    // rank 1's raw optimizer.state_dict() of a real 2-rank FSDP1 run with use_orig_params=True
    // (tests/data/load_cases/fsdp1_orig_rank_file, whose load verdicts are checked against PyTorch): 1-D slices,
    // nothing for the parameters wholly on rank 0. That is neither frozen parameters nor another architecture, and
    // re-keying the ids by FQN cannot make it load: the answer is unflatten
    const std::string dir = "load_cases/fsdp1_orig_rank_file/";
    const auto model = openCheckpoint(kData + "/" + dir + "model.pt");
    const ModelParams ref = ModelParams::fromCheckpoint(*model);
    const auto cp = openCheckpoint(kData + "/" + dir + "optim.pt");
    const ParamTable t = ParamTable::build(*cp, &ref, model.get());
    ASSERT_EQ(t.rankSlices.size(), 1u);
    EXPECT_TRUE(t.rankSlices[0]);
    ASSERT_EQ(t.rows.size(), 6u);
    EXPECT_EQ(t.rows[0].fqn, "fc1.weight");
    EXPECT_NE(t.rows[4].note.find("holds 6 of its 6 elements"), std::string::npos) << t.rows[4].note;
    const Diagnosis d = diagnoseCheckpoint(*cp, &ref);
    const DiagnosisFinding* f = finding(d, "fsdp1-flat-state");
    ASSERT_NE(f, nullptr) << d.toJson().dump(1);
    EXPECT_NE(f->message.find("use_orig_params=True"), std::string::npos) << f->message;
    EXPECT_NE(f->fix.find("optscope-cli unflatten"), std::string::npos) << f->fix;
    EXPECT_EQ(finding(d, "frozen-params"), nullptr) << d.toJson().dump(1);
    EXPECT_EQ(finding(d, "shape-mismatch"), nullptr) << d.toJson().dump(1);
    for (const auto& x : d.findings)
        EXPECT_TRUE(x.actions.empty()) << x.name() << ": nothing here can be fixed by renaming or re-keying";
    // a plain optimizer's state of the same model is not taken for slices
    const auto plain = openCheckpoint(kData + "/load_cases/adamw/optim.pt");
    EXPECT_FALSE(ParamTable::build(*plain, &ref, model.get()).rankSlices[0]);
}

TEST(Diagnose, StepFindings)
{
    EXPECT_NE(finding(diagnose("adam_fqn_step_mismatch.pt", ""), "step-inconsistent"), nullptr);
    const Diagnosis d = diagnose("diag/step_int.pt", "");
    const DiagnosisFinding* f = finding(d, "step-dtype");
    ASSERT_NE(f, nullptr);
    EXPECT_FALSE(f->actions.empty());
}

TEST(Diagnose, ADataFileMissingOrOverwrittenFailsEveryLoadPath)
{
    // PyTorch's dcp.load raises CheckpointException for both (FileNotFoundError; "WeightsUnpickler error" for bytes
    // that are not a torch.save archive), before any state is loaded. Diagnose said "loads" for the overwritten file
    // (it read metadata only), and for the missing one compared param_groups that lived in that file: "1 group of
    // [0] parameters ... it is another model"
    const auto modelCp = openCheckpoint(kData + "/fsdp2_r2");
    const ModelParams model = ModelParams::fromCheckpoint(*modelCp);
    for (const bool missing : {true, false}) {
        SCOPED_TRACE(missing ? "missing" : "overwritten");
        TempDir tmp;
        const fs::path dir = tmp.path / "ckpt";
        fs::copy(kData + "/fsdp2_r2", dir);
        const fs::path victim = dir / (missing ? "__1_0.distcp" : "__0_0.distcp");
        if (missing) {
            fs::remove(victim);
        } else {
            const auto size = fs::file_size(victim);
            std::ofstream out(victim, std::ios::binary | std::ios::trunc);
            std::mt19937 gen(7);
            for (uintmax_t i = 0; i < size; ++i)
                out.put(static_cast<char>(gen() & 0xff));
        }
        const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(dir.string()), &model);
        EXPECT_NE(finding(d, missing ? "missing-file" : "unreadable-chunk"), nullptr) << d.toJson().dump(1);
        EXPECT_EQ(finding(d, "param-groups-mismatch"), nullptr) << d.toJson().dump(1);
        ASSERT_EQ(d.verdicts.size(), 5u);
        for (const auto& v : d.verdicts) {
            EXPECT_EQ(v.outcome, LoadOutcome::Raises) << loadPathName(v.path);
            EXPECT_EQ(v.exception, "CheckpointException");
        }
        EXPECT_FALSE(d.notes.empty());
    }
}

TEST(Diagnose, ShardGapOverlapAndEmptyState)
{
    EXPECT_NE(finding(diagnose("diag/dcp_gap", ""), "chunk-gap"), nullptr);
    EXPECT_NE(finding(diagnose("diag/dcp_overlap", ""), "chunk-overlap"), nullptr);
    EXPECT_NE(finding(diagnose("adam_empty_state.pt", ""), "empty-state"), nullptr);
}

// Replicated DTensors saved once per rank whose copies disagree (real DCP writing with deduplication skipped,
// tests/data/diag/dcp_replica_conflict: extra.step 2.0 on rank 0 and 3.0 on rank 1). DCP's metadata keys a chunk's
// storage by key and offsets, so the second copy's location replaces the first's: both listings point to rank 1's
// bytes, which is what dcp.load reads (3.0, checked by the generator). Check says so for each key, and a region
// listed twice is counted once for NaN and inf.
TEST(Check, ReplicatedCopiesListedTwiceAreOneCopyAndCountedOnce)
{
    const auto cp = open("diag/dcp_replica_conflict");
    const CheckReport r = checkCheckpoint(*cp);
    std::map<std::string, std::vector<const Finding*>> byKey;
    for (const auto& f : r.findings)
        byKey[f.key].push_back(&f);
    ASSERT_EQ(byKey.size(), 3u) << r.toJson().dump(1);
    for (const char* key : {"extra.step", "extra.ema", "extra.scale"}) {
        const auto& fs = byKey[key];
        ASSERT_FALSE(fs.empty()) << key;
        EXPECT_EQ(fs[0]->code, FindingCode::ChunkDuplicate) << key;
        EXPECT_NE(fs[0]->message.find("both entries point to rank 1's copy"), std::string::npos) << fs[0]->message;
        EXPECT_EQ(fs[0]->ranks, (std::vector<int> {1, 1})) << key;
    }
    ASSERT_EQ(byKey["extra.scale"].size(), 2u);
    const Finding& nonFinite = *byKey["extra.scale"][1];
    EXPECT_EQ(nonFinite.code, FindingCode::NonFinite);
    const std::vector<std::pair<std::string, int64_t>> once {{"numel", 4}, {"nan", 1}, {"posinf", 1}, {"neginf", 0}};
    EXPECT_EQ(nonFinite.counts, once);
}

TEST(Diagnose, StateThatNoGroupListsIsNamed)
{
    // Adam's state dict with id 3 taken out of its group, its state kept: PyTorch's load_state_dict keeps that state
    // under the raw id 3, where no parameter reads it (tests/fixtures/make_fixtures.py, orphan_state)
    const Diagnosis d = diagnose("adam_orphan_state.pt", "");
    const DiagnosisFinding* f = finding(d, "unexpected-state");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->keys, (std::vector<std::string> {"id 3"}));
    EXPECT_NE(f->message.find("no param_group lists"), std::string::npos) << f->message;
    EXPECT_EQ(finding(diagnose("adam_int.pt", ""), "unexpected-state"), nullptr);
}

TEST(Diagnose, FqnListAsTheModel)
{
    const ExpectedParams exp = ExpectedParams::fromFqnList(kData + "/diag/model_fqns.txt");
    EXPECT_EQ(exp.fqns.size(), 4u);
    EXPECT_EQ(exp.shapes.at("0.weight"), (std::vector<int64_t> {5, 6}));
    const Diagnosis d = diagnoseCheckpoint(*open("diag/compiled_fqn.pt"), &exp);
    EXPECT_NE(finding(d, "prefix-mismatch"), nullptr);
}

// the CLI's --model and the app's reference take the same rule (expectedParamsFrom): a list by its content, whatever
// its name (before: the CLI read a file as a list when the torch.save reader's error message said so, the app when it
// was named .txt or .lst), and a checkpoint as one
TEST(Diagnose, ReferenceIsAnFqnListByContentAndACheckpointOtherwise)
{
    TempDir tmp;
    const std::string noSuffix = (tmp.path / "names").string();
    std::filesystem::copy_file(kData + "/diag/model_fqns.txt", noSuffix);
    for (const std::string& list : {kData + "/diag/model_fqns.txt", noSuffix}) {
        const ExpectedParams exp = expectedParamsFrom(list);
        EXPECT_EQ(exp.fqns, ExpectedParams::fromFqnList(list).fqns) << list;
        EXPECT_EQ(exp.shapes.at("0.weight"), (std::vector<int64_t> {5, 6})) << list;
    }
    const ExpectedParams model = expectedParamsFrom(kData + "/diag/model.pt");
    EXPECT_EQ(model.fqns, ExpectedParams::fromCheckpoint(*open("diag/model.pt")).fqns);
    EXPECT_EQ(expectedParamsFrom(kData + "/fsdp2_r3").fqns, ExpectedParams::fromCheckpoint(*open("fsdp2_r3")).fqns);
    // no checkpoint file's first bytes read as a list: zip, pickle, safetensors, DCP items and metadata, JSON
    for (const char* file : {"diag/model.pt", "fsdp2_r3/.metadata", "fsdp2_r3/__0_0.distcp",
             "hf/single/model.safetensors", "hf/sharded/model.safetensors.index.json", "adam_int_legacy.pt"}) {
        std::ifstream in(kData + "/" + file, std::ios::binary);
        std::string head(4096, '\0');
        in.read(head.data(), static_cast<std::streamsize>(head.size()));
        head.resize(static_cast<size_t>(in.gcount()));
        EXPECT_FALSE(ModelParams::looksLikeFqnList(reinterpret_cast<const uint8_t*>(head.data()), head.size())) << file;
    }
    // a text file that is not a list still says what is wrong with it, naming it
    const std::string bad = (tmp.path / "bad.txt").string();
    std::ofstream(bad) << "layer.weight 3,x\n";
    try {
        expectedParamsFrom(bad);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bad shape '3,x'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("bad.txt"), std::string::npos) << e.what();
    }
}

TEST(Diagnose, CleanCheckpointHasNoErrors)
{
    const Diagnosis d = diagnose("adamw_fqn.pt", "adamw_fqn.pt");
    for (const auto& f : d.findings)
        EXPECT_NE(f.severity, Severity::Error) << f.name() << ": " << f.message;
}

// ------------------------------------------------------------------------------------------- fix

TEST(Fix, StripsPrefixAndReDiagnosesClean)
{
    TempDir tmp;
    const auto cp = open("diag/compiled_fqn.pt");
    const ExpectedParams exp = ExpectedParams::fromCheckpoint(*open("diag/model.pt"));
    const Diagnosis d = diagnoseCheckpoint(*cp, &exp);
    const std::string out = (tmp.path / "fixed.pt").string();
    const FixResult r = applyFixes(*cp, d, out);
    EXPECT_EQ(r.renamedKeys, 4u);
    const auto fixed = openCheckpoint(out);
    const Diagnosis again = diagnoseCheckpoint(*fixed, &exp);
    EXPECT_EQ(finding(again, "prefix-mismatch"), nullptr) << again.toJson().dump(1);
    EXPECT_NE(fixed->find("optim.state.0.weight.exp_avg"), nullptr);
    // values untouched: the fixed file equals the original except for the names
    EXPECT_TRUE(diffCheckpoints(*cp, *fixed).equal);
}

TEST(Fix, ReKeysIdsToFqns)
{
    TempDir tmp;
    const auto cp = open("adam_int.pt");
    const ExpectedParams exp = ExpectedParams::fromCheckpoint(*open("diag/model.pt"));
    const std::string out = (tmp.path / "fqn.pt").string();
    applyFixes(*cp, diagnoseCheckpoint(*cp, &exp), out);
    const auto fixed = openCheckpoint(out);
    const auto views = findOptimizers(*fixed);
    ASSERT_EQ(views.size(), 1u);
    EXPECT_FALSE(views[0].idKeyed);
    EXPECT_EQ(views[0].groupParams(), exp.fqns);
    EXPECT_NE(fixed->find("state.2.bias.exp_avg"), nullptr);
}

TEST(Fix, FlattenedBecomesNested)
{
    TempDir tmp;
    const auto flat = open("diag/flattened.pt");
    const std::string out = (tmp.path / "nested.pt").string();
    // without the target's grouping there is nothing to apply: the format does not store it
    EXPECT_THROW(applyFixes(*flat, diagnoseCheckpoint(*flat, nullptr), out), Error);
    EXPECT_FALSE(std::filesystem::exists(out));
    const auto target = TargetOptimizer::fromCheckpoint(*open("diag/one_group.pt"));
    applyFixes(*flat, diagnoseCheckpoint(*flat, nullptr, {}, &target), out);
    const auto fixed = openCheckpoint(out);
    const auto views = findOptimizers(*fixed);
    ASSERT_EQ(views.size(), 1u);
    EXPECT_FALSE(views[0].flattened);
    ASSERT_EQ(views[0].groups.size(), 1u);
    EXPECT_EQ(views[0].groups[0].params.size(), 4u);
    EXPECT_NE(fixed->find("optim.param_groups.0.lr"), nullptr);
    EXPECT_TRUE(diffCheckpoints(*flat, *fixed).equal);
}

TEST(Fix, StepsBecomeFloat32Tensors)
{
    TempDir tmp;
    const auto cast = open("diag/step_int.pt");
    const std::string out = (tmp.path / "steps.pt").string();
    applyFixes(*cast, diagnoseCheckpoint(*cast, nullptr), out);
    const auto fixed = openCheckpoint(out);
    const Entry* step = fixed->find("state.0.step");
    ASSERT_NE(step, nullptr);
    ASSERT_TRUE(step->isTensor());
    EXPECT_EQ(step->tensor->dtype, DType::Float32);
    EXPECT_TRUE(step->tensor->shape.empty());
    EXPECT_EQ(finding(diagnoseCheckpoint(*fixed, nullptr), "step-dtype"), nullptr);
}

TEST(Fix, DcpInputGivesADcpOutput)
{
    // expected names with DDP's "module." need nothing (DSD strips it); a module renamed by the user (--rename) is
    // applied to every name and written as a new DCP folder
    TempDir tmp;
    const auto cp = open("fsdp2_r3");
    std::ofstream list(tmp.path / "fqns.txt");
    for (const auto& p : findOptimizers(*cp)[0].groupParams())
        list << "module." << p << "\n";
    list.close();
    const ExpectedParams exp = ExpectedParams::fromFqnList((tmp.path / "fqns.txt").string());
    const Diagnosis d = diagnoseCheckpoint(*cp, &exp);
    EXPECT_EQ(finding(d, "prefix-mismatch"), nullptr) << d.toJson().dump(1);
    EXPECT_EQ(finding(d, "missing-state"), nullptr) << d.toJson().dump(1);
    const std::string out = (tmp.path / "fixed").string();
    applyFixes(*cp, d, out, {}, {}, {UserRename::parse("blocks.0=layers.0")});
    const auto fixed = openCheckpoint(out);
    EXPECT_EQ(fixed->format, CheckpointFormat::Dcp);
    EXPECT_NE(fixed->find("optim.state.layers.0.qkv.weight.exp_avg"), nullptr);
    EXPECT_EQ(fixed->find("optim.state.blocks.0.qkv.weight.exp_avg"), nullptr);
    // the model saved beside it gets the DDP model's keys, as the diagnosis proposed (model-keys-mismatch)
    EXPECT_NE(fixed->find("model.module.blocks.0.qkv.weight"), nullptr);
    EXPECT_EQ(fixed->entries.size(), cp->entries.size());
    EXPECT_THROW(UserRename::parse("no-equals"), Error);
    EXPECT_THROW(applyFixes(*cp, d, out + "2", {}, {}, {UserRename::parse("nothing.here=x")}), Error);
}

TEST(Fix, NothingToFixIsAnError)
{
    TempDir tmp;
    const auto cp = open("adamw_fqn.pt");
    EXPECT_THROW(applyFixes(*cp, diagnoseCheckpoint(*cp, nullptr), (tmp.path / "x.pt").string()), Error);
    EXPECT_FALSE(fs::exists(tmp.path / "x.pt"));
}

} // namespace

TEST(Diagnose, CheckAndDiagnoseNeverLoadLibtorch)
{
    // files with nothing to compute must start and finish without libtorch (~0.5 s and 165 MB to load): reading
    // `step` values decodes them in core (ElementDecoder). gtest_discover_tests runs each test in its own process.
    auto atenLoaded = [] {
        std::ifstream maps("/proc/self/maps");
        std::string line;
        while (std::getline(maps, line))
            if (line.find("liboptscope_aten") != std::string::npos) return true;
        return false;
    };
    if (atenLoaded()) GTEST_SKIP() << "an earlier test in this process loaded ATen";
    for (const char* f : {"adam_int.pt", "diag/step_int.pt", "adam_fqn_step_mismatch.pt", "fsdp2_r3"}) {
        const auto cp = open(f);
        checkCheckpoint(*cp);
        const ExpectedParams exp = ExpectedParams::fromCheckpoint(*open("diag/model.pt"));
        diagnoseCheckpoint(*cp, &exp);
    }
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        EXPECT_EQ(line.find("liboptscope_aten"), std::string::npos) << line;
        EXPECT_EQ(line.find("libtorch_cpu"), std::string::npos) << line;
    }
}

TEST(Csv, QuotesAndReportRows)
{
    EXPECT_EQ(CsvWriter::field("plain"), "plain");
    EXPECT_EQ(CsvWriter::field("a,b"), "\"a,b\"");
    EXPECT_EQ(CsvWriter::field("say \"hi\"\n"), "\"say \"\"hi\"\"\n\"");
    // rows written to a stream as they come (diff --csv, verify --csv) are the rows a kept writer holds
    std::ostringstream streamed;
    CsvWriter sink(streamed);
    CsvWriter kept;
    for (CsvWriter* w : {&sink, &kept}) {
        w->row({"=1+1", "a,b", "-0.5"});
        w->row({""});
    }
    EXPECT_EQ(kept.text(), "\"'=1+1\",\"a,b\",-0.5\n\n");
    EXPECT_EQ(streamed.str(), kept.text());
    EXPECT_TRUE(sink.text().empty());
    const DiffReport r = diffCheckpoints(*open("fsdp2_r2"), *open("fsdp2_r3"));
    const std::string csv = r.toCsv();
    size_t rows = 1; // header
    for (const auto& e : r.entries)
        rows += 1 + e.ranks.size();
    EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), rows);
    EXPECT_EQ(csv.rfind("key,key_a,key_b,type,status,reason,numel,num_diff,max_abs_diff", 0), 0u);
    // the parameter table: a header and a row per parameter
    const ParamTable t = ParamTable::build(*open("adam_int.pt"));
    const std::string map = t.toCsv();
    EXPECT_EQ(static_cast<size_t>(std::count(map.begin(), map.end(), '\n')), t.rows.size() + 1);
}

TEST(ParamTable, AModelWithoutAnOrderNamesIdsByShapes)
{
    // one group of integer ids against model.safetensors, which stores no parameter order: the ids are named by
    // matching shapes; the three parameters of shape [3] (0.bias, the LayerNorm's weight and bias) only by the order
    // of their names, which the rows and a note say
    const CheckpointPtr model = open("unordered_model/model.safetensors");
    const ModelParams params = ModelParams::fromCheckpoint(*model);
    ASSERT_FALSE(params.orderKnown);
    const ParamTable t = ParamTable::build(*open("unordered_model/optim.pt"), &params, model.get());
    ASSERT_EQ(t.sources.size(), 1u);
    EXPECT_EQ(t.sources[0], NameSource::ReferenceOrder);
    const std::vector<std::pair<std::string, Confidence>> expected {{"0.weight", Confidence::ShapeUnique},
        {"0.bias", Confidence::OrderAssumed}, {"1.weight", Confidence::OrderAssumed},
        {"1.bias", Confidence::OrderAssumed}, {"2.weight", Confidence::ShapeUnique},
        {"2.bias", Confidence::ShapeUnique}};
    ASSERT_EQ(t.rows.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(t.rows[i].fqn, expected[i].first) << i;
        EXPECT_EQ(t.rows[i].confidence, expected[i].second) << i;
    }
    auto noted = [&](const std::string& text) {
        return std::any_of(
            t.notes.begin(), t.notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
    };
    EXPECT_TRUE(noted("does not record the parameters' order: ids matched by shapes"));
    EXPECT_TRUE(noted("3 of 6 names rest on an assumed order"));
}

TEST(ParamTable, AnOptimizerOverSomeParametersIsNoFlatFsdp1State)
{
    // subset_optim (real PyTorch): a bias-only Adam and an SGD over a learnable temperature keep 1-D states whose
    // size FSDP1 flat parameters would have on 3 and 13 ranks; they were mapped as such, and diff of the bias-only
    // file against its own get_state_dict form saw different keys. PyTorch loads them as plain optimizers.
    for (const auto& [file, fqn] :
        {std::pair<std::string, std::string> {"bias_only.pt", "bias"}, {"temperature.pt", "temp"}}) {
        SCOPED_TRACE(file);
        const ParamTable t = ParamTable::build(*open("subset_optim/" + file));
        ASSERT_EQ(t.sources.size(), 1u);
        EXPECT_NE(t.sources[0], NameSource::Fsdp1Layout);
        ASSERT_EQ(t.rows.size(), 1u);
        EXPECT_EQ(t.rows[0].fqn, fqn);
        EXPECT_EQ(t.rows[0].confidence, Confidence::ShapeUnique);
    }
    const DiffReport d = diffCheckpoints(*open("subset_optim/bias_only.pt"), *open("subset_optim/bias_only_fqn.pt"));
    EXPECT_TRUE(d.equal) << d.toJson().dump().substr(0, 1000);
    // real FSDP1 rank files whose flat shard (15 elements) has the bias's size: their names say the rank, and they
    // are read as flat parameters, weight on ranks 0-2 and bias on rank 3
    {
        const CheckpointPtr fsdp1Model = open("subset_optim/fsdp1_model.pt");
        const ModelParams params = ModelParams::fromCheckpoint(*fsdp1Model);
        const ParamTable t = ParamTable::build(*open("subset_optim/fsdp1_optim_rank0.pt"), &params, fsdp1Model.get());
        ASSERT_EQ(t.sources.size(), 1u);
        EXPECT_EQ(t.sources[0], NameSource::Fsdp1Layout);
        ASSERT_EQ(t.rows.size(), 2u);
        EXPECT_EQ(t.rows[0].fqn, "weight");
        EXPECT_EQ(t.rows[1].fqn, "bias");
        EXPECT_EQ(t.rows[1].note.rfind("on rank 3", 0), 0u) << t.rows[1].note;
    }
    // asked for, the FSDP1 reading is still there (3 ranks: 9 elements, 3 per rank)
    ParamTableOptions fsdp1;
    fsdp1.worldSize = 3;
    const ParamTable t = ParamTable::build(*open("subset_optim/bias_only.pt"), nullptr, nullptr, fsdp1);
    ASSERT_EQ(t.sources.size(), 1u);
    EXPECT_EQ(t.sources[0], NameSource::Fsdp1Layout);
}

TEST(ParamTable, NamesIdsOnceForEveryConsumer)
{
    // param_names win; Lightning's model under "state_dict" names by position; LBFGS keeps state on one parameter;
    // Adafactor's factored state gives the parameter's shape; HF Trainer's decay/no-decay groups are recognised
    const std::string cases = kData + "/load_cases/";
    {
        const ParamTable t = ParamTable::build(*openCheckpoint(cases + "compiled/optim.pt"));
        EXPECT_EQ(t.sources[0], NameSource::ParamNames);
        EXPECT_EQ(t.rows[0].fqn, "_orig_mod.fc1.weight");
        EXPECT_EQ(t.rows[0].normalized, "fc1.weight");
    }
    {
        const ParamTable t = ParamTable::build(*openCheckpoint(cases + "lightning/optim.pt"));
        ASSERT_TRUE(t.modelInFile.has_value());
        EXPECT_EQ(t.sources[0], NameSource::ModelInFile);
        EXPECT_EQ(t.rows[0].fqn, "model.fc1.weight");
    }
    {
        const ParamTable t = ParamTable::build(*openCheckpoint(cases + "lbfgs/optim.pt"));
        EXPECT_EQ(t.kinds[0], OptimizerKind::LBFGS);
        EXPECT_TRUE(optimizerFindings(*openCheckpoint(cases + "lbfgs/optim.pt"), t).size() <= 1u); // id-keyed only
    }
    {
        const ParamTable t = ParamTable::build(*openCheckpoint(cases + "adafactor/optim.pt"));
        EXPECT_EQ(t.kinds[0], OptimizerKind::Adafactor);
        EXPECT_EQ(t.rows[0].shape, (std::vector<int64_t> {3, 4})); // row_var [3, 1] + col_var [1, 4]
    }
    {
        const auto model = openCheckpoint(cases + "hf_trainer/model.pt");
        const ModelParams ref = ModelParams::fromCheckpoint(*model);
        const ParamTable t = ParamTable::build(*openCheckpoint(cases + "hf_trainer/optim.pt"), &ref, model.get());
        EXPECT_EQ(t.sources[0], NameSource::TrainerGroups);
        EXPECT_EQ(t.rows[1].fqn, "fc2.weight");
        EXPECT_EQ(t.rows[2].fqn, "fc1.bias");
        for (const auto& r : t.rows)
            EXPECT_TRUE(r.note.empty()) << r.fqn << ": " << r.note;
    }
}

TEST(Diagnose, ARenamedModuleOfLbfgsIsFoundByNamesAtTheirPositions)
{
    // LBFGS keeps all its state, flat, on the first parameter: no shape says which model module an optimizer module
    // is. The same parameter names at the same positions do (load_cases/lbfgs_renamed_layer, PyTorch's verdicts
    // checked by diagnose.verdicts_match_pytorch, the fix loaded by interop.fixed_load_cases_load_in_pytorch); it was
    // missing-state and extra-params, and fix proposed nothing
    const std::string c = "load_cases/lbfgs_renamed_layer/";
    const Diagnosis d = diagnose(c + "optim.pt", c + "model.pt");
    const DiagnosisFinding* renamed = finding(d, "renamed-params");
    ASSERT_NE(renamed, nullptr);
    EXPECT_EQ(finding(d, "missing-state"), nullptr);
    EXPECT_EQ(finding(d, "extra-params"), nullptr);
    std::vector<std::pair<std::string, std::string>> renames;
    for (const auto& a : renamed->actions)
        renames.emplace_back(a.from, a.to);
    EXPECT_EQ(renames,
        (std::vector<std::pair<std::string, std::string>> {
            {"fc1.bias", "fc_in.bias"}, {"fc1.weight", "fc_in.weight"}}));
}

TEST(ParamTable, CasesUnlikeTheFixturesItWasBuiltOn)
{
    // real PyTorch 2.6 checkpoints (tests/data/load_cases; every load path of each is checked against PyTorch by
    // diagnose.load_cases_vs_pytorch): what a first sweep over unseen checkpoints got wrong
    const std::string cases = kData + "/load_cases/";
    {
        // SGD without momentum keeps no state after any number of steps: a healthy file, not "saved too early"
        const auto cp = openCheckpoint(cases + "sgd_no_momentum/optim.pt");
        const CheckReport r = checkCheckpoint(*cp);
        EXPECT_TRUE(r.clean()) << r.toJson().dump(1);
    }
    {
        // tied weights: the model's state_dict saves head.weight as emb.weight's very tensor; parameters() lists
        // it once, so the 3 ids of optimizer.state_dict() are 3 parameters, not 3 of 4
        const auto model = openCheckpoint(cases + "tied_weights_ids/model.pt");
        const ModelParams ref = ModelParams::fromCheckpoint(*model);
        EXPECT_EQ(ref.fqns, (std::vector<std::string> {"emb.weight", "mid.weight", "mid.bias"}));
        ASSERT_EQ(ref.tiedTo.count("head.weight"), 1u);
        EXPECT_EQ(ref.tiedTo.at("head.weight"), "emb.weight");
        EXPECT_EQ(ref.keys.size(), 4u); // model.load_state_dict still wants all four keys
        const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(cases + "tied_weights_ids/optim.pt"), &ref);
        for (const auto& f : d.findings)
            EXPECT_NE(f.severity, Severity::Error) << f.name() << ": " << f.message;
    }
    {
        // torch.compile(DDP(model)) names "_orig_mod.module.fc1.weight": both wrappers, stripped (they were taken
        // for renamed modules, an error); the optimizer holds no names, so nothing of it needs renaming
        EXPECT_EQ(normalizeFqn("_orig_mod.module.fc1.weight").fqn, "fc1.weight");
        EXPECT_EQ(normalizeFqn("module._orig_mod.fc1.weight").fqn, "fc1.weight");
        EXPECT_EQ(normalizeFqn("blocks.module.weight").fqn, "blocks.module.weight"); // a submodule named "module"
        const auto model = openCheckpoint(cases + "compiled_ddp/model.pt");
        const ModelParams ref = ModelParams::fromCheckpoint(*model);
        const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(cases + "compiled_ddp/optim.pt"), &ref);
        EXPECT_EQ(finding(d, "renamed-params"), nullptr) << d.toJson().dump(1);
        EXPECT_EQ(finding(d, "param-names-prefix"), nullptr) << d.toJson().dump(1);
        const DiagnosisFinding* keys = finding(d, "model-keys-mismatch");
        ASSERT_NE(keys, nullptr);
        EXPECT_FALSE(keys->actions.empty());
    }
    {
        // ids are numbered in param_groups order, here not the model's: named by their unique shapes
        const ParamTable t = ParamTable::build(*openCheckpoint(cases + "groups_not_in_model_order/optim.pt"));
        ASSERT_EQ(t.rows.size(), 6u);
        EXPECT_EQ(t.rows[0].fqn, "fc2.weight");
        EXPECT_EQ(t.rows[1].fqn, "fc2.bias");
        EXPECT_EQ(t.rows[2].fqn, "fc1.weight");
        for (const auto& r : t.rows)
            EXPECT_TRUE(r.note.empty()) << r.fqn << ": " << r.note;
    }
    {
        // a renamed module whose parameters the decay / no-decay groups put apart: renamed as a module
        const auto model = openCheckpoint(cases + "renamed_module_two_groups/model.pt");
        const ModelParams ref = ModelParams::fromCheckpoint(*model);
        const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(cases + "renamed_module_two_groups/optim.pt"), &ref);
        const DiagnosisFinding* f = finding(d, "renamed-params");
        ASSERT_TRUE(f);
        EXPECT_NE(f->message.find("'fc1' -> 'fc_in'"), std::string::npos) << f->message;
        EXPECT_EQ(finding(d, "missing-state"), nullptr);
        EXPECT_EQ(finding(d, "extra-params"), nullptr);
    }
    {
        // what another class's step() raises on the saved groups and states, as PyTorch words it: Adafactor unpacks
        // eps into two (Adam's is a float), Adagrad's state from __init__ is replaced by the saved empty one, a fresh
        // Adamax is told by its groups (found by a hunt: KeyError 'd', KeyError 'lr_decay', and "loads")
        const std::pair<const char*, const char*> cases_[]
            = {{"adam_into_adafactor", "TypeError: cannot unpack non-iterable float object"},
                {"sgd_no_momentum_into_adagrad", "KeyError: 'sum'"}, {"adam_into_fresh_adamax", "KeyError: 'exp_inf'"}};
        for (const auto& [name, error] : cases_) {
            SCOPED_TRACE(name);
            const std::string dir = cases + name + "/";
            const ModelParams ref = ModelParams::fromCheckpoint(*openCheckpoint(dir + "model.pt"));
            const TargetOptimizer target = TargetOptimizer::fromCheckpoint(*openCheckpoint(dir + "target_optim.pt"));
            const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(dir + "optim.pt"), &ref, {}, &target);
            const DiagnosisFinding* f = finding(d, "optimizer-class-mismatch");
            ASSERT_NE(f, nullptr) << d.toJson().dump(1);
            EXPECT_EQ(f->pytorchError.rfind(error, 0), 0u) << f->pytorchError;
        }
        // an Adam file whose groups lost amsgrad stays Adam: its groups alone looked like a fresh Adamax's, and its
        // own class was said to raise KeyError 'exp_inf' (found by a review hunt)
        const std::string dir = cases + "adam_group_without_amsgrad/";
        const ModelParams ref = ModelParams::fromCheckpoint(*openCheckpoint(dir + "model.pt"));
        const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(dir + "optim.pt"), &ref);
        EXPECT_EQ(finding(d, "optimizer-class-mismatch"), nullptr) << d.toJson().dump(1);
        EXPECT_EQ(d.toJson().value("optimizer_kind", ""), "Adam/AdamW");
    }
    {
        // a 0-dim parameter among the trainable ones, frozen matrices left out, int ids: the 0-dim state's shape [] is
        // a shape (it was taken as unknown, fit the frozen 'tail', and a shape-mismatch said the first step() fails)
        const std::string dir = cases + "zero_dim_frozen_left_out_ids/";
        const ModelParams ref = ModelParams::fromCheckpoint(*openCheckpoint(dir + "model.pt"));
        const TargetOptimizer target = TargetOptimizer::fromCheckpoint(*openCheckpoint(dir + "target_optim.pt"));
        for (const TargetOptimizer* t : {&target, static_cast<const TargetOptimizer*>(nullptr)}) {
            const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(dir + "optim.pt"), &ref, {}, t);
            EXPECT_EQ(finding(d, "shape-mismatch"), nullptr) << d.toJson().dump(1);
            if (t) continue; // the target holds as many: nothing is taken as frozen
            const DiagnosisFinding* frozen = finding(d, "frozen-params");
            ASSERT_NE(frozen, nullptr) << d.toJson().dump(1);
            EXPECT_NE(frozen->message.find("'frozen', 'tail'"), std::string::npos) << frozen->message;
        }
    }
    {
        // a layer frozen and left out of the saved optimizer; the target optimizer holds it, without state after its
        // step: frozen when it loads too, which set_optimizer_state_dict skips (it was predicted to raise KeyError)
        const std::string dir = cases + "frozen_left_out_all_target_dsd/";
        const ModelParams ref = ModelParams::fromCheckpoint(*openCheckpoint(dir + "model.pt"));
        const TargetOptimizer target = TargetOptimizer::fromCheckpoint(*openCheckpoint(dir + "target_optim.pt"));
        EXPECT_EQ(target.frozenNames(), (std::set<std::string> {"fc1.weight", "fc1.bias"}));
        const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(dir + "optim.pt"), &ref, {}, &target);
        EXPECT_EQ(finding(d, "missing-state"), nullptr) << d.toJson().dump(1);
        const DiagnosisFinding* frozen = finding(d, "frozen-params");
        ASSERT_NE(frozen, nullptr) << d.toJson().dump(1);
        EXPECT_EQ(frozen->keys, (std::vector<std::string> {"fc1.weight", "fc1.bias"}));
    }
    {
        // heads of one shape inserted in the other order: optimizer.load_state_dict pairs by position and swaps their
        // state without a word (PyTorch loads and steps); the names on both sides say so. A plain case says nothing
        const std::string dir = cases + "same_shape_heads_reordered/";
        const ModelParams ref = ModelParams::fromCheckpoint(*openCheckpoint(dir + "model.pt"));
        const TargetOptimizer target = TargetOptimizer::fromCheckpoint(*openCheckpoint(dir + "target_optim.pt"));
        for (const TargetOptimizer* t : {&target, static_cast<const TargetOptimizer*>(nullptr)}) {
            const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(dir + "optim.pt"), &ref, {}, t);
            const DiagnosisFinding* order = finding(d, "param-order-mismatch");
            ASSERT_NE(order, nullptr) << d.toJson().dump(1);
            EXPECT_EQ(order->keys,
                (std::vector<std::string> {"heads.b.weight", "heads.b.bias", "heads.a.weight", "heads.a.bias"}));
            EXPECT_NE(order->message.find("heads.b.weight <- heads.a.weight"), std::string::npos) << order->message;
        }
        const ModelParams plain = ModelParams::fromCheckpoint(*openCheckpoint(cases + "adamw/model.pt"));
        EXPECT_EQ(
            finding(diagnoseCheckpoint(*openCheckpoint(cases + "adamw/optim.pt"), &plain), "param-order-mismatch"),
            nullptr);
    }
}

TEST(Finding, RegistryIsInDeclarationOrderAndNamesAreUnique)
{
    std::set<std::string> names;
    for (size_t i = 0; i < findingRegistry().size(); ++i) {
        const FindingInfo& f = findingRegistry()[i];
        EXPECT_EQ(static_cast<size_t>(f.code), i) << f.name;
        EXPECT_TRUE(names.insert(f.name).second) << f.name;
        EXPECT_EQ(&findingInfo(f.code), &f);
    }
    EXPECT_EQ(findingRegistry().back().code, FindingCode::NonFinite); // the last enumerator
}

TEST(Diagnose, WithoutAModelWrapperPrefixesAreTheFirstHint)
{
    // a torch.compile'd model's checkpoint: with no model given, Diagnose says its names carry '_orig_mod.' and how
    // to check them (the one finding that points a new user at the reference); a plain checkpoint gets none, and
    // with the model given the comparison findings say it instead
    const Diagnosis compiled = diagnoseCheckpoint(*open("compiled.pt"), nullptr);
    const DiagnosisFinding* f = finding(compiled, "wrapper-prefix");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->severity, Severity::Info);
    EXPECT_NE(f->message.find("'_orig_mod.'"), std::string::npos) << f->message;
    ASSERT_FALSE(f->keys.empty());
    EXPECT_EQ(f->keys.front().rfind("_orig_mod.", 0), 0u) << f->keys.front();
    EXPECT_NE(f->fixText(false).find("Model / reference"), std::string::npos);
    EXPECT_EQ(finding(diagnoseCheckpoint(*open("adamw_fqn.pt"), nullptr), "wrapper-prefix"), nullptr);
    const ModelParams model = ModelParams::fromFqnList(kData + "/diag/model_fqns.txt");
    const Diagnosis against = diagnoseCheckpoint(*open("compiled.pt"), &model);
    EXPECT_EQ(finding(against, "wrapper-prefix"), nullptr);
    EXPECT_NE(finding(against, "model-keys-mismatch"), nullptr);
}

TEST(Check, SparseAdamStepsArePythonIntsByDesign)
{
    // SparseAdam counts steps in a Python int and load_state_dict keeps it one (torch 2.6, checked): no step-dtype
    // (a sweep over real checkpoints found check exiting 1 on every SparseAdam file); an Adam whose steps are ints
    // (saved before torch 1.12) still gets it, as its load casts them
    const auto sparse = checkCheckpoint(*openCheckpoint(kData + "/load_cases/sparse_adam/optim.pt"));
    for (const auto& f : sparse.findings)
        EXPECT_NE(f.code, FindingCode::StepDtype) << f.message;
    const auto legacy = checkCheckpoint(*openCheckpoint(kData + "/diag/step_int.pt"));
    EXPECT_TRUE(std::any_of(legacy.findings.begin(), legacy.findings.end(),
        [](const Finding& f) { return f.code == FindingCode::StepDtype; }));
}

TEST(Diagnose, TargetParameterDtypesAsLoadStateDictCastsThem)
{
    // a float32 Adam state loaded into the same model in bfloat16, float8 and float64; what PyTorch did with each is
    // in tests/data/dtype_targets/expected.json (make_fixtures.py, group dtype_targets)
    std::ifstream in(kData + "/dtype_targets/expected.json");
    const auto expected = nlohmann::json::parse(in);
    const auto optim = open("dtype_targets/adam_fp32.pt");
    auto verdict = [](const Diagnosis& d, LoadPath p) {
        for (const auto& v : d.verdicts)
            if (v.path == p) return v;
        return LoadVerdict {};
    };
    for (const char* name : {"bf16", "fp8", "fp64"}) {
        SCOPED_TRACE(name);
        const auto e = expected[name];
        const ModelParams model
            = ModelParams::fromCheckpoint(*open(std::string("dtype_targets/model_") + name + ".pt"));
        const Diagnosis d = diagnoseCheckpoint(*optim, &model);
        // load_state_dict loads on every path here; a cast that rounds is a warning, float8 an error
        const bool rounds = std::string(name) == "bf16";
        const bool fp8 = std::string(name) == "fp8";
        const DiagnosisFinding* cast = finding(d, "state-dtype-cast");
        EXPECT_EQ(cast != nullptr, rounds);
        if (cast) {
            EXPECT_NE(cast->message.find("float32 -> bfloat16"), std::string::npos) << cast->message;
            EXPECT_EQ(cast->severity, Severity::Warning);
        }
        const DiagnosisFinding* f8 = finding(d, "float8-params");
        ASSERT_EQ(f8 != nullptr, fp8);
        const LoadVerdict p1 = verdict(d, LoadPath::OptimizerLoadStateDict);
        EXPECT_EQ(p1.outcome, LoadOutcome::Loads);
        const std::string step = e["step_after_load"];
        EXPECT_EQ(p1.stepAfterLoad, step == "ok" ? "ok" : step.substr(0, step.find(':')));
        const LoadVerdict p2 = verdict(d, LoadPath::SetOptimizerStateDict);
        const std::string dsd = e["set_optimizer_state_dict"];
        if (dsd == "loads") {
            EXPECT_EQ(p2.outcome, LoadOutcome::Loads);
        } else {
            // PyTorch's text, with the kernel left open (it depends on the optimizer and its settings)
            ASSERT_EQ(p2.outcome, LoadOutcome::Raises);
            EXPECT_EQ(p2.exception, dsd.substr(0, dsd.find(':')));
            const std::string tail = dsd.substr(dsd.find("\" not implemented"));
            EXPECT_NE(p2.message.find(tail), std::string::npos) << p2.message << " vs " << dsd;
            EXPECT_EQ(f8->severity, Severity::Error);
            EXPECT_NE(f8->pytorchError.find(tail), std::string::npos) << f8->pytorchError;
        }
    }
}

TEST(Diagnose, AnOptimizerOfAnotherModelIsNotNamedByThisOne)
{
    // a GAN's file (load_cases/gan_two_optimizers, verdicts from PyTorch): diagnosed against the discriminator, the
    // generator's optimizer does not fit; its ids are not named by the discriminator's order, and its id-keyed
    // finding says so from its fields (idKeyedMessage), not by cutting the named message
    const std::string dir = kData + "/load_cases/gan_two_optimizers/";
    const ModelParams model = ModelParams::fromCheckpoint(*openCheckpoint(dir + "model.pt"));
    const Diagnosis d = diagnoseCheckpoint(*openCheckpoint(dir + "optim.pt"), &model);
    ASSERT_TRUE(d.verdictsFor.has_value());
    EXPECT_EQ(*d.verdictsFor, "disc_opt");
    const Finding* gen = nullptr;
    const Finding* disc = nullptr;
    for (const auto& f : d.findings)
        if (f.code == FindingCode::IdKeyed) (f.key == "gen_opt" ? gen : disc) = &f;
    ASSERT_TRUE(gen && disc);
    EXPECT_EQ(gen->message,
        "optimizer 'gen_opt' is keyed by integer parameter ids (optimizer.state_dict()): loading pairs them with the "
        "optimizer's parameters by position, and nothing checks names");
    EXPECT_TRUE(gen->actions.empty());
    EXPECT_EQ(gen->fix, "diagnose it against its own model to name its ids");
    EXPECT_NE(disc->message.find("; named here by model order"), std::string::npos) << disc->message;
    EXPECT_FALSE(disc->actions.empty());
}

TEST(Diagnose, SeveralOptimizersOverPartsOfOneModel)
{
    // Lightning-layout checkpoints of a GAN (tests/data/multi_optim, make_fixtures.py group multi_optim): two
    // optimizers over parts of one module, diagnosed against the whole module without a target optimizer. Each
    // loads into an optimizer over its part (PyTorch did it, expected.json); they were param-groups-mismatch errors
    std::ifstream in(kData + "/multi_optim/expected.json");
    const auto expected = nlohmann::json::parse(in);
    // a, b, c: as above; d: the discriminator's SGD keeps no state (its part is what the others leave); e: both parts
    // of the same shapes, so which optimizer holds which is a guess, said so, and nothing is re-keyed by it
    for (const char* v : {"a", "b", "c", "d", "e"}) {
        SCOPED_TRACE(v);
        const auto e = expected[v];
        const ModelParams model = ModelParams::fromCheckpoint(*open(std::string("multi_optim/lit_model_") + v + ".pt"));
        const Diagnosis d = diagnoseCheckpoint(*open(std::string("multi_optim/lit_gan_") + v + ".ckpt"), &model);
        for (const auto& f : d.findings)
            EXPECT_NE(f.severity, Severity::Error) << f.name() << ": " << f.message;
        ASSERT_TRUE(d.verdictsFor.has_value());
        EXPECT_EQ(*d.verdictsFor, "optimizer_states.0");
        ASSERT_FALSE(d.verdicts.empty());
        const LoadVerdict& p1 = d.verdicts.front();
        EXPECT_EQ(p1.path, LoadPath::OptimizerLoadStateDict);
        EXPECT_EQ(p1.outcome, LoadOutcome::Loads) << p1.outcomeText();
        EXPECT_EQ(p1.paramsWithState, e["part_0"]["params_with_state"].get<int>());
        EXPECT_EQ(p1.paramsTotal, e["part_0"]["params_total"].get<int>());
        EXPECT_EQ(p1.stepAfterLoad, "ok");
        // the other optimizer's verdict and the parts are in the notes
        const std::string notes = nlohmann::json(d.notes).dump();
        EXPECT_NE(notes.find("'optimizer_states.1' over " + std::to_string(e["part_1"]["params_total"].get<int>())),
            std::string::npos)
            << notes;
        EXPECT_NE(notes.find("optimizer 'optimizer_states.1' into an optimizer over its part: "
                             "optimizer.load_state_dict loads ("
                      + std::to_string(e["part_1"]["params_with_state"].get<int>()) + " of "
                      + std::to_string(e["part_1"]["params_total"].get<int>())),
            std::string::npos)
            << notes;
        if (std::string(v) == "c") {
            EXPECT_NE(notes.find("in none: 'running'"), std::string::npos) << notes;
        }
        const bool guess = std::string(v) == "c" || std::string(v) == "e";
        EXPECT_EQ(notes.find("the names are a guess") != std::string::npos, guess) << notes;
        for (const auto& f : d.findings) {
            if (guess && f.code == FindingCode::IdKeyed) {
                EXPECT_TRUE(f.actions.empty()) << f.key << ": " << f.message;
            }
        }
        // what loading optimizer 0 into an optimizer over the whole module does: the old diagnosis, still right for
        // that target (given with --target-optim)
        EXPECT_NE(e["whole_0"].get<std::string>().find("ValueError"), std::string::npos);
    }
}

TEST(Diagnose, TheAppsWordsNameNoCliOption)
{
    // the desktop app shows fixText(false) and the notes: "give the target optimizer", not "--target-optim" (issue 30
    // item 8). Every load case, with its model and, where there is one, its target optimizer.
    const Pattern cliOption(R"((^|[\s(,`])--[a-z])");
    size_t cases = 0;
    for (const auto& dir : std::filesystem::directory_iterator(kData + "/load_cases")) {
        const std::string d = dir.path().string();
        if (!std::filesystem::exists(d + "/optim.pt") || !std::filesystem::exists(d + "/model.pt")) continue;
        ++cases;
        const auto optim = openCheckpoint(d + "/optim.pt");
        const auto model = openCheckpoint(d + "/model.pt");
        const ModelParams ref = ModelParams::fromCheckpoint(*model);
        std::vector<Diagnosis> runs {diagnoseCheckpoint(*optim, &ref), diagnoseCheckpoint(*optim, nullptr)};
        if (std::filesystem::exists(d + "/target_optim.pt")) {
            const TargetOptimizer target = TargetOptimizer::fromCheckpoint(*openCheckpoint(d + "/target_optim.pt"));
            runs.push_back(diagnoseCheckpoint(*optim, &ref, {}, &target));
        }
        for (const Diagnosis& run : runs) {
            for (const auto& f : run.findings)
                EXPECT_FALSE(cliOption.search(f.fixText(false))) << d << ": " << f.name() << ": " << f.fixText(false);
            for (const auto& n : run.notes)
                EXPECT_FALSE(cliOption.search(n)) << d << ": note: " << n;
        }
    }
    EXPECT_GE(cases, 10u);
}
