// SPDX-License-Identifier: GPL-3.0-or-later
// scanRunFolder (optscope/run_folder.h): a training run's checkpoint folder as the GUI's Watch sees it; RunFollower
// (optscope/analysis/run_follower.h), which both Watch and optscope-cli watch drive.
#include "cli_run.h"
#include "optscope/analysis/run_follower.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/run_folder.h"
#include "optscope/io/storage.h"
#include "optscope/optim/optimizer_kind.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

struct TempDir
{
    fs::path path = fs::temp_directory_path() / ("optscope-run-" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& text)
{
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

std::vector<std::string> names(const std::vector<RunCheckpoint>& v)
{
    std::vector<std::string> out;
    for (const auto& c : v)
        out.push_back(c.name);
    return out;
}

} // namespace

// what every reader lists a folder with: nothing there or a file is no entries; a folder that is there but cannot be
// listed is an error naming it (tests/remote: an object store's 403 and 500), never an empty folder
TEST(ListFolder, NothingThereOrAFileIsEmptyAndAFolderItsSortedEntries)
{
    TempDir dir;
    write(dir.path / "b.pt", "x");
    write(dir.path / "a" / "c.pt", "y");
    const auto entries = listFolder(dir.path.string());
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].name, "a");
    EXPECT_EQ(entries[0].location, (dir.path / "a").string());
    EXPECT_EQ(entries[1].name, "b.pt");
    EXPECT_TRUE(listFolder((dir.path / "b.pt").string()).empty());
    EXPECT_TRUE(listFolder((dir.path / "none").string()).empty());
    try {
        folderEntries((dir.path / "none").string());
        ADD_FAILURE() << "folderEntries of nothing did not throw";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Io);
        EXPECT_EQ(e.file(), (dir.path / "none").string());
    }
}

TEST(RunFolder, StepsInOrderWhateverTheNaming)
{
    TempDir t;
    for (const char* d : {"step_1000", "step_200", "checkpoint-30", "global_step4"})
        write(t.path / d / ".metadata", "x");
    write(t.path / "epoch=1-step=500.ckpt", "x");
    // Lightning's epoch=E-step=S-val_loss=L: the step is S, not the loss's digits (before: 93, then 52, ...)
    write(t.path / "epoch=0-step=100-val_loss=0.93.ckpt", "x");
    write(t.path / "iter_0000450", "x");
    write(t.path / "tmp-checkpoint-700" / "model.safetensors", "x"); // transformers 4.36-4.38, renamed when done
    // per-rank files of one step side by side: the lowest rank's is followed (before: rank 1 compared with rank 0)
    write(t.path / "ckpt_step9_rank0.pt", "x");
    write(t.path / "ckpt_step9_rank1.pt", "x");
    write(t.path / "ckpt_600.pt", "x");
    write(t.path / "latest", "global_step4"); // no number: not a checkpoint
    write(t.path / ".step_700.tmp", "x"); // a writer's temporary name
    write(t.path / "step_800.pt.partial", "x");
    write(t.path / "step_900.pt.tmp", "x");
    const auto runs = scanRunFolder(t.path.string());
    EXPECT_EQ(names(runs),
        (std::vector<std::string> {"global_step4", "ckpt_step9_rank0.pt", "checkpoint-30",
            "epoch=0-step=100-val_loss=0.93.ckpt", "step_200", "iter_0000450", "epoch=1-step=500.ckpt", "ckpt_600.pt",
            "step_1000"}));
    EXPECT_EQ(runs.front().step, 4);
    EXPECT_EQ(runs[3].step, 100);
    EXPECT_EQ(runs[5].step, 450);
    EXPECT_EQ(runs[6].step, 500);
    ASSERT_EQ(runs[1].notes.size(), 1u);
    EXPECT_EQ(
        runs[1].notes[0], "rank 0's file of 2 per-rank files (ckpt_step9_rank*.pt): the other ranks are not followed");
    EXPECT_TRUE(scanRunFolder((t.path / "missing").string()).empty());
}

