// SPDX-License-Identifier: GPL-3.0-or-later
// Loads liboptscope_aten.so (the ATen kernels) on first use and forwards aten_bridge.h's functions to it.
#include "optscope/base/core_library.h"
#include "optscope/base/error.h"
#include "optscope/tensor/aten_bridge.h"

#include <mutex>
#include <string>

namespace optscope::aten {

namespace {

const Ops* load(std::string& tried)
{
    std::vector<std::string> builtIn;
#ifdef OPTSCOPE_ATEN_BUILD_PATH
    builtIn.emplace_back(OPTSCOPE_ATEN_BUILD_PATH); // the build tree (tests, uninstalled binaries)
#endif
#ifdef OPTSCOPE_ATEN_INSTALL_PATH
    builtIn.emplace_back(OPTSCOPE_ATEN_INSTALL_PATH);
#endif
    return static_cast<const Ops*>(openCoreLibrary(
        "liboptscope_aten.so", "OPTSCOPE_ATEN_LIBRARY", builtIn, "optscope_aten_ops_v1",
        [](void* symbol, std::string& why) -> const void* {
            const Ops* ops = reinterpret_cast<const Ops* (*)()>(symbol)();
            if (ops && ops->abiVersion == kOpsAbiVersion) return ops;
            why = "not a matching liboptscope_aten (ABI " + std::to_string(ops ? ops->abiVersion : 0) + ")";
            return nullptr;
        },
        tried));
}

} // namespace

const Ops& ops()
{
    static std::once_flag once;
    static const Ops* table = nullptr;
    static std::string tried;
    std::call_once(once, [] { table = load(tried); });
    if (!table)
        throw Error(ErrorKind::Unsupported, {},
            "the tensor operations library (liboptscope_aten.so, which links libtorch) could not be loaded; set "
            "OPTSCOPE_ATEN_LIBRARY to its path. Tried:"
                + tried);
    return *table;
}

void copyBlock(const ChunkData& src, const std::vector<int64_t>& srcBegin, const std::vector<int64_t>& extent,
    uint8_t* dst, const std::vector<int64_t>& dstShape, const std::vector<int64_t>& dstBegin)
{
    ops().copyBlock(src, srcBegin, extent, dst, dstShape, dstBegin);
}

std::vector<double> toDoubles(const uint8_t* data, DType dtype, int64_t n)
{
    return ops().toDoubles(data, dtype, n);
}

void diffBlock(
    const uint8_t* a, DType da, const uint8_t* b, DType db, int64_t n, double rtol, double atol, DiffAccumulator& acc)
{
    ops().diffBlock(a, da, b, db, n, rtol, atol, acc);
}

void diffHistogram(const uint8_t* a, DType da, const uint8_t* b, DType db, int64_t n, double lo, double hi,
    std::vector<int64_t>& counts)
{
    ops().diffHistogram(a, da, b, db, n, lo, hi, counts);
}

StatsBlock statsBlock(const uint8_t* data, DType dtype, int64_t n)
{
    return ops().statsBlock(data, dtype, n);
}

void statsHistogram(
    const uint8_t* data, DType dtype, int64_t n, double scale, double lo, double hi, std::vector<double>& counts)
{
    ops().statsHistogram(data, dtype, n, scale, lo, hi, counts);
}

std::vector<double> linspace(double lo, double hi, int64_t n)
{
    return ops().linspace(lo, hi, n);
}

bool statsSupported(DType dtype)
{
    return ops().statsSupported(dtype);
}

} // namespace optscope::aten
