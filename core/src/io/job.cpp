// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/job.h"
#include "optscope/base/progress.h"

#include "optscope/base/core_library.h"
#include "optscope/base/error.h"
#include "optscope/io/fault_injection.h"
#include "optscope/io/job_store.h"
#include "optscope/io/process_identity.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace optscope {

namespace {

using Clock = std::chrono::steady_clock;

const job::StoreOps& storeOps()
{
    static std::once_flag once;
    static const job::StoreOps* table = nullptr;
    static std::string tried;
    std::call_once(once, [] {
        // c10d logs each failed connection attempt through glog on stderr; our errors say what happened, once
        ::setenv("GLOG_minloglevel", "3", 0);
        std::vector<std::string> builtIn;
#ifdef OPTSCOPE_C10D_BUILD_PATH
        builtIn.emplace_back(OPTSCOPE_C10D_BUILD_PATH);
#endif
#ifdef OPTSCOPE_C10D_INSTALL_PATH
        builtIn.emplace_back(OPTSCOPE_C10D_INSTALL_PATH);
#endif
        table = static_cast<const job::StoreOps*>(openCoreLibrary(
            "liboptscope_c10d.so", "OPTSCOPE_C10D_LIBRARY", builtIn, "optscope_c10d_store_v1",
            [](void* symbol, std::string& why) -> const void* {
                const auto* ops = reinterpret_cast<const job::StoreOps* (*)()>(symbol)();
                if (ops && ops->abiVersion == job::kStoreAbiVersion) return ops;
                why = "not a matching liboptscope_c10d (ABI " + std::to_string(ops ? ops->abiVersion : 0) + ")";
                return nullptr;
            },
            tried));
    });
    if (!table)
        throw Error(ErrorKind::Unsupported, {},
            "running as several processes needs liboptscope_c10d.so (c10d's TCPStore, from libtorch); set "
            "OPTSCOPE_C10D_LIBRARY to its path. Tried:"
                + tried);
    return *table;
}

/// an environment variable as an integer in [lo, hi]; nullopt when unset
bool envInt(const char* name, long lo, long hi, long& out)
{
    const char* v = std::getenv(name);
    if (!v) return false;
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || errno || n < lo || n > hi)
        throw Error(ErrorKind::Usage, {},
            std::string(name) + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi)
                + ", not '" + v + "'");
    out = n;
    return true;
}

/// the variable @p name as seconds (fractions allowed) into @p out, unchanged when it is not set; throws Error(Usage)
void envSeconds(const char* name, std::chrono::milliseconds& out)
{
    const char* t = std::getenv(name);
    if (!t) return;
    char* end = nullptr;
    const double s = std::strtod(t, &end);
    if (*t == '\0' || *end != '\0' || !(s > 0) || s > 86400)
        throw Error(ErrorKind::Usage, {},
            std::string(name) + " must be seconds, more than 0 and at most 86400, not '" + t + "'");
    out = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000)));
}

} // namespace