TEST(RunFolder, SignatureChangesWhileWrittenAndNotAfter)
{
    TempDir t;
    write(t.path / "step_1" / "__0_0.distcp", "abc");
    const uint64_t a = scanRunFolder(t.path.string()).at(0).signature;
    EXPECT_EQ(scanRunFolder(t.path.string()).at(0).signature, a); // nothing changed
    write(t.path / "step_1" / ".metadata", "m"); // DCP writes .metadata last
    const uint64_t b = scanRunFolder(t.path.string()).at(0).signature;
    EXPECT_NE(a, b);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    write(t.path / "step_1" / "__0_0.distcp", "abcdef"); // grows
    EXPECT_NE(scanRunFolder(t.path.string()).at(0).signature, b);
}

TEST(RunFolder, StepCountersAreTheOptimizersStepAndNothingElse)
{
    // what Watch leaves out of its chart: the step of each parameter's optimizer state, in every key style
    EXPECT_TRUE(isStepCounterKey("optim.state.fc.weight.step", 1));
    EXPECT_TRUE(isStepCounterKey("state.3.step", 1));
    EXPECT_TRUE(isStepCounterKey("optimizer.state.blocks.0.attn.qkv.weight.step", 0)); // a Python number
    EXPECT_FALSE(isStepCounterKey("optim.state.fc.weight.exp_avg", 1)); // a 1-element parameter's moment
    EXPECT_FALSE(isStepCounterKey("optim.state.emb.step", 16)); // a tensor, not a counter
    EXPECT_FALSE(isStepCounterKey("model.scheduler.step", 1)); // a model buffer
    EXPECT_FALSE(isStepCounterKey("optim.state.fc.weight.substep", 1));
}

// ---- RunFollower: which step is read next, and what it changed (the GUI's Watch and optscope-cli watch) ----------

namespace {

const std::string kTestData = OPTSCOPE_TEST_DATA;

void copyFixture(const std::string& rel, const fs::path& to)
{
    fs::copy_file(kTestData + "/" + rel, to, fs::copy_options::overwrite_existing);
}

/// @p n looks at the run, as optscope-cli watch takes them: each step read or skipped, in order
std::vector<RunStepSummary> follow(RunFollower& f, int n)
{
    std::vector<RunStepSummary> out;
    for (int i = 0; i < n; ++i) {
        const RunFollower::Next next = f.poll();
        if (next.kind == RunFollower::Next::Skip) out.push_back(f.skip(next));
        if (next.kind != RunFollower::Next::Read) continue;
        try {
            out.push_back(f.accept(next.entry, RunFollower::readStep(next, f.previous(), f.options(), {})));
        } catch (const Error& e) {
            f.failed(next.entry, e.what());
        }
    }
    return out;
}

} // namespace

