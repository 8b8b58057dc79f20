// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace optscope {

/// Every element type PyTorch writes to disk. Names follow PyTorch without the "torch." prefix.
enum class DType : unsigned char {
    Float64,
    Float32,
    Float16,
    BFloat16,
    Float8_e5m2,
    Float8_e4m3fn,
    Float8_e5m2fnuz,
    Float8_e4m3fnuz,
    Float8_e8m0fnu,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Bool,
    Complex32,
    Complex64,
    Complex128,
    QInt8,
    QUInt8,
    QInt32,
    QUInt4x2,
    QUInt2x4,
    Bits8,
    Bits16,
    Bits1x8,
    Bits2x4,
    Bits4x2,
    Float4_e2m1fn_x2,
    Unknown,
};

/// "float32", "bfloat16", ... (PyTorch's name without "torch.")
std::string_view dtypeName(DType dtype);
/// bytes per element (1 for bool and the packed sub-byte types)
size_t dtypeSize(DType dtype);
/// from "float32" or "torch.float32"; also PyTorch's aliases ("float", "half", "long", ...)
std::optional<DType> dtypeFromName(std::string_view name);
/// from a legacy storage class name ("FloatStorage", "BFloat16Storage", ...); UntypedStorage gives UInt8
std::optional<DType> dtypeFromStorageClass(std::string_view className);
/// the legacy typed storage class of @p dtype ("FloatStorage", "QUInt8Storage", ...); empty if it has none
std::string_view dtypeStorageClass(DType dtype);
/// the plain dtype whose elements a storage of @p dtype holds byte for byte: a quantized dtype's integers (qint8 ->
/// int8, quint8 and the packed quint4x2/quint2x4 -> uint8, qint32 -> int32); @p dtype itself otherwise
DType dtypeStoredAs(DType dtype);
/// qint8, quint8, qint32, quint4x2, quint2x4: their values need scales and zero points besides the stored integers
bool dtypeIsQuantized(DType dtype);
bool dtypeIsFloatingPoint(DType dtype);
bool dtypeIsComplex(DType dtype);

} // namespace optscope
