// SPDX-License-Identifier: GPL-3.0-or-later
// scanRunFolder (optscope/run_folder.h): a training run's checkpoint folder as the GUI's Watch sees it.
#include "optscope/formats/run_folder.h"
#include "optscope/optim/optimizer_kind.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
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

TEST(RunFolder, StepsInOrderWhateverTheNaming)
{
    TempDir t;
    for (const char* d : {"step_1000", "step_200", "checkpoint-30", "global_step4"})
        write(t.path / d / ".metadata", "x");
    write(t.path / "epoch=1-step=500.ckpt", "x");
    write(t.path / "ckpt_600.pt", "x");
    write(t.path / "latest", "global_step4"); // no number: not a checkpoint
    write(t.path / ".step_700.tmp", "x"); // a writer's temporary name
    write(t.path / "step_800.pt.partial", "x");
    write(t.path / "step_900.pt.tmp", "x");
    const auto runs = scanRunFolder(t.path.string());
    EXPECT_EQ(names(runs),
        (std::vector<std::string> {
            "global_step4", "checkpoint-30", "step_200", "epoch=1-step=500.ckpt", "ckpt_600.pt", "step_1000"}));
    EXPECT_EQ(runs.front().step, 4);
    EXPECT_EQ(runs[3].step, 500);
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