TEST(RunFollower, ReadsEachStepOnceCompleteWaitsForOneBeingWrittenAndSkipsOneThatNeverOpens)
{
    TempDir t;
    copyFixture("diff/step3.pt", t.path / "ckpt_3.pt");
    RunFollower f(t.path.string());
    EXPECT_EQ(f.poll().kind, RunFollower::Next::Wait); // first seen: not yet known to be complete
    RunFollower::Next n = f.poll();
    ASSERT_EQ(n.kind, RunFollower::Next::Read);
    EXPECT_EQ(n.entry.name, "ckpt_3.pt");
    EXPECT_TRUE(n.newest);
    RunStepSummary s = f.accept(n.entry, RunFollower::readStep(n, f.previous(), f.options(), {}));
    EXPECT_FALSE(s.compared);
    EXPECT_EQ(s.statusText(), "read (" + std::to_string(s.entries) + " entries)");

    // half of step 4: waited for while it changes, tried once stable, waited for while it does not open
    std::string step4;
    {
        std::ifstream in(kTestData + "/diff/step4.pt", std::ios::binary);
        step4.assign(std::istreambuf_iterator<char>(in), {});
    }
    write(t.path / "ckpt_4.pt", step4.substr(0, step4.size() / 2));
    n = f.poll();
    EXPECT_EQ(n.kind, RunFollower::Next::Wait);
    EXPECT_EQ(n.reason, "ckpt_4.pt is new: read once its files rest until the next look");
    n = f.poll();
    ASSERT_EQ(n.kind, RunFollower::Next::Read);
    EXPECT_THROW(RunFollower::readStep(n, f.previous(), f.options(), {}), Error);
    f.failed(n.entry, "cut short");
    n = f.poll();
    EXPECT_EQ(n.kind, RunFollower::Next::Wait);
    EXPECT_EQ(n.reason, "ckpt_4.pt does not open yet (cut short)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    write(t.path / "ckpt_4.pt", step4);
    n = f.poll();
    EXPECT_EQ(n.kind, RunFollower::Next::Wait); // changed
    EXPECT_EQ(n.reason, "ckpt_4.pt is still being written");
    n = f.poll();
    ASSERT_EQ(n.kind, RunFollower::Next::Read);
    s = f.accept(n.entry, RunFollower::readStep(n, f.previous(), f.options(), {}));
    ASSERT_TRUE(s.compared);
    EXPECT_EQ(s.step, 4);
    EXPECT_GT(s.changed, 0u);
    EXPECT_EQ(s.statusText(),
        std::to_string(s.changed) + " of " + std::to_string(s.entries) + " keys changed from the step before");
    // the most changed, as the core's comparison of the two files says; step counters left out
    const DiffReport reference = diffCheckpoints(
        *openCheckpoint(kTestData + "/diff/step4.pt"), *openCheckpoint(kTestData + "/diff/step3.pt"), DiffOptions {});
    double most = 0;
    for (const auto& e : reference.entries)
        if (e.tensor && !isStepCounterKey(e.key(), e.numel)) most = std::max(most, e.maxAbsDiff);
    ASSERT_FALSE(s.top.empty());
    EXPECT_EQ(s.top.front().second, most);
    for (const auto& [key, value] : s.top)
        EXPECT_FALSE(isStepCounterKey(key, 1)) << key;
    ASSERT_EQ(f.series().count("model.0.weight"), 1u);
    EXPECT_EQ(f.series().at("model.0.weight").front().first, 4);

    // a broken step 5 is skipped once step 6 is complete; step 6 is then compared with step 4
    write(t.path / "ckpt_5.pt", "not a checkpoint");
    copyFixture("diff/step3.pt", t.path / "ckpt_6.pt");
    EXPECT_EQ(f.poll().kind, RunFollower::Next::Wait);
    n = f.poll();
    ASSERT_EQ(n.kind, RunFollower::Next::Read);
    EXPECT_EQ(n.entry.name, "ckpt_5.pt");
    EXPECT_FALSE(n.newest); // ckpt_6 is complete too
    f.failed(n.entry, "not a torch.save file");
    n = f.poll();
    ASSERT_EQ(n.kind, RunFollower::Next::Skip);
    s = f.skip(n);
    EXPECT_EQ(s.statusText(), "skipped: not a torch.save file");
    n = f.poll();
    ASSERT_EQ(n.kind, RunFollower::Next::Read);
    EXPECT_EQ(n.entry.name, "ckpt_6.pt");
    EXPECT_EQ(f.previousPath(), (t.path / "ckpt_4.pt").string());
    EXPECT_EQ(f.poll().kind, RunFollower::Next::Read); // not accepted yet: asked again
}

// a run that removes or replaces the step read last (a Trainer's save_total_limit, a rename over it): the next step
// is compared with it as it was read (before: "removed while being read" for every later step, none read again)
TEST(RunFollower, TheStepReadLastIsComparedAsReadAfterTheRunRemovesOrReplacesIt)
{
    TempDir t;
    const auto readNext = [](RunFollower& f) {
        RunFollower::Next n = f.poll();
        if (n.kind == RunFollower::Next::Wait) n = f.poll();
        EXPECT_EQ(n.kind, RunFollower::Next::Read) << n.reason;
        return f.accept(n.entry, RunFollower::readStep(n, f.previous(), f.options(), {}));
    };
    copyFixture("diff/step3.pt", t.path / "ckpt_3.pt");
    RunFollower f(t.path.string());
    EXPECT_FALSE(readNext(f).compared);
    copyFixture("diff/step4.pt", t.path / "ckpt_4.pt");
    fs::remove(t.path / "ckpt_3.pt"); // rotated away
    RunStepSummary s = readNext(f);
    EXPECT_EQ(s.name, "ckpt_4.pt");
    ASSERT_TRUE(s.compared) << s.statusText();
    EXPECT_GT(s.changed, 0u);
    EXPECT_TRUE(s.notes.empty()) << s.statusText();
    // replaced by a rename (another file of the same bytes), then step 5 comes
    copyFixture("diff/step3.pt", t.path / "ckpt_5.pt");
    copyFixture("diff/step4.pt", t.path / "replacement.tmp");
    fs::rename(t.path / "replacement.tmp", t.path / "ckpt_4.pt");
    f.poll(); // the replacement is seen ...
    s = readNext(f); // ... and at rest: it is read again, as the run wrote it again
    EXPECT_EQ(s.name, "ckpt_4.pt");
    EXPECT_FALSE(s.compared); // nothing before it is left to compare with
    ASSERT_FALSE(s.notes.empty());
    EXPECT_EQ(s.notes[0].rfind("read again: its files changed after it was read", 0), 0u) << s.notes[0];
    s = readNext(f);
    EXPECT_EQ(s.name, "ckpt_5.pt");
    EXPECT_TRUE(s.compared) << s.statusText();
}

// a run resumed from an earlier step writes the steps after it again: they are read again, compared with the step
// before them (before: dropped without a word)
TEST(RunFollower, StepsTheRunWritesAgainAreReadAgainFromTheStepBeforeThem)
{
    TempDir t;
    copyFixture("diff/step3.pt", t.path / "ckpt_3.pt");
    copyFixture("diff/step4.pt", t.path / "ckpt_4.pt");
    copyFixture("diff/step3.pt", t.path / "ckpt_5.pt");
    RunFollower f(t.path.string());
    std::vector<RunStepSummary> read = follow(f, 8);
    ASSERT_EQ(read.size(), 3u);
    EXPECT_EQ(f.series().at("model.0.weight").size(), 2u);
    // resumed at step 3: steps 4 and 5 written again, in place
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    copyFixture("diff/step3.pt", t.path / "ckpt_4.pt");
    copyFixture("diff/step4.pt", t.path / "ckpt_5.pt");
    read = follow(f, 8);
    ASSERT_EQ(read.size(), 2u);
    EXPECT_EQ(read[0].name, "ckpt_4.pt");
    ASSERT_TRUE(read[0].compared);
    EXPECT_EQ(read[0].changed, 0u); // the new step 4 is step 3's bytes: compared with step 3, not the old step 5
    EXPECT_EQ(read[0].notes.at(0).rfind("read again", 0), 0u);
    EXPECT_EQ(read[1].name, "ckpt_5.pt");
    EXPECT_GT(read[1].changed, 0u);
    // the series holds the run as it is now: one point per step
    const auto& points = f.series().at("model.0.weight");
    ASSERT_EQ(points.size(), 2u);
    EXPECT_EQ(points[0].first, 4);
    EXPECT_EQ(points[1].first, 5);
    // resumed again from the start: step 3 written again; steps 4 and 5 are still the old run's until it writes them
    // again, and are not compared with the new step 3 (before: old step 4 against new step 3, no note)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    copyFixture("diff/step4.pt", t.path / "ckpt_3.pt");
    read = follow(f, 8);
    ASSERT_EQ(read.size(), 1u);
    EXPECT_EQ(read[0].name, "ckpt_3.pt");
    EXPECT_FALSE(read[0].compared); // nothing before it
}

// the step read last emptied in place, then the next step: the emptied one is read again and skipped, saying so;
// the next is compared with the last step read, saying which (before: compared with it silently, and carrying the
// "read again" note of the step skipped)
TEST(RunFollower, AStepEmptiedAfterItWasReadIsSkippedAndTheNextSaysWhatItIsComparedWith)
{
    TempDir t;
    copyFixture("diff/step3.pt", t.path / "ckpt_3.pt");
    copyFixture("diff/step4.pt", t.path / "ckpt_4.pt");
    RunFollower f(t.path.string());
    ASSERT_EQ(follow(f, 6).size(), 2u);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fs::resize_file(t.path / "ckpt_4.pt", 0);
    copyFixture("diff/step3.pt", t.path / "ckpt_5.pt");
    const std::vector<RunStepSummary> out = follow(f, 8);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].name, "ckpt_4.pt");
    EXPECT_TRUE(out[0].skipped);
    ASSERT_FALSE(out[0].notes.empty());
    EXPECT_EQ(out[0].notes[0].rfind("read again", 0), 0u);
    EXPECT_EQ(out[1].name, "ckpt_5.pt");
    ASSERT_TRUE(out[1].compared) << out[1].statusText();
    EXPECT_EQ(out[1].changed, 0u); // step 5 is step 3's bytes
    EXPECT_EQ(out[1].notes, (std::vector<std::string> {"compared with ckpt_3.pt, the last step read"}));
}