JobSpec jobSpecFromEnvironment()
{
    JobSpec spec;
    long rank = 0, size = 1, local = 0, localSize = 1;
    const bool torchrun = envInt("RANK", 0, 1 << 24, rank);
    if (torchrun) {
        if (!envInt("WORLD_SIZE", 1, 1 << 24, size))
            throw Error(ErrorKind::Usage, {}, "RANK is set but WORLD_SIZE is not (torchrun sets both)");
        envInt("LOCAL_RANK", 0, 1 << 24, local);
        envInt("LOCAL_WORLD_SIZE", 1, 1 << 24, localSize);
        spec.launcher = "torchrun";
        if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE"); agent && std::string(agent) == "True") {
            long attempt = 0;
            envInt("TORCHELASTIC_RESTART_COUNT", 0, 1 << 24, attempt);
            spec.agentStore = true;
            spec.keyPrefix = "/worker/attempt_" + std::to_string(attempt) + "/";
        }
    } else if (std::getenv("MASTER_PORT") && envInt("SLURM_PROCID", 0, 1 << 24, rank)) {
        // Slurm's variables count only with MASTER_PORT given: a batch script's own shell (not started by srun)
        // has SLURM_NTASKS too, and must stay one process
        if (!envInt("SLURM_NTASKS", 1, 1 << 24, size))
            throw Error(ErrorKind::Usage, {}, "SLURM_PROCID is set but SLURM_NTASKS is not (srun sets both)");
        envInt("SLURM_LOCALID", 0, 1 << 24, local);
        // the tasks on this node: SLURM_NTASKS_PER_NODE when given, else this node's count in SLURM_TASKS_PER_NODE
        // ("8(x4),6": the first node's; every node of a regular job has the same)
        if (!envInt("SLURM_NTASKS_PER_NODE", 1, 1 << 24, localSize))
            if (const char* t = std::getenv("SLURM_TASKS_PER_NODE")) localSize = std::max(1L, std::atol(t));
        spec.launcher = "slurm";
    } else if (long stepTasks = 1; !std::getenv("MASTER_PORT") && std::getenv("SLURM_PROCID")
               && envInt("SLURM_STEP_NUM_TASKS", 1, 1 << 24, stepTasks) && stepTasks > 1) {
        // a task of a step that srun started several times (only srun sets SLURM_STEP_NUM_TASKS, a batch script's
        // shell does not): without MASTER_PORT each task ran the whole command alone, N copies racing on one output
        throw Error(ErrorKind::Usage, {},
            "srun started this command as " + std::to_string(stepTasks)
                + " tasks (SLURM_STEP_NUM_TASKS), but MASTER_ADDR and MASTER_PORT are not set: give them (the host "
                  "of task 0 and a free port there) to run it as one job, or start one task (srun -n 1)");
    }
    // before a job of one is taken as no job: RANK=2 WORLD_SIZE=1 ran alone, published its output, and left the
    // job's other processes to fail
    if (rank >= size)
        throw Error(ErrorKind::Usage, {},
            "this process's rank " + std::to_string(rank) + " is not below the job's size " + std::to_string(size));
    if (size <= 1) return JobSpec {};
    spec.rank = static_cast<int>(rank);
    spec.size = static_cast<int>(size);
    spec.localRank = static_cast<int>(local);
    spec.localSize = static_cast<int>(std::min(localSize, size));
    const char* addr = std::getenv("MASTER_ADDR");
    if (!addr || !*addr)
        throw Error(ErrorKind::Usage, {},
            "a job of " + std::to_string(size)
                + " processes needs MASTER_ADDR (the host of rank 0) and MASTER_PORT (a free port there)");
    spec.masterAddr = addr;
    long port = 0;
    if (!envInt("MASTER_PORT", 1, 65535, port))
        throw Error(ErrorKind::Usage, {}, "a job of " + std::to_string(size) + " processes needs MASTER_PORT");
    spec.masterPort = static_cast<uint16_t>(port);
    envSeconds("OPTSCOPE_JOB_TIMEOUT", spec.timeout);
    envSeconds("OPTSCOPE_JOB_STALL_TIMEOUT", spec.stallTimeout);
    spec.stallTimeout = std::max(spec.stallTimeout, spec.timeout);
    return spec;
}

struct Job::State
{
    const job::StoreOps* ops = nullptr;
    void* store = nullptr;
    std::string where; ///< "MASTER_ADDR:MASTER_PORT"
    JobSpec spec;
    uint64_t sequence = 0; ///< calls of gather/broadcast so far: every process makes the same calls in the same order

    std::atomic<bool> failed {false};
    std::atomic<bool> storeLost {false}; ///< a store call failed: the store (rank 0's, or torchrun's agent's) is gone
    mutable std::mutex failureMutex;
    std::string failure; ///< the first failure once known here
    bool ownReported = false; ///< this process reported its own failure (Job::reportFailure)
    bool ownFirst = false; ///< ... and it was the job's first

    std::mutex stopMutex;
    std::condition_variable stopWake;
    bool stopping = false;
    std::thread heartbeat;
    /// when the calls to the store in flight began (ns on the steady clock; 0: none), the main thread's and the
    /// heartbeat's: a store that accepts a connection and never answers (rank 0 stopped, another program on
    /// MASTER_PORT) blocks a call for ever, libtorch's client having no receive timeout
    std::atomic<int64_t> mainCallSince {0};
    std::atomic<int64_t> beatCallSince {0};
    /// when the heartbeat last found this process's work moved (ns on the steady clock)
    std::atomic<int64_t> workMovedAt {nowNs()};
    std::thread watchdog;

    State() = default;
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    /// stops the heartbeat and closes the store: also on a join that failed after the store connected (a store
    /// whose first request fails, torchrun's agent store, was leaked before)
    ~State()
    {
        {
            std::lock_guard<std::mutex> lock(stopMutex);
            stopping = true;
        }
        stopWake.notify_all();
        if (heartbeat.joinable()) heartbeat.join();
        if (watchdog.joinable()) watchdog.join();
        if (store) ops->close(store);
    }

