// SPDX-License-Identifier: GPL-3.0-or-later
// liboptscope_c10d.so: c10d's TCPStore (the store torchrun's env:// rendezvous uses) behind job_store.h's table.
#include "optscope/io/job_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <exception>
#include <memory>

namespace {

using optscope::job::StoreOps;

c10d::TCPStore* asStore(void* s)
{
    return static_cast<c10d::TCPStore*>(s);
}

template<typename F> bool guarded(std::string& error, F&& f)
{
    try {
        f();
        return true;
    } catch (const std::exception& e) {
        error = e.what();
        // c10::Error's what() carries a C++ backtrace after the first line: keep the message
        if (const auto nl = error.find('\n'); nl != std::string::npos) error.resize(nl);
        return false;
    }
}

void* connect(
    const std::string& host, uint16_t port, bool isServer, int worldSize, int64_t timeoutMs, std::string& error)
{
    c10d::TCPStore* store = nullptr;
    guarded(error, [&] {
        c10d::TCPStoreOptions opts;
        opts.port = port;
        opts.isServer = isServer;
        opts.numWorkers = static_cast<size_t>(worldSize);
        opts.waitWorkers = false; // job.cpp waits, and says who is missing (TCPStore's own wait ends silently)
        opts.timeout = std::chrono::milliseconds(timeoutMs);
        store = new c10d::TCPStore(host, opts);
    });
    return store;
}

void close(void* s)
{
    delete asStore(s);
}

bool set(void* s, const std::string& key, const std::string& value, std::string& error)
{
    return guarded(error, [&] { asStore(s)->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
}

bool get(void* s, const std::string& key, std::string& value, std::string& error)
{
    return guarded(error, [&] {
        const std::vector<uint8_t> v = asStore(s)->get(key);
        value.assign(v.begin(), v.end());
    });
}

bool add(void* s, const std::string& key, int64_t delta, int64_t& result, std::string& error)
{
    return guarded(error, [&] { result = asStore(s)->add(key, delta); });
}

bool check(void* s, const std::string& key, bool& exists, std::string& error)
{
    return guarded(error, [&] { exists = asStore(s)->check({key}); });
}

} // namespace

extern "C" __attribute__((visibility("default"))) const StoreOps* optscope_c10d_store_v1()
{
    static const StoreOps table {optscope::job::kStoreAbiVersion, &connect, &close, &set, &get, &add, &check};
    return &table;
}