// the step read last changed in place after it was read: the next step is read, said not compared, and why
TEST(RunFollower, AStepBeforeThatChangedInPlaceLeavesTheNextReadButNotCompared)
{
    TempDir t;
    copyFixture("diff/step3.pt", t.path / "ckpt_3.pt");
    copyFixture("diff/step4.pt", t.path / "ckpt_4.pt");
    RunFollower::Next first;
    first.entry.path = (t.path / "ckpt_3.pt").string();
    const CheckpointPtr held = RunFollower::readStep(first, nullptr, {}, {}).checkpoint;
    fs::resize_file(t.path / "ckpt_3.pt", fs::file_size(t.path / "ckpt_3.pt") / 2); // the same file, cut in place
    RunFollower::Next second;
    second.entry.path = (t.path / "ckpt_4.pt").string();
    const RunFollower::StepRead r = RunFollower::readStep(second, held, {}, {});
    EXPECT_FALSE(r.compared);
    ASSERT_EQ(r.notes.size(), 1u);
    EXPECT_EQ(r.notes[0].rfind("not compared: the step before it changed after it was read (", 0), 0u) << r.notes[0];
    EXPECT_NE(r.notes[0].find("ckpt_3.pt"), std::string::npos) << r.notes[0];
}

// a Trainer writes checkpoint-N/ in parts, its trainer_state.json last: the folder is waited for until then (before:
// read at the first rest, model only, and never again), and read as it is once a later step is complete
TEST(RunFollower, ATrainerFolderIsCompleteWithItsTrainerState)
{
    TempDir t;
    const fs::path source = kTestData + "/hf/checkpoint-3";
    const auto copyTrainer = [&](const fs::path& to, bool withState) {
        fs::create_directories(to);
        for (const auto& e : fs::directory_iterator(source))
            if (withState || e.path().filename() != "trainer_state.json")
                fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing);
    };
    copyTrainer(t.path / "checkpoint-1", false);
    RunFollower f(t.path.string());
    f.poll();
    RunFollower::Next n = f.poll();
    EXPECT_EQ(n.kind, RunFollower::Next::Wait);
    EXPECT_EQ(n.reason, "checkpoint-1 has no trainer_state.json yet (the Trainer writes it last)");
    fs::copy_file(source / "trainer_state.json", t.path / "checkpoint-1" / "trainer_state.json");
    EXPECT_EQ(f.poll().kind, RunFollower::Next::Wait); // changed
    n = f.poll();
    ASSERT_EQ(n.kind, RunFollower::Next::Read);
    RunStepSummary s = f.accept(n.entry, RunFollower::readStep(n, f.previous(), f.options(), {}));
    // the Trainer's optimizer ids are named by an assumed order here, as check and diff say (before: not in watch)
    ASSERT_EQ(s.notes.size(), 1u) << s.statusText();
    EXPECT_EQ(s.notes[0].rfind("param-order-assumed: 14 of the names", 0), 0u) << s.notes[0];
    // a save that never finished, then a complete one
    copyTrainer(t.path / "checkpoint-2", false);
    copyTrainer(t.path / "checkpoint-3", true);
    f.poll();
    n = f.poll();
    ASSERT_EQ(n.kind, RunFollower::Next::Read);
    EXPECT_EQ(n.entry.name, "checkpoint-2");
    s = f.accept(n.entry, RunFollower::readStep(n, f.previous(), f.options(), {}));
    ASSERT_GE(s.notes.size(), 1u) << s.statusText();
    EXPECT_EQ(s.notes[0],
        "read though it has no trainer_state.json yet (the Trainer writes it last): a later step is complete");
    // trainer_state.* only in the step before, the rest the same bytes: no value changed
    EXPECT_EQ(s.changed, 0u) << s.statusText();
    EXPECT_GT(s.gone, 0u) << s.statusText();
    // a staging folder (transformers 4.36-4.38) is no step
    copyTrainer(t.path / "tmp-checkpoint-4", true);
    n = f.poll();
    ASSERT_EQ(n.kind, RunFollower::Next::Read);
    EXPECT_EQ(n.entry.name, "checkpoint-3");
    f.accept(n.entry, RunFollower::readStep(n, f.previous(), f.options(), {}));
    EXPECT_EQ(f.poll().kind, RunFollower::Next::Wait);
}

