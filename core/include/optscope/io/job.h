// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// A run of optscope-cli started as several processes by torchrun (`torchrun --no-python`) or Slurm (`srun`): the
// processes meet through c10d's TCPStore at MASTER_ADDR:MASTER_PORT, the rendezvous torchrun's env:// uses, and
// coordinate through it: who does which part (each process derives the same plan from the checkpoint's metadata),
// what each wrote (gathered to rank 0, which publishes the output last), progress and failures. No tensor data
// travels between processes: each reads its own part of the sources and writes its own part of the output.
//
// Faults: a process that fails says so (reportFailure); every process sees it within a poll interval and stops. One
// that is killed or hangs stops its heartbeat (a thread, every 250 ms, 2 ms per process from 125 processes on: the
// store answers a bounded load) and is declared gone after the job's timeout
// (OPTSCOPE_JOB_TIMEOUT seconds, default 60), which also bounds the rendezvous, or at once when it is on the same
// machine and its process has ended (each publishes its boot, PID namespace, PID and start time: a process merely
// stopped, by SIGSTOP or a debugger, is not taken for ended); losing rank 0 (which serves the
// store) is an error on every other process at once. A process whose heartbeat goes on but whose work has stopped
// moving (every thread waits on a read that never returns, a deadlock: the beat carries whether its work moved) is
// declared hung after OPTSCOPE_JOB_STALL_TIMEOUT (default 600 s); once the job has failed, such a process ends
// itself after that time too, since nothing else would (srun keeps a job's other tasks running by default).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace optscope {

struct Progress;

/// How this process was started.
struct JobSpec
{
    int rank = 0;
    int size = 1;
    int localRank = 0;
    /// processes of the job on this machine (LOCAL_WORLD_SIZE; Slurm: SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE)
    int localSize = 1;
    std::string masterAddr;
    uint16_t masterPort = 0;
    std::string launcher; ///< "torchrun" (RANK, WORLD_SIZE), "slurm" (SLURM_PROCID, SLURM_NTASKS); empty: alone
    /// torchrun >= 2.x serves the store itself (TORCHELASTIC_USE_AGENT_STORE=True): every process is its client, and
    /// the keys live under "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>/" as init_process_group puts them
    bool agentStore = false;
    std::string keyPrefix;
    std::chrono::milliseconds timeout {60000};
    /// how long a process whose heartbeat goes on may go without its work moving (markWorkMoved) before it is
    /// declared hung (OPTSCOPE_JOB_STALL_TIMEOUT; at least the timeout)
    std::chrono::milliseconds stallTimeout {600000};
};

/// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE,
/// TORCHELASTIC_RESTART_COUNT) or, without RANK, Slurm's
/// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR and MASTER_PORT given); OPTSCOPE_JOB_TIMEOUT and
/// OPTSCOPE_JOB_STALL_TIMEOUT (seconds). Neither set, or a world of one: a one-process spec. Throws Error(Usage) naming
/// the variable that is missing or malformed.
JobSpec jobSpecFromEnvironment();

/// Which of @p parts processes does each unit of work, given each unit's weight (bytes): the heaviest first, each to
/// the least loaded process so far (ties: the lower index). Deterministic, so every process computes the same split.
std::vector<int> splitByWeight(const std::vector<uint64_t>& weights, int parts);
/// Which of @p parts processes does each unit when units next to each other should go to one process (records of
/// one file: each process writes one run of it, and neighbours share at most one page): runs in order, each about
/// 1/parts of the total weight (a unit goes to the run its middle falls in). Deterministic.
std::vector<int> splitContiguous(const std::vector<uint64_t>& weights, int parts);

/// 64-bit words as a gather/broadcast payload and back (little-endian, as every process of a job is)
std::string wordsToPayload(const std::vector<uint64_t>& words);
std::vector<uint64_t> wordsFromPayload(const std::string& payload);

class Job
{
public:
    /// this process's job: a job of one until join()
    static Job& current();
    /// meets the other processes of @p spec (a spec of one does nothing); throws Error naming MASTER_ADDR:MASTER_PORT
    /// when the rendezvous does not complete within the timeout
    static void join(const JobSpec& spec);

    ~Job();
    int rank() const { return m_spec.rank; }
    int size() const { return m_spec.size; }
    bool distributed() const { return m_spec.size > 1; }
    bool isRoot() const { return m_spec.rank == 0; }
    /// threads a process's own pool should use: this machine's cores shared among the job's processes on it (a job of
    /// one: every core), so that 8 processes on a node do not run 8 pools of all its cores each
    unsigned threadsPerProcess() const;
    const JobSpec& spec() const { return m_spec; }

    /// Every process calls it at the same point of the same command. Rank 0 returns every process's @p payload in
    /// rank order (its own first); the others return an empty vector once rank 0 has them all. Throws Error when a
    /// process failed, stopped answering or exited first.
    /// @p whileWaiting is called about every 100 ms while rank 0 waits (its progress display of the job's counters)
    std::vector<std::string> gather(
        const std::string& phase, const std::string& payload, const std::function<void()>& whileWaiting = {});
    /// rank 0's @p payload on every process (rank 0 returns its own); throws Error as gather does
    std::string broadcast(const std::string& phase, const std::string& payload);
    /// tells every process that this one failed with @p message (the first report wins; a process reports once, later
    /// calls return what the first returned); failed() turns true everywhere within a poll interval. Returns whether
    /// it was the job's first failure. No-op (true) in a job of one.
    bool reportFailure(const std::string& message);
    /// the job failed, and not first here: what went wrong in this process may be an effect of another's failure (rank
    /// 0 failed and removed the temporary folder the others write into), so failure() is the cause to name
    bool failedAfterAnother() const;
    /// true once any process reported a failure or one was declared gone: long work polls it to stop early
    bool failed() const;
    /// this process (not rank 0) lost the store that rank 0 serves: rank 0 exited, was killed or cannot be reached,
    /// and what it made for the job (a temporary output) is left to the others to remove
    bool rootLost() const;
    /// the first failure, "rank R: what it said"
    std::string failure() const;
    /// adds @p delta to the job-wide counter @p name and returns the total over all processes (progress)
    int64_t add(const std::string& name, int64_t delta);
    /// the last call: waits (bounded by the timeout) until every other process has finished with the store that rank
    /// 0 serves, then closes it
    void leave();

    struct State;

private:
    Job() = default;
    JobSpec m_spec;
    std::unique_ptr<State> m_state;
};

/// Progress of work in bytes split over the processes of a job: each process adds what it did to a job-wide counter
/// (through the store at most every 64 MiB or 200 ms) and rank 0 shows the job's total of @p totalBytes; a job of one
/// shows its own bytes at once. Every process makes its JobProgress objects in the same order (the counter's name
/// counts them). @p split false: every process does all the work (nothing is summed; each shows its own).
class JobProgress
{
public:
    JobProgress(Job& job, const std::string& name, uint64_t totalBytes, const Progress& progress, std::string stage,
        bool split = true);
    /// @p bytes more done by this process
    void add(uint64_t bytes);
    /// what is not yet counted, counted now
    void flush();
    /// rank 0 while it waits for the others: the job's total so far
    void showTotal();

private:
    void show(uint64_t total);
    Job& m_job;
    std::string m_counter;
    uint64_t m_total;
    const Progress& m_progress;
    std::string m_stage;
    uint64_t m_done = 0;
    uint64_t m_unreported = 0;
    std::chrono::steady_clock::time_point m_lastReport;
    bool m_split;
};

} // namespace optscope
