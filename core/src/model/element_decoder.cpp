// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/element_decoder.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace optscope {

namespace {

template<typename T> T load(const uint8_t* p)
{
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

double half(uint16_t h)
{
    const int sign = (h >> 15) & 1;
    const int exp = (h >> 10) & 0x1f;
    const int man = h & 0x3ff;
    double v;
    if (exp == 0)
        v = std::ldexp(static_cast<double>(man), -24);
    else if (exp == 31)
        v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else
        v = std::ldexp(1.0 + man / 1024.0, exp - 15);
    return sign ? -v : v;
}

double bfloat16(uint16_t b)
{
    const uint32_t bits = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

/// OCP FP8 and the "fnuz" variants (no inf, NaN at 0x80)
double float8(uint8_t b, int expBits, int manBits, int bias, bool fnuz, bool hasInf)
{
    if (fnuz && b == 0x80) return std::numeric_limits<double>::quiet_NaN();
    const bool sign = (b & 0x80) != 0;
    const int exp = (b >> manBits) & ((1 << expBits) - 1);
    const int man = b & ((1 << manBits) - 1);
    const int maxExp = (1 << expBits) - 1;
    if (!fnuz) {
        if (hasInf && exp == maxExp)
            return man ? std::numeric_limits<double>::quiet_NaN()
                       : (sign ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity());
        if (!hasInf && exp == maxExp && man == (1 << manBits) - 1) return std::numeric_limits<double>::quiet_NaN();
    }
    const double v = exp == 0 ? std::ldexp(static_cast<double>(man), 1 - bias - manBits)
                              : std::ldexp(1.0 + static_cast<double>(man) / (1 << manBits), exp - bias);
    return sign ? -v : v;
}

} // namespace

double ElementDecoder::decode(const uint8_t* p, DType dtype)
{
    switch (dtype) {
    case DType::Float64:
        return load<double>(p);
    case DType::Float32:
        return load<float>(p);
    case DType::Float16:
        return half(load<uint16_t>(p));
    case DType::BFloat16:
        return bfloat16(load<uint16_t>(p));
    case DType::Float8_e5m2:
        return float8(*p, 5, 2, 15, false, true);
    case DType::Float8_e4m3fn:
        return float8(*p, 4, 3, 7, false, false);
    case DType::Float8_e5m2fnuz:
        return float8(*p, 5, 2, 16, true, false);
    case DType::Float8_e4m3fnuz:
        return float8(*p, 4, 3, 8, true, false);
    case DType::Float8_e8m0fnu:
        return *p == 0xff ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, int(*p) - 127);
    case DType::Int8:
        return load<int8_t>(p);
    case DType::Int16:
        return load<int16_t>(p);
    case DType::Int32:
        return load<int32_t>(p);
    case DType::Int64:
        return static_cast<double>(load<int64_t>(p));
    case DType::UInt8:
        return *p;
    case DType::UInt16:
        return load<uint16_t>(p);
    case DType::UInt32:
        return load<uint32_t>(p);
    case DType::UInt64:
        return static_cast<double>(load<uint64_t>(p));
    case DType::Bool:
        return *p ? 1.0 : 0.0;
    case DType::Complex32:
        return half(load<uint16_t>(p));
    case DType::Complex64:
        return load<float>(p);
    case DType::Complex128:
        return load<double>(p);
    default:
        return std::numeric_limits<double>::quiet_NaN();
    }
}

double ElementDecoder::imaginary(const uint8_t* p, DType dtype)
{
    switch (dtype) {
    case DType::Complex32:
        return half(load<uint16_t>(p + 2));
    case DType::Complex64:
        return load<float>(p + 4);
    case DType::Complex128:
        return load<double>(p + 8);
    default:
        return 0.0;
    }
}

std::vector<double> ElementDecoder::decode(const uint8_t* data, size_t count, DType dtype)
{
    std::vector<double> out(count);
    const size_t elem = dtypeSize(dtype);
    for (size_t i = 0; i < count; ++i)
        out[i] = decode(data + i * elem, dtype);
    return out;
}

} // namespace optscope
