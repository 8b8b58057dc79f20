// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/base/progress.h"
#include "optscope/base/error.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace optscope {

namespace {
std::atomic<bool> g_workMoved {false};
}

void markWorkMoved()
{
    // a load first: polls from many threads do not all write one cache line when it is marked already
    if (!g_workMoved.load(std::memory_order_relaxed)) g_workMoved.store(true, std::memory_order_relaxed);
}

bool takeWorkMoved()
{
    return g_workMoved.exchange(false, std::memory_order_relaxed);
}

void Progress::operator()(double fraction, std::string_view stage) const
{
    markWorkMoved();
    if (report) report(fraction, stage);
}

bool Progress::isCancelled() const
{
    markWorkMoved();
    return cancelled && cancelled();
}

void Progress::checkCancelled() const
{
    if (isCancelled()) throw Error(ErrorKind::Cancelled, {}, "cancelled");
}

namespace {
thread_local const CancelScope* t_innermost = nullptr;
}

CancelScope::CancelScope(std::function<bool()> cancelled)
    : m_cancelled(std::move(cancelled))
    , m_outer(t_innermost)
{
    t_innermost = this;
}

CancelScope::~CancelScope()
{
    t_innermost = m_outer;
}

std::function<bool()> CancelScope::current()
{
    return t_innermost ? t_innermost->m_cancelled : std::function<bool()> {};
}

bool CancelScope::cancelled()
{
    markWorkMoved();
    return t_innermost && t_innermost->m_cancelled && t_innermost->m_cancelled();
}

void CancelScope::check(const std::string& location)
{
    if (cancelled()) throw Error(ErrorKind::Cancelled, location, "cancelled");
}

void forEachOnThreads(size_t count, unsigned threads, const std::function<void(size_t)>& each)
{
    std::atomic<size_t> next {0};
    std::atomic<bool> stop {false};
    std::mutex failureMutex;
    std::exception_ptr failure;
    auto work = [&] {
        try {
            for (size_t k = next++; k < count && !stop; k = next++)
                each(k);
        } catch (...) {
            std::lock_guard<std::mutex> lock(failureMutex);
            if (!failure) failure = std::current_exception();
            stop = true;
        }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t)
        pool.emplace_back([&work, cancel = CancelScope::current()] {
            const CancelScope scope(cancel); // the caller's: a cancel also ends this thread's remote waits
            work();
        });
    work();
    for (auto& t : pool)
        t.join();
    if (failure) std::rethrow_exception(failure);
}

} // namespace optscope
