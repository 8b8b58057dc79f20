// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/aten/aten_impl.h"
#include "optscope/aten/aten_scalar_type.h"
#include "optscope/model/element_decoder.h"

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
    // dtypes libtorch 1.13 lacks (float8, uint16-64) and complex32: the core's one element decoder
    const size_t elem = dtypeSize(dtype);
    for (int64_t i = 0; i < n; ++i)
        out[static_cast<size_t>(i)] = ElementDecoder::decode(data + static_cast<size_t>(i) * elem, dtype);
    return out;
}

} // namespace optscope::aten::impl
