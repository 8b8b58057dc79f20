// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/sha256.h"

#include <openssl/evp.h>
#include <stdexcept>

namespace optscope {

struct Sha256::Impl
{
    EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256()
    : m_impl(std::make_unique<Impl>())
{
    m_impl->ctx = EVP_MD_CTX_new();
    if (!m_impl->ctx || EVP_DigestInit_ex(m_impl->ctx, EVP_sha256(), nullptr) != 1)
        throw std::runtime_error("SHA-256 is not available in libcrypto");
}

Sha256::~Sha256()
{
    EVP_MD_CTX_free(m_impl->ctx);
}

void Sha256::update(const void* data, size_t size)
{
    if (size) EVP_DigestUpdate(m_impl->ctx, data, size);
}

std::string Sha256::hexDigest()
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(m_impl->ctx, md, &len);
    static const char* digits = "0123456789abcdef";
    std::string out;
    out.reserve(len * 2);
    for (unsigned i = 0; i < len; ++i) {
        out += digits[md[i] >> 4];
        out += digits[md[i] & 15];
    }
    return out;
}

std::string Sha256::hex(const void* data, size_t size)
{
    Sha256 h;
    h.update(data, size);
    return h.hexDigest();
}

} // namespace optscope
