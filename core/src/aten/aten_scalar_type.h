// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal, inside liboptscope_aten.so only: our dtypes as ATen scalar types.

#include "optscope/model/dtype.h"

#include <c10/core/ScalarType.h>

#include <optional>

namespace optscope::aten::impl {

/// The ATen scalar type of a real (or bool) dtype that libtorch 1.13 and 2.x both have; nullopt for complex
/// dtypes, the float8 family and unsigned 16/32/64-bit ints, which callers decode themselves.
inline std::optional<c10::ScalarType> realScalarType(DType d)
{
    switch (d) {
    case DType::Float64:
        return c10::kDouble;
    case DType::Float32:
        return c10::kFloat;
    case DType::Float16:
        return c10::kHalf;
    case DType::BFloat16:
        return c10::kBFloat16;
    case DType::Int8:
        return c10::kChar;
    case DType::Int16:
        return c10::kShort;
    case DType::Int32:
        return c10::kInt;
    case DType::Int64:
        return c10::kLong;
    case DType::UInt8:
        return c10::kByte;
    case DType::Bool:
        return c10::kBool;
    default:
        return std::nullopt;
    }
}

} // namespace optscope::aten::impl
