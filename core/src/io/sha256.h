// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace optscope {

/// Incremental SHA-256 (OpenSSL's libcrypto: uses the CPU's SHA extensions where present).
class Sha256
{
public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    void update(const void* data, size_t size);
    /// lowercase hex digest; the object must not be updated afterwards
    std::string hexDigest();
    static std::string hex(const void* data, size_t size);

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace optscope
