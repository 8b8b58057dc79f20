// SPDX-License-Identifier: GPL-3.0-or-later
// The job of a run started by torchrun or srun: how the environment is read, how work is split, and that a job of
// one is exactly one process; and CancelScope, how a cancel reaches the waits of a job's threads. Several real
// processes: tests/job/job_test.py.
#include "optscope/base/error.h"
#include "optscope/base/progress.h"
#include "optscope/io/job.h"

#include <gtest/gtest.h>
#include <thread>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

using namespace optscope;

namespace {

const char* const kJobVariables[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT",
    "OPTSCOPE_JOB_TIMEOUT", "OPTSCOPE_JOB_STALL_TIMEOUT", "LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS"};

/// sets the variables for one test and restores the process's environment afterwards
class Environment
{
public:
    explicit Environment(const std::map<std::string, std::string>& vars)
    {
        for (const char* name : kJobVariables) {
            if (const char* v = std::getenv(name)) m_saved[name] = v;
            ::unsetenv(name);
        }
        for (const auto& [k, v] : vars)
            ::setenv(k.c_str(), v.c_str(), 1);
    }
    ~Environment()
    {
        for (const char* name : kJobVariables)
            ::unsetenv(name);
        for (const auto& [k, v] : m_saved)
            ::setenv(k.c_str(), v.c_str(), 1);
    }

private:
    std::map<std::string, std::string> m_saved;
};

std::string usageError(const std::map<std::string, std::string>& vars)
{
    Environment env(vars);
    try {
        jobSpecFromEnvironment();
    } catch (const Error& e) {
        return e.kind() == ErrorKind::Usage ? e.detail() : "not a usage error: " + e.detail();
    }
    return "no error";
}

} // namespace

TEST(Job, NoVariablesIsOneProcess)
{
    Environment env({});
    const JobSpec s = jobSpecFromEnvironment();
    EXPECT_EQ(s.size, 1);
    EXPECT_EQ(s.rank, 0);
    EXPECT_TRUE(s.launcher.empty());
}

TEST(Job, TorchrunVariables)
{
    Environment env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"},
        {"MASTER_PORT", "29500"}, {"OPTSCOPE_JOB_TIMEOUT", "2.5"}});
    const JobSpec s = jobSpecFromEnvironment();
    EXPECT_EQ(s.launcher, "torchrun");
    EXPECT_EQ(s.rank, 3);
    EXPECT_EQ(s.size, 8);
    EXPECT_EQ(s.localRank, 1);
    EXPECT_EQ(s.masterAddr, "node7");
    EXPECT_EQ(s.masterPort, 29500);
    EXPECT_EQ(s.timeout.count(), 2500);
    EXPECT_EQ(s.stallTimeout.count(), 600000); // the default
    EXPECT_FALSE(s.agentStore);
    EXPECT_EQ(s.localSize, 1); // not said: alone on its machine
}

TEST(Job, StallTimeoutIsAtLeastTheTimeout)
{
    const std::map<std::string, std::string> job {
        {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
    auto with = [&](std::map<std::string, std::string> more) {
        more.insert(job.begin(), job.end());
        Environment env(more);
        return jobSpecFromEnvironment();
    };
    EXPECT_EQ(with({{"OPTSCOPE_JOB_STALL_TIMEOUT", "90.5"}}).stallTimeout.count(), 90500);
    // a stall shorter than the silence that declares a process gone would call a slow beat a hang
    EXPECT_EQ(with({{"OPTSCOPE_JOB_TIMEOUT", "30"}, {"OPTSCOPE_JOB_STALL_TIMEOUT", "5"}}).stallTimeout.count(), 30000);
}

TEST(Job, ProcessesOnOneMachineAreCountedForThreadPools)
{
    {
        Environment env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "4"},
            {"MASTER_ADDR", "n"}, {"MASTER_PORT", "29500"}});
        EXPECT_EQ(jobSpecFromEnvironment().localSize, 4);
    }
    {
        Environment env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_TASKS_PER_NODE", "8(x2)"},
            {"MASTER_ADDR", "n"}, {"MASTER_PORT", "29500"}});
        EXPECT_EQ(jobSpecFromEnvironment().localSize, 8);
    }
    {
        Environment env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_NTASKS_PER_NODE", "2"},
            {"SLURM_TASKS_PER_NODE", "8(x2)"}, {"MASTER_ADDR", "n"}, {"MASTER_PORT", "29500"}});
        EXPECT_EQ(jobSpecFromEnvironment().localSize, 2);
    }
    // a job of one process uses every core
    EXPECT_EQ(Job::current().threadsPerProcess(), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(Job, TorchrunAgentStorePutsKeysUnderTheAttempt)
{
    Environment env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
        {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}});
    const JobSpec s = jobSpecFromEnvironment();
    EXPECT_TRUE(s.agentStore);
    EXPECT_EQ(s.keyPrefix, "/worker/attempt_2/");
}

