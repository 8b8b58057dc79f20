// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal seam to c10d's TCPStore (libtorch), the key-value store behind torchrun's env:// rendezvous. The store
// lives in liboptscope_c10d.so (src/c10d/c10d_store.cpp, the only file that includes c10d headers), which job.cpp
// loads only when a run is started as several processes: a one-process run never pays libtorch's start-up.
// The functions never throw: a failure returns false and says why in @p error.

#include <cstdint>
#include <string>

namespace optscope::job {

constexpr int kStoreAbiVersion = 1;

struct StoreOps
{
    int abiVersion;
    /// rank 0 (isServer) listens on @p port and waits up to @p timeoutMs for @p worldSize processes; the others
    /// connect, retrying until @p timeoutMs
    void* (*connect)(
        const std::string& host, uint16_t port, bool isServer, int worldSize, int64_t timeoutMs, std::string& error);
    void (*close)(void* store);
    bool (*set)(void* store, const std::string& key, const std::string& value, std::string& error);
    /// @p key must exist (check() first): the store's get() would otherwise wait
    bool (*get)(void* store, const std::string& key, std::string& value, std::string& error);
    bool (*add)(void* store, const std::string& key, int64_t delta, int64_t& result, std::string& error);
    bool (*check)(void* store, const std::string& key, bool& exists, std::string& error);
};

} // namespace optscope::job
