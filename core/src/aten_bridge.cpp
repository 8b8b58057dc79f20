// SPDX-License-Identifier: GPL-3.0-or-later
#include "aten_impl.h"
#include "aten_scalar_type.h"

#include <optional>

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace optscope::aten::impl {

namespace {

/// a byte view [sizes..., elem] over strided elements
at::Tensor byteView(
    const uint8_t* base, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, size_t elem)
{
    std::vector<int64_t> s(sizes);
    std::vector<int64_t> st;
    st.reserve(strides.size() + 1);
    for (auto x : strides)
        st.push_back(x * static_cast<int64_t>(elem));
    s.push_back(static_cast<int64_t>(elem));
    st.push_back(1);
    // read-only use: the mapping is PROT_READ, and the view is only ever a copy_ source
    return at::from_blob(const_cast<uint8_t*>(base), s, st, at::TensorOptions().dtype(at::kByte));
}

std::vector<int64_t> denseStrides(const std::vector<int64_t>& shape)
{
    std::vector<int64_t> st(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;)
        st[d - 1] = st[d] * shape[d];
    return st;
}

} // namespace

void copyBlock(const ChunkData& src, const std::vector<int64_t>& srcBegin, const std::vector<int64_t>& extent,
    uint8_t* dst, const std::vector<int64_t>& dstShape, const std::vector<int64_t>& dstBegin)
{
    const size_t elem = src.elementSize();
    at::Tensor s = byteView(src.data(), src.sizes, src.strides, elem);
    at::Tensor d = byteView(dst, dstShape, denseStrides(dstShape), elem);
    for (size_t i = 0; i < extent.size(); ++i) {
        s = s.narrow(static_cast<int64_t>(i), srcBegin[i], extent[i]);
        d = d.narrow(static_cast<int64_t>(i), dstBegin[i], extent[i]);
    }
    if (src.bigEndian && elem > 1) {
        // reverse the bytes of each element; complex numbers are two floats, each swapped on its own
        if (dtypeIsComplex(src.dtype)) {
            std::vector<int64_t> split(s.sizes().begin(), s.sizes().end() - 1);
            split.push_back(2);
            split.push_back(static_cast<int64_t>(elem / 2));
            s = s.reshape(split).flip({-1}).reshape(s.sizes());
        } else {
            s = s.flip({-1});
        }
    }
    d.copy_(s);
}

namespace {

/// float8 formats (OCP FP8 and the AMD "fnuz" variants): sign, exponent bits, mantissa bits, bias, and where NaN is
double decodeFloat8(uint8_t b, int expBits, int manBits, int bias, bool fnuz, bool hasInf)
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
        if (!hasInf && exp == maxExp && man == (1 << manBits) - 1)
            return std::numeric_limits<double>::quiet_NaN(); // e4m3fn: S.1111.111
    }
    double v;
    if (exp == 0)
        v = std::ldexp(static_cast<double>(man), 1 - bias - manBits);
    else
        v = std::ldexp(1.0 + static_cast<double>(man) / (1 << manBits), exp - bias);
    return sign ? -v : v;
}

template<typename T> T load(const uint8_t* p)
{
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

} // namespace

std::vector<double> toDoubles(const uint8_t* data, DType dtype, int64_t n)
{
    std::vector<double> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
    if (n <= 0) return out;
    if (auto st = realScalarType(dtype)) {
        at::Tensor src = at::from_blob(const_cast<uint8_t*>(data), {n}, at::TensorOptions().dtype(*st));
        at::Tensor dst = at::from_blob(out.data(), {n}, at::TensorOptions().dtype(at::kDouble));
        dst.copy_(src);
        return out;
    }
    const size_t elem = dtypeSize(dtype);
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t* p = data + static_cast<size_t>(i) * elem;
        double v = std::numeric_limits<double>::quiet_NaN();
        switch (dtype) {
        case DType::UInt16:
            v = load<uint16_t>(p);
            break;
        case DType::UInt32:
            v = load<uint32_t>(p);
            break;
        case DType::UInt64:
            v = static_cast<double>(load<uint64_t>(p));
            break;
        case DType::Float8_e5m2:
            v = decodeFloat8(*p, 5, 2, 15, false, true);
            break;
        case DType::Float8_e4m3fn:
            v = decodeFloat8(*p, 4, 3, 7, false, false);
            break;
        case DType::Float8_e5m2fnuz:
            v = decodeFloat8(*p, 5, 2, 16, true, false);
            break;
        case DType::Float8_e4m3fnuz:
            v = decodeFloat8(*p, 4, 3, 8, true, false);
            break;
        case DType::Float8_e8m0fnu:
            v = *p == 0xff ? v : std::ldexp(1.0, int(*p) - 127);
            break;
        case DType::Complex64:
            v = load<float>(p);
            break;
        case DType::Complex128:
            v = load<double>(p);
            break;
        case DType::Complex32: {
            at::Half h;
            std::memcpy(&h, p, 2);
            v = static_cast<float>(h);
            break;
        }
        default:
            break;
        }
        out[static_cast<size_t>(i)] = v;
    }
    return out;
}

} // namespace optscope::aten::impl
