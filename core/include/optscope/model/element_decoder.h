// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/dtype.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace optscope {

/// Little-endian element bytes (as TensorAssembler streams them) to doubles, without ATen: reading a few values (a
/// `step`, a preview) must not load libtorch. The one decoder for every dtype libtorch 1.13 lacks, too.
/// Complex numbers give their real part; types without a numeric meaning (quantized, packed bits) give NaN.
class ElementDecoder
{
public:
    static double decode(const uint8_t* element, DType dtype);
    static std::vector<double> decode(const uint8_t* data, size_t count, DType dtype);
    /// complex dtypes: the imaginary part of one element (0 otherwise)
    static double imaginary(const uint8_t* element, DType dtype);
};

} // namespace optscope