TEST(Job, SlurmVariablesCountOnlyWithMasterPort)
{
    {
        // a batch script's own shell has SLURM_NTASKS too: one process
        Environment env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}});
        EXPECT_EQ(jobSpecFromEnvironment().size, 1);
    }
    {
        // a step of one task (srun -n 1 inside a larger allocation): one process
        Environment env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_NUM_TASKS", "1"}});
        EXPECT_EQ(jobSpecFromEnvironment().size, 1);
    }
    // srun -n 4 without MASTER_PORT: four copies of the whole command on one output; refused, saying what to give
    const std::string many = usageError({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_NUM_TASKS", "4"}});
    EXPECT_NE(many.find("srun started this command as 4 tasks"), std::string::npos) << many;
    EXPECT_NE(many.find("MASTER_PORT"), std::string::npos) << many;
    Environment env({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}, {"MASTER_ADDR", "n0"},
        {"MASTER_PORT", "29501"}});
    const JobSpec s = jobSpecFromEnvironment();
    EXPECT_EQ(s.launcher, "slurm");
    EXPECT_EQ(s.rank, 2);
    EXPECT_EQ(s.size, 4);
}

TEST(Job, WorldOfOneNeedsNoStore)
{
    Environment env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
    EXPECT_EQ(jobSpecFromEnvironment().size, 1);
}