    /// a store call that throws Error naming the store (and, off rank 0, what losing it means)
    static int64_t nowNs()
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    }
    template<typename F> void call(F&& f)
    {
        std::string error;
        mainCallSince = nowNs();
        const bool ok = f(error);
        mainCallSince = 0;
        if (ok) return;
        storeLost = true;
        throw Error(ErrorKind::Io, {}, lostStoreText(error));
    }
    std::string lostStoreText(const std::string& error) const
    {
        return "lost the job's store at " + where + " (" + error + ")"
            + (spec.agentStore       ? "; torchrun's agent, which serves it, exited or cannot be reached"
                    : spec.rank != 0 ? "; rank 0, which serves it, exited or cannot be reached"
                                     : "");
    }
    int64_t add(const std::string& key, int64_t delta)
    {
        int64_t r = 0;
        call([&](std::string& e) { return ops->add(store, spec.keyPrefix + key, delta, r, e); });
        return r;
    }
    bool exists(const std::string& key)
    {
        bool r = false;
        call([&](std::string& e) { return ops->check(store, spec.keyPrefix + key, r, e); });
        return r;
    }
    std::string get(const std::string& key)
    {
        std::string v;
        call([&](std::string& e) { return ops->get(store, spec.keyPrefix + key, v, e); });
        return v;
    }
    void set(const std::string& key, const std::string& value)
    {
        call([&](std::string& e) { return ops->set(store, spec.keyPrefix + key, value, e); });
    }

    /// each rank's thisProcessIdentity() as it published it ("who/RANK"), read when first needed; "-": it could not
    std::vector<std::string> identities;
    /// rank @p r's process has ended, as this process can prove (on the same machine): then its PID, else empty
    std::string rankEnded(int r)
    {
        if (identities.empty()) identities.assign(static_cast<size_t>(spec.size), std::string());
        std::string& who = identities[static_cast<size_t>(r)];
        if (who.empty()) {
            const std::string key = "who/" + std::to_string(r);
            if (!exists(key)) return {};
            who = get(key);
            if (who.empty()) who = "-";
        }
        if (!processEnded(who)) return {};
        const size_t pid = who.find(' ') + 1;
        return who.substr(pid, who.find(' ', pid) - pid);
    }

    void setFailure(const std::string& text)
    {
        std::lock_guard<std::mutex> lock(failureMutex);
        if (failure.empty()) failure = text;
        failed = true;
    }
    /// publishes @p text as the job's failure unless another came first; true when it was the first (or the store is
    /// gone: then every process learns that on its own, and this one's own failure is the news here)
    bool publishFailure(const std::string& text)
    {
        failed = true;
        bool first = true;
        try {
            first = add("failed", 1) == 1;
            if (first) set("failure", text);
        } catch (const Error&) { }
        // not the first: failureText() asks the store for the one that was (what this process saw may be its effect)
        if (first) setFailure(text);
        return first;
    }
    bool reportOwnFailure(const std::string& text)
    {
        {
            std::lock_guard<std::mutex> lock(failureMutex);
            if (ownReported) return ownFirst;
            ownReported = true;
        }
        const bool first = publishFailure(text);
        std::lock_guard<std::mutex> lock(failureMutex);
        ownFirst = first;
        return first;
    }
    /// takes the job's failure text from the store if it is there yet (the failing process adds to "failed" before
    /// it sets "failure"); from the heartbeat, with its own calls, so that a hung main call does not block it
    void fetchFailure()
    {
        {
            std::lock_guard<std::mutex> lock(failureMutex);
            if (!failure.empty()) return;
        }
        bool there = false;
        std::string text, error;
        if (ops->check(store, spec.keyPrefix + "failure", there, error) && there
            && ops->get(store, spec.keyPrefix + "failure", text, error))
            setFailure(text);
    }
    std::string failureText()
    {
        {
            std::lock_guard<std::mutex> lock(failureMutex);
            if (!failure.empty()) return failure;
        }
        // the failing process adds to "failed" before it sets "failure": give it a moment
        for (int i = 0; i < 100; ++i) {
            try {
                if (exists("failure")) {
                    setFailure(get("failure"));
                    break;
                }
            } catch (const Error& e) {
                setFailure(e.detail());
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        std::lock_guard<std::mutex> lock(failureMutex);
        return failure.empty() ? "another process of the job failed" : failure;
    }

    // The store is one thread (in rank 0, or torchrun's agent) that every process asks: each beat, each poll of a
    // wait and each look at another's beat is a request. On a small job a beat every 250 ms and polls at most 20 ms
    // apart keep failures and barriers prompt; on a larger one both are 2 ms per process (polls from 10 processes on,
    // beats from 125; a 1,024-process job: a beat every 2 s, a poll every second), so that the store answers a
    // bounded number of requests a second however large the job (bench/job/heartbeat_load.py). A beat stays within
    // an eighth of the timeout, so a lost process is still noticed in time.
    std::chrono::milliseconds perProcess() const { return std::chrono::milliseconds(2 * int64_t(spec.size)); }
    std::chrono::milliseconds beatInterval() const
    {
        using std::chrono::milliseconds;
        return std::max(milliseconds(250), std::min({perProcess(), milliseconds(2000), spec.timeout / 8}));
    }
    std::chrono::microseconds longestPoll() const
    {
        using std::chrono::milliseconds;
        return std::max(milliseconds(20), std::min(perProcess(), milliseconds(1000)));
    }
    /// how often a waiting process reads the beats it watches: twice a beat, at least a second apart
    Clock::duration watchInterval() const
    {
        return std::max<Clock::duration>(std::chrono::seconds(1), 2 * beatInterval());
    }

    /// A beat is one add to "beat/RANK": 1, and kWorkMoved more when the process's work moved since the last beat.
    /// The low 32 bits count beats (the process lives), the rest count beats with work (it is not hung).
    static constexpr int64_t kWorkMoved = int64_t(1) << 32;
    static bool sameBeats(int64_t a, int64_t b) { return (a & (kWorkMoved - 1)) == (b & (kWorkMoved - 1)); }
    static bool sameWork(int64_t a, int64_t b) { return a / kWorkMoved == b / kWorkMoved; }

    void beat()
    {
        const std::string key = spec.keyPrefix + "beat/" + std::to_string(spec.rank);
        const std::string failedKey = spec.keyPrefix + "failed";
        std::unique_lock<std::mutex> lock(stopMutex);
        while (!stopping) {
            lock.unlock();
            std::string error;
            int64_t n = 0;
            const bool moved = takeWorkMoved();
            if (moved) workMovedAt = nowNs();
            beatCallSince = nowNs();
            const bool ok
                = ops->add(store, key, moved ? 1 + kWorkMoved : 1, n, error) && ops->add(store, failedKey, 0, n, error);
            beatCallSince = 0;
            if (!ok) {
                storeLost = true;
                setFailure(lostStoreText(error));
                lock.lock();
                break;
            }
            if (n > 0) {
                failed = true;
                // the failure's text now, while the store is surely there: rank 0 (which serves it) may exit soon
                // after, and a process busy with its share would then only learn that the store was lost
                fetchFailure();
            }
            lock.lock();
            stopWake.wait_for(lock, beatInterval(), [&] { return stopping; });
        }
    }

    /// Ends the process when a call to the store has not returned for the timeout and 5 s: nothing else can (the
    /// call blocks in libtorch), and the job cannot go on without its store. Its temporaries are rank 0's, whose
    /// loss the other processes see in turn. Ends it too when the job has failed and this process's work has not
    /// moved for the stall timeout: it hangs (the others may have declared it so), and would otherwise hold its
    /// share of the cluster until the scheduler's time limit.
    void watch()
    {
        const int64_t limit
            = std::chrono::duration_cast<std::chrono::nanoseconds>(spec.timeout).count() + 5'000'000'000LL;
        const int64_t stallLimit = std::chrono::duration_cast<std::chrono::nanoseconds>(spec.stallTimeout).count();
        std::unique_lock<std::mutex> lock(stopMutex);
        int64_t lastWake = nowNs(), resumedAt = 0;
        while (!stopping) {
            stopWake.wait_for(lock, std::chrono::seconds(1), [&] { return stopping; });
            const int64_t now = nowNs();
            // this process did not run for a while (the whole job suspended: Slurm's `scontrol suspend` stops every
            // process, the store's server too): a call in flight over that time was not refused by the store, and
            // work that did not move was not hung. Both are timed from the resume
            if (now - lastWake > 3'000'000'000LL) resumedAt = now;
            lastWake = now;
            if (failed && now - std::max(workMovedAt.load(), resumedAt) > stallLimit) {
                std::fprintf(stderr,
                    "optscope-cli (rank %d of %d): the job failed and this process's work has not moved for %lld s "
                    "(OPTSCOPE_JOB_STALL_TIMEOUT; it hangs, e.g. on a read that never returns); exiting now: a "
                    "temporary next to the output may remain, which the next run that writes that output removes\n",
                    spec.rank, spec.size, static_cast<long long>(stallLimit / 1'000'000'000LL));
                std::fflush(stderr);
                std::_Exit(2);
            }
            for (const int64_t since : {mainCallSince.load(), beatCallSince.load()})
                if (since != 0 && now - std::max(since, resumedAt) > limit) {
                    std::fprintf(stderr,
                        "optscope-cli (rank %d of %d): the job's store at %s did not answer for %lld s (%s); "
                        "stopping\n",
                        spec.rank, spec.size, where.c_str(), static_cast<long long>(limit / 1'000'000'000LL),
                        spec.rank != 0 && !spec.agentStore
                            ? "rank 0, which serves it, is stopped or hangs, or another program listens on MASTER_PORT"
                            : "the process serving it is stopped or hangs");
                    std::fflush(stderr);
                    std::_Exit(2);
                }
        }
    }

    /// Watches the heartbeats of the ranks @p pending names while waiting; declares one gone after the timeout.
    struct Watch
    {
        std::vector<int64_t> beats;
        std::vector<Clock::time_point> changed; ///< when the rank's beats last moved
        std::vector<Clock::time_point> worked; ///< when its work last moved
        Clock::time_point lastCheck = Clock::now();
    };
    /// waits until @p ready(); @p pending(r) says whether rank r is still awaited. Throws Error on any failure.
    template<typename Ready, typename Pending> void waitUntil(Ready&& ready, Pending&& pending)
    {
        Watch w;
        w.beats.assign(static_cast<size_t>(spec.size), -1);
        w.changed.assign(static_cast<size_t>(spec.size), Clock::now());
        w.worked = w.changed;
        auto pause = std::chrono::microseconds(200);
        for (;;) {
            if (failed) throw Error(ErrorKind::Io, {}, "stopped: " + failureText());
            // SIGTERM or SIGINT (torchrun and srun stop a job so): this process stops now, not when the others come
            if (CancelScope::cancelled())
                throw Error(ErrorKind::Cancelled, {}, "stopped while waiting for the job's other processes");
            if (ready()) return;
            const auto now = Clock::now();
            if (now - w.lastCheck >= watchInterval()) {
                // this process itself did not run for a while (stopped by SIGSTOP or a debugger, a suspended machine,
                // starved): the others' silence over that time says nothing about them, and blaming one would name
                // the wrong rank. Their clocks start again now; one that is really gone is seen a timeout later
                if (now - w.lastCheck > std::min(spec.timeout, spec.stallTimeout) / 2) {
                    std::fill(w.changed.begin(), w.changed.end(), now);
                    std::fill(w.worked.begin(), w.worked.end(), now);
                }
                w.lastCheck = now;
                // rank 0 watches every rank it awaits; the others watch rank 0 and their two neighbours only, so the
                // store answers O(ranks) reads a second, not O(ranks^2) (1,024 processes at a barrier); a rank that
                // dies is still seen by rank 0 or a neighbour, whoever waits first, and its failure reaches all
                auto watched = [&](int r) {
                    return spec.rank == 0 || r == 0 || r == (spec.rank + 1) % spec.size
                        || r == (spec.rank + spec.size - 1) % spec.size;
                };
                for (int r = 0; r < spec.size; ++r) {
                    if (r == spec.rank || !pending(r) || !watched(r)) continue;
                    const int64_t b = add("beat/" + std::to_string(r), 0);
                    const bool first = w.beats[r] == -1;
                    const bool silent = !first && sameBeats(b, w.beats[r]);
                    if (first || !sameWork(b, w.beats[r])) w.worked[r] = now;
                    if (!silent) w.changed[r] = now;
                    w.beats[r] = b;
                    using std::chrono::duration_cast;
                    using std::chrono::seconds;
                    // a silent rank whose process this machine shows ended is gone now, not after the timeout (a
                    // stopped one lives, and is timed as before)
                    if (const std::string pid = silent ? rankEnded(r) : std::string(); !pid.empty()) {
                        // what it was awaited for may have come just before it ended (rank 0 publishes, then exits)
                        if (ready()) return;
                        publishFailure("rank " + std::to_string(r) + " ended before the job was done (its process, PID "
                            + pid + " on this machine, is gone: killed, e.g. by the OOM killer, or crashed)");
                    } else if (now - w.changed[r] > spec.timeout) {
                        publishFailure("rank " + std::to_string(r) + " stopped answering for "
                            + std::to_string(duration_cast<seconds>(spec.timeout).count())
                            + " s (it was killed, or it hangs)");
                    } else if (now - w.worked[r] > spec.stallTimeout) {
                        publishFailure("rank " + std::to_string(r) + " is alive but its work has not moved for "
                            + std::to_string(duration_cast<seconds>(spec.stallTimeout).count())
                            + " s (OPTSCOPE_JOB_STALL_TIMEOUT): it hangs, e.g. on a read that never returns or a "
                              "file system that stopped answering");
                    }
                }
            }
            std::this_thread::sleep_for(pause);
            pause = std::min<std::chrono::microseconds>(pause * 2, longestPoll());
        }
    }
};

namespace {

/// connects a probe socket to @p a from a local port other than @p port: a connection from a local port to the same
/// port on the same host, while nothing listens there, connects to itself (TCP's simultaneous open) and holds the
/// port, which rank 0 then cannot bind ("Address already in use", the job never meets). Linux picks such a port for
/// connect() from its ephemeral range (32768-60999, even ports first), where a MASTER_PORT may well lie.
bool probeConnects(const addrinfo* a, uint16_t port)
{
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) return false;
    sockaddr_storage local {};
    local.ss_family = static_cast<sa_family_t>(a->ai_family);
    const socklen_t localSize = a->ai_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    socklen_t size = sizeof local;
    const auto portOf = [](const sockaddr_storage& s) {
        return ntohs(s.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(s).sin6_port
                                             : reinterpret_cast<const sockaddr_in&>(s).sin_port);
    };
    // bound first (any address, a port of the kernel's choosing): never the port asked for
    const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&local), localSize) == 0
        && ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) == 0 && portOf(local) != port;
    const bool open = bound && ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
    return open;
}

/// waits until @p host:@p port accepts a TCP connection (polling every 10 ms), or @p limit passes: c10d's client
/// retries a refused connection only after a second, which a process started just before rank 0's server paid in
/// full at every start. Throws Error when @p host does not resolve.
void waitUntilListening(const std::string& host, uint16_t port, std::chrono::milliseconds limit)
{
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const auto start = Clock::now();
    // a name that does not resolve is said as such (it was a 'socket timeout' after the whole timeout); a resolver
    // that fails for now (EAI_AGAIN: DNS unreachable) is asked again within the timeout
    for (;;) {
        const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
        if (rc == 0 && found) break;
        if (rc != EAI_AGAIN || Clock::now() - start >= limit)
            throw Error(ErrorKind::Io, host + ":" + std::to_string(port),
                "MASTER_ADDR '" + host + "' does not resolve to an address (" + ::gai_strerror(rc)
                    + "): name the host of rank 0 as this machine knows it");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (bool open = false; !open && Clock::now() - start < limit;) {
        for (addrinfo* a = found; a && !open; a = a->ai_next)
            open = probeConnects(a, port);
        if (!open) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::freeaddrinfo(found);
}

} // namespace

Job& Job::current()
{
    static Job job;
    return job;
}

void Job::join(const JobSpec& spec)
{
    Job& job = current();
    if (job.m_state) throw Error(ErrorKind::Usage, {}, "this process has already joined its job");
    job.m_spec = spec;
    if (spec.size <= 1) return;
    auto st = std::make_unique<State>();
    st->ops = &storeOps();
    st->spec = spec;
    st->where = spec.masterAddr + ":" + std::to_string(spec.masterPort);
    std::string error;
    const bool serves = spec.rank == 0 && !spec.agentStore;
    const auto started = Clock::now();
    if (!serves) waitUntilListening(spec.masterAddr, spec.masterPort, spec.timeout);
    const auto left = std::max<int64_t>(
        1000, (spec.timeout - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started)).count());
    // the watchdog covers the connection too: a newer libtorch's client asks the store a first question (a ping)
    // inside TCPStore's constructor, which a listener that never answers blocks for ever (seen with libtorch 2.11)
    State* raw = st.get();
    st->watchdog = std::thread([raw] { raw->watch(); });
    st->mainCallSince = State::nowNs();
    st->store = st->ops->connect(spec.masterAddr, spec.masterPort, serves, spec.size, left, error);
    st->mainCallSince = 0;
    if (!st->store)
        throw Error(ErrorKind::Io, st->where,
            "the job's " + std::to_string(spec.size) + " processes did not meet (rank " + std::to_string(spec.rank)
                + ", "
                + (spec.agentStore       ? "connecting to torchrun's store"
                        : spec.rank == 0 ? "serving the store"
                                         : "connecting to rank 0's store")
                + "; OPTSCOPE_JOB_TIMEOUT " + std::to_string(spec.timeout.count() / 1000) + " s): " + error);
    int64_t joined = 0;
    st->mainCallSince = State::nowNs();
    const bool added = st->ops->add(st->store, spec.keyPrefix + "joined", 1, joined, error);
    st->mainCallSince = 0;
    if (!added) {
        if (!spec.agentStore) throw Error(ErrorKind::Io, {}, st->lostStoreText(error));
        // torchrun >= 2.3 shares its agent's store, whose protocol (a validation message first) a libtorch older
        // than the agent's does not speak: the server drops the connection at the first request
        throw Error(ErrorKind::Unsupported, st->where,
            "cannot use the store torchrun's agent serves (TORCHELASTIC_USE_AGENT_STORE=True): " + error
                + ". This build's libtorch is likely older than the torchrun that started it; start torchrun with "
                  "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 and --rdzv-backend c10d (or --standalone), so that rank 0 "
                  "serves the job's store itself");
    }
    if (added && (joined < 1 || joined > spec.size)) {
        // the first answer of a c10d store counts this process in: anything else is another program on the port
        // (a web server's bytes read as a number), or a store of another job; either would pass for a duplicate rank
        const std::string why = "what answers at " + st->where + " is not this job's store: it counted "
            + std::to_string(joined) + " processes joined to a job of " + std::to_string(spec.size)
            + " (another program or another job on MASTER_ADDR:MASTER_PORT; choose a free MASTER_PORT)";
        throw Error(ErrorKind::Io, {}, why);
    }
    st->heartbeat = std::thread([raw] { raw->beat(); });
    job.m_state = std::move(st);
    // two processes that say the same rank (RANK or SLURM_PROCID given twice, or a second job started on the same
    // MASTER_PORT) would both wait for a rank that never comes: said at once, to every process
    if (job.m_state->add("rank-claims/" + std::to_string(spec.rank), 1) > 1) {
        const std::string why = "two processes say they are rank " + std::to_string(spec.rank) + " of the job at "
            + job.m_state->where
            + " (RANK or SLURM_PROCID given twice, or another job started on the same "
              "MASTER_ADDR:MASTER_PORT)";
        job.m_state->publishFailure(why);
        throw Error(ErrorKind::Usage, {}, why);
    }
    // what the others on this machine read to tell this process ended, should it be killed
    job.m_state->set("who/" + std::to_string(spec.rank), thisProcessIdentity());
    if (spec.rank != 0) return; // rank 0 says whether the job is complete, at the first gather or broadcast
    const auto start = Clock::now();
    while (job.m_state->add("joined", 0) < spec.size) {
        if (job.m_state->failed) throw Error(ErrorKind::Io, {}, "stopped: " + job.m_state->failureText());
        if (CancelScope::cancelled()) throw Error(ErrorKind::Cancelled, {}, "stopped while the job's processes met");
        if (Clock::now() - start > spec.timeout) {
            // the first eight that never beat, by name, and how many in all (from the count, not a question per
            // rank: a job of millions asked for minutes, deaf to its timeout and to SIGTERM)
            const int64_t count = std::max<int64_t>(1, spec.size - job.m_state->add("joined", 0));
            std::string missing;
            int named = 0;
            for (int r = 1; r < spec.size && named < 8 && !CancelScope::cancelled(); ++r)
                if (!job.m_state->exists("beat/" + std::to_string(r)) && ++named)
                    missing += (missing.empty() ? "" : ", ") + std::to_string(r);
            if (count > named && named) missing += " and " + std::to_string(count - named) + " more";
            const std::string who
                = named ? std::string("rank") + (count > 1 ? "s " : " ") + missing : std::to_string(count) + " of them";
            const std::string why = "the job's processes did not all meet at " + job.m_state->where + " within "
                + std::to_string(spec.timeout.count() / 1000) + " s (OPTSCOPE_JOB_TIMEOUT): " + who + " never joined";
            job.m_state->publishFailure(why);
            throw Error(ErrorKind::Io, {}, why);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

Job::~Job() = default; // State's destructor stops the heartbeat and closes the store

std::vector<int> splitByWeight(const std::vector<uint64_t>& weights, int parts)
{
    std::vector<size_t> order(weights.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weights[a] > weights[b]; });
    std::vector<uint64_t> load(static_cast<size_t>(std::max(parts, 1)), 0);
    std::vector<int> owner(weights.size(), 0);
    for (const size_t i : order) {
        const auto least = std::min_element(load.begin(), load.end()) - load.begin();
        owner[i] = static_cast<int>(least);
        load[static_cast<size_t>(least)] += std::max<uint64_t>(weights[i], 1);
    }
    return owner;
}

std::vector<int> splitContiguous(const std::vector<uint64_t>& weights, int parts)
{
    parts = std::max(parts, 1);
    long double total = 0;
    for (const uint64_t w : weights)
        total += static_cast<long double>(std::max<uint64_t>(w, 1));
    std::vector<int> owner(weights.size(), 0);
    long double before = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        const auto w = static_cast<long double>(std::max<uint64_t>(weights[i], 1));
        const auto run = static_cast<int>((before + w / 2) * parts / total);
        owner[i] = std::min(run, parts - 1);
        before += w;
    }
    return owner;
}

std::string wordsToPayload(const std::vector<uint64_t>& words)
{
    return std::string(reinterpret_cast<const char*>(words.data()), words.size() * 8);
}

std::vector<uint64_t> wordsFromPayload(const std::string& payload)
{
    std::vector<uint64_t> w(payload.size() / 8);
    if (!w.empty()) std::memcpy(w.data(), payload.data(), w.size() * 8);
    return w;
}

std::vector<std::string> Job::gather(
    const std::string& phase, const std::string& payload, const std::function<void()>& whileWaiting)
{
    if (!m_state) return {payload};
    State& st = *m_state;
    const std::string prefix = "g" + std::to_string(++st.sequence) + ":" + phase + "/";
    if (!isRoot()) {
        st.set(prefix + std::to_string(rank()), payload);
        st.add(prefix + "count", 1);
        st.waitUntil([&] { return st.exists(prefix + "done"); }, [](int r) { return r == 0; });
        return {};
    }
    auto lastCall = Clock::now();
    st.waitUntil(
        [&] {
            if (whileWaiting && Clock::now() - lastCall > std::chrono::milliseconds(100)) {
                whileWaiting();
                lastCall = Clock::now();
            }
            const int64_t count = st.add(prefix + "count", 0);
            // more answers than the job has other processes: one was given a larger job size (WORLD_SIZE,
            // SLURM_NTASKS) and came as a rank this job does not have; waiting for exactly size-1 never ended
            if (count > size() - 1) {
                const std::string why = "more processes answered than the job's " + std::to_string(size())
                    + " (WORLD_SIZE or SLURM_NTASKS differs among them: rank 0 was told " + std::to_string(size())
                    + ")";
                st.publishFailure(why);
                throw Error(ErrorKind::Usage, {}, why);
            }
            return count == size() - 1;
        },
        [&](int r) { return !st.exists(prefix + std::to_string(r)); });
    std::vector<std::string> all {payload};
    for (int r = 1; r < size(); ++r)
        all.push_back(st.get(prefix + std::to_string(r)));
    st.set(prefix + "done", "");
    return all;
}

std::string Job::broadcast(const std::string& phase, const std::string& payload)
{
    if (!m_state) return payload;
    State& st = *m_state;
    const std::string key = "b" + std::to_string(++st.sequence) + ":" + phase;
    if (isRoot()) {
        st.set(key, payload);
        return payload;
    }
    st.waitUntil([&] { return st.exists(key); }, [](int r) { return r == 0; });
    return st.get(key);
}

bool Job::reportFailure(const std::string& message)
{
    if (!m_state) return true;
    return m_state->reportOwnFailure("rank " + std::to_string(rank()) + ": " + message);
}

bool Job::failedAfterAnother() const
{
    if (!m_state || !m_state->failed) return false;
    std::lock_guard<std::mutex> lock(m_state->failureMutex);
    return !m_state->ownReported || !m_state->ownFirst;
}

bool Job::failed() const
{
    return m_state && m_state->failed;
}

bool Job::rootLost() const
{
    return m_state && !isRoot() && !m_state->spec.agentStore && m_state->storeLost;
}

std::string Job::failure() const
{
    return m_state ? m_state->failureText() : std::string();
}

unsigned Job::threadsPerProcess() const
{
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    return std::max(1u, cores / static_cast<unsigned>(std::max(1, m_spec.localSize)));
}

int64_t Job::add(const std::string& name, int64_t delta)
{
    if (!m_state) {
        static std::mutex mutex;
        static std::map<std::string, int64_t>* counters = new std::map<std::string, int64_t>;
        std::lock_guard<std::mutex> lock(mutex);
        return (*counters)[name] += delta;
    }
    return m_state->add("c/" + name, delta);
}

void Job::leave()
{
    if (!m_state) return;
    State& st = *m_state;
    try {
        if (!isRoot()) {
            pausePoint("leaving"); // tests: a process killed after its share
            st.set("left/" + std::to_string(rank()), "");
            st.add("left", 1);
        } else if (!st.spec.agentStore) {
            // rank 0 serves the store: stay until the others are done reading from it, or gone. A rank that ended
            // (killed after its share, or mid-run: the job failed) never says it left: once a second the ranks not yet
            // left are looked at, and one whose process this machine shows ended is not waited for. One on another
            // machine, or only stopped (SIGSTOP, a debugger, a frozen cgroup: it may still read the last broadcast), is
            // waited for up to the timeout after a failure, only those that joined can come: a rank that never joined
            // must not hold the others' news (the failure) hostage for the grace, nor make it pass before they read it
            const auto start = Clock::now();
            auto lastLook = start;
            std::vector<char> settled(static_cast<size_t>(size()), 0);
            while (st.add("left", 0) < (st.failed ? st.add("joined", 0) : int64_t(size())) - 1) {
                const auto now = Clock::now();
                const auto waited = now - start;
                if (waited > st.spec.timeout || (st.failed && waited > std::chrono::seconds(2))) break;
                if (now - lastLook >= std::chrono::seconds(1)) {
                    lastLook = now;
                    int r = 1;
                    for (; r < size(); ++r) {
                        if (settled[static_cast<size_t>(r)]) continue;
                        if (!st.exists("left/" + std::to_string(r)) && st.rankEnded(r).empty()) break;
                        settled[static_cast<size_t>(r)] = 1;
                    }
                    if (r == size()) break;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
        }
    } catch (const Error&) {
        // the store is gone already: nothing to wait for
    }
    m_state.reset();
}

JobProgress::JobProgress(
    Job& job, const std::string& name, uint64_t totalBytes, const Progress& progress, std::string stage, bool split)
    : m_job(job)
    , m_total(totalBytes)
    , m_progress(progress)
    , m_stage(std::move(stage))
    , m_lastReport(std::chrono::steady_clock::now())
    , m_split(split && job.distributed())
{
    static std::atomic<int> made {0}; // the same sequence on every process
    m_counter = name + "-" + std::to_string(made++);
}

void JobProgress::show(uint64_t total)
{
    m_progress(m_total ? double(total) / double(m_total) : 1.0, m_stage);
}

void JobProgress::add(uint64_t bytes)
{
    m_done += bytes;
    if (!m_split) {
        show(m_done);
        return;
    }
    m_unreported += bytes;
    const auto now = std::chrono::steady_clock::now();
    if (m_unreported >= (64u << 20) || now - m_lastReport > std::chrono::milliseconds(200)) flush();
}

void JobProgress::flush()
{
    if (!m_split) return;
    const int64_t total = m_job.add(m_counter, static_cast<int64_t>(m_unreported));
    m_unreported = 0;
    m_lastReport = std::chrono::steady_clock::now();
    if (m_job.isRoot()) show(static_cast<uint64_t>(total));
}

void JobProgress::showTotal()
{
    if (m_split && m_job.isRoot()) show(static_cast<uint64_t>(m_job.add(m_counter, 0)));
}

} // namespace optscope