// a step uploaded out of order (aws s3 sync sends small files first): keys not there yet and data not readable
// yet are said as such, not counted as changed (before: 53 of 59 and 39 of 39 "changed", every max |Δ| 0)
TEST(RunFollower, KeysMissingOrUnreadableInAStepAreNotCountedAsChanged)
{
    TempDir t;
    const fs::path trainer = kTestData + "/hf/checkpoint-3";
    for (const char* name : {"checkpoint-1", "checkpoint-2"}) {
        fs::create_directories(t.path / "hf" / name);
        for (const auto& e : fs::directory_iterator(trainer))
            if (std::string(name) == "checkpoint-1" || e.path().filename() != "optimizer.pt")
                fs::copy_file(e.path(), t.path / "hf" / name / e.path().filename());
    }
    RunFollower hf((t.path / "hf").string());
    std::vector<RunStepSummary> read = follow(hf, 4);
    ASSERT_EQ(read.size(), 2u);
    EXPECT_EQ(read[1].changed, 0u) << read[1].statusText();
    EXPECT_GT(read[1].gone, 10u) << read[1].statusText();
    EXPECT_NE(read[1].statusText().find("0 of " + std::to_string(read[1].entries)
                  + " keys changed from the step before, " + std::to_string(read[1].gone) + " only in the step before"),
        std::string::npos)
        << read[1].statusText();

    for (const char* name : {"step_1", "step_2"}) {
        fs::create_directories(t.path / "dcp" / name);
        fs::copy(kTestData + "/fsdp2_r2", t.path / "dcp" / name, fs::copy_options::recursive);
    }
    fs::remove(t.path / "dcp" / "step_2" / "__1_0.distcp");
    RunFollower dcp((t.path / "dcp").string());
    read = follow(dcp, 4);
    ASSERT_EQ(read.size(), 2u);
    EXPECT_EQ(read[1].changed, 0u) << read[1].statusText();
    EXPECT_GT(read[1].unreadable, 0u) << read[1].statusText();
    EXPECT_NE(
        read[1].statusText().find(std::to_string(read[1].unreadable) + " unreadable (not compared)"), std::string::npos)
        << read[1].statusText();
}