TEST(Job, BadVariablesAreUsageErrorsNamingThem)
{
    EXPECT_NE(usageError({{"RANK", "0"}}).find("WORLD_SIZE"), std::string::npos);
    EXPECT_NE(usageError({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})
                  .find("rank 4 is not below the job's size 4"),
        std::string::npos);
    EXPECT_NE(
        usageError({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}).find("MASTER_ADDR"), std::string::npos);
    EXPECT_NE(usageError({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})
                  .find("MASTER_PORT"),
        std::string::npos);
    EXPECT_NE(usageError({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK must be an integer"), std::string::npos);
    EXPECT_NE(usageError({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                             {"OPTSCOPE_JOB_TIMEOUT", "0"}})
                  .find("OPTSCOPE_JOB_TIMEOUT"),
        std::string::npos);
    EXPECT_NE(usageError({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                             {"OPTSCOPE_JOB_STALL_TIMEOUT", "ten"}})
                  .find("OPTSCOPE_JOB_STALL_TIMEOUT must be seconds"),
        std::string::npos);
}

TEST(Job, SplitByWeightIsDeterministicAndBalanced)
{
    const std::vector<uint64_t> w {10, 70, 20, 40, 30, 0, 0};
    const std::vector<int> a = splitByWeight(w, 3);
    EXPECT_EQ(a, splitByWeight(w, 3));
    ASSERT_EQ(a.size(), w.size());
    std::vector<uint64_t> load(3, 0);
    for (size_t i = 0; i < w.size(); ++i)
        load[static_cast<size_t>(a[i])] += w[i];
    // heaviest first to the least loaded: 70 | 40 + 10 | 30 + 20, the empty units spread, not piled on one
    EXPECT_EQ(load, (std::vector<uint64_t> {70, 50, 50}));
    EXPECT_NE(a[5], a[6]);
    EXPECT_EQ(splitByWeight(w, 1), std::vector<int>(w.size(), 0));
    // more parts than units: each unit alone
    const std::vector<int> b = splitByWeight({5, 5}, 4);
    EXPECT_NE(b[0], b[1]);
}

TEST(Job, SplitContiguousGivesEachProcessOneRunOfAboutEqualWeight)
{
    const std::vector<uint64_t> w {10, 10, 10, 10, 10, 10, 90, 10, 10, 10, 10, 10};
    const std::vector<int> a = splitContiguous(w, 3);
    ASSERT_EQ(a.size(), w.size());
    // runs in order: never back to a lower process
    for (size_t i = 1; i < a.size(); ++i)
        EXPECT_GE(a[i], a[i - 1]) << i;
    EXPECT_EQ(a.front(), 0);
    EXPECT_EQ(a.back(), 2);
    std::vector<uint64_t> load(3, 0);
    for (size_t i = 0; i < w.size(); ++i)
        load[static_cast<size_t>(a[i])] += w[i];
    // 200 in all: about 67 each, the 90 whole in one run
    EXPECT_EQ(load, (std::vector<uint64_t> {60, 90, 50}));
    EXPECT_EQ(splitContiguous(w, 1), std::vector<int>(w.size(), 0));
    EXPECT_EQ(splitContiguous({}, 3), std::vector<int> {});
    // weights of zero still spread (each counts as 1)
    EXPECT_EQ(splitContiguous({0, 0, 0, 0}, 2), (std::vector<int> {0, 0, 1, 1}));
}

TEST(Job, WordsSurviveThePayload)
{
    const std::vector<uint64_t> w {0, 1, ~uint64_t(0), uint64_t(1) << 40};
    EXPECT_EQ(wordsFromPayload(wordsToPayload(w)), w);
    EXPECT_TRUE(wordsFromPayload({}).empty());
}

TEST(Job, AJobOfOneIsOneProcess)
{
    Job& job = Job::current();
    ASSERT_FALSE(job.distributed());
    EXPECT_TRUE(job.isRoot());
    EXPECT_EQ(job.gather("phase", "mine"), std::vector<std::string> {"mine"});
    EXPECT_EQ(job.broadcast("phase", "value"), "value");
    job.reportFailure("ignored alone");
    EXPECT_FALSE(job.failed());
    EXPECT_EQ(job.add("test-counter", 5), 5);
    EXPECT_EQ(job.add("test-counter", 2), 7);
    job.leave();
}

TEST(CancelScope, TheInnermostPredicateCountsAndAWorkerInstallsTheOneItWasGiven)
{
    EXPECT_FALSE(CancelScope::cancelled()); // outside every scope: nothing asks to stop
    EXPECT_FALSE(CancelScope::current());
    std::atomic<bool> stop {false};
    {
        const CancelScope work([&] { return stop.load(); });
        EXPECT_FALSE(CancelScope::cancelled());
        stop = true;
        EXPECT_TRUE(CancelScope::cancelled());
        EXPECT_THROW(CancelScope::check("s3://b/x"), Error);
        {
            // what undoes cancelled work's output runs in a scope of no predicate
            const CancelScope undo(std::function<bool()> {});
            EXPECT_FALSE(CancelScope::cancelled());
            EXPECT_NO_THROW(CancelScope::check("s3://b/x"));
        }
        EXPECT_TRUE(CancelScope::cancelled());
        // a thread starts in no scope; given the starter's predicate, it stops with the work
        bool unscoped = true, inherited = false;
        std::thread([&] { unscoped = CancelScope::cancelled(); }).join();
        std::thread([&, cancel = CancelScope::current()] {
            const CancelScope scope(cancel);
            inherited = CancelScope::cancelled();
        }).join();
        EXPECT_FALSE(unscoped);
        EXPECT_TRUE(inherited);
        try {
            CancelScope::check("s3://b/x");
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Cancelled);
            EXPECT_NE(std::string(e.what()).find("s3://b/x"), std::string::npos);
        }
    }
    EXPECT_FALSE(CancelScope::cancelled()); // the scope's end restores the outer one
}