TEST(CliWatch, OnceReadsTheCompleteStepsAsJsonLinesOrText)
{
    TempDir t;
    const fs::path run = t.path / "run";
    fs::create_directories(run);
    copyFixture("diff/step3.pt", run / "ckpt_3.pt");
    copyFixture("diff/step4.pt", run / "ckpt_4.pt");
    write(run / "ckpt_5.pt", "not a checkpoint");
    copyFixture("diff/step3.pt", run / "ckpt_6.pt");
    CliResult r = runCli(t.path, "watch --once --json --interval 0.05 '" + run.string() + "'");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    std::vector<nlohmann::json> lines;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
        lines.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(lines.size(), 4u) << r.out;
    EXPECT_EQ(lines[0]["status"], "read");
    EXPECT_EQ(lines[1]["status"], "compared");
    EXPECT_EQ(lines[1]["step"], 4);
    EXPECT_GT(lines[1]["changed"].get<int>(), 0);
    ASSERT_EQ(lines[1]["top"].size(), 3u);
    EXPECT_FALSE(isStepCounterKey(lines[1]["top"][0]["key"].get<std::string>(), 1));
    EXPECT_EQ(lines[2]["status"], "skipped");
    EXPECT_NE(lines[2]["reason"].get<std::string>().find("ckpt_5.pt"), std::string::npos) << lines[2];
    EXPECT_EQ(lines[3]["name"], "ckpt_6.pt");
    r = runCli(t.path, "watch --once --interval 0.05 --top 1 '" + run.string() + "'");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.out.find("step 4  ckpt_4.pt: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("keys changed from the step before; most changed: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("step 5  ckpt_5.pt: skipped: "), std::string::npos) << r.out;
    EXPECT_EQ(runCli(t.path, "watch").exitCode, 2);
}
