// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/dtype.h"

#include <array>
#include <string>

namespace optscope {

namespace {

struct DTypeInfo
{
    DType dtype;
    std::string_view name;
    size_t size;
    std::string_view storageClass; ///< legacy typed storage class, empty if none
};

constexpr std::array<DTypeInfo, 32> kInfos = {{
    {DType::Float64, "float64", 8, "DoubleStorage"},
    {DType::Float32, "float32", 4, "FloatStorage"},
    {DType::Float16, "float16", 2, "HalfStorage"},
    {DType::BFloat16, "bfloat16", 2, "BFloat16Storage"},
    {DType::Float8_e5m2, "float8_e5m2", 1, ""},
    {DType::Float8_e4m3fn, "float8_e4m3fn", 1, ""},
    {DType::Float8_e5m2fnuz, "float8_e5m2fnuz", 1, ""},
    {DType::Float8_e4m3fnuz, "float8_e4m3fnuz", 1, ""},
    {DType::Float8_e8m0fnu, "float8_e8m0fnu", 1, ""},
    {DType::Int8, "int8", 1, "CharStorage"},
    {DType::Int16, "int16", 2, "ShortStorage"},
    {DType::Int32, "int32", 4, "IntStorage"},
    {DType::Int64, "int64", 8, "LongStorage"},
    {DType::UInt8, "uint8", 1, "ByteStorage"},
    {DType::UInt16, "uint16", 2, ""},
    {DType::UInt32, "uint32", 4, ""},
    {DType::UInt64, "uint64", 8, ""},
    {DType::Bool, "bool", 1, "BoolStorage"},
    {DType::Complex32, "complex32", 4, "ComplexHalfStorage"},
    {DType::Complex64, "complex64", 8, "ComplexFloatStorage"},
    {DType::Complex128, "complex128", 16, "ComplexDoubleStorage"},
    {DType::QInt8, "qint8", 1, "QInt8Storage"},
    {DType::QUInt8, "quint8", 1, "QUInt8Storage"},
    {DType::QInt32, "qint32", 4, "QInt32Storage"},
    {DType::QUInt4x2, "quint4x2", 1, "QUInt4x2Storage"},
    {DType::QUInt2x4, "quint2x4", 1, "QUInt2x4Storage"},
    {DType::Bits8, "bits8", 1, ""},
    {DType::Bits16, "bits16", 2, ""},
    {DType::Bits1x8, "bits1x8", 1, ""},
    {DType::Bits2x4, "bits2x4", 1, ""},
    {DType::Bits4x2, "bits4x2", 1, ""},
    {DType::Float4_e2m1fn_x2, "float4_e2m1fn_x2", 1, ""},
}};

struct Alias
{
    std::string_view alias;
    DType dtype;
};
constexpr std::array<Alias, 10> kAliases = {{
    {"double", DType::Float64},
    {"float", DType::Float32},
    {"half", DType::Float16},
    {"short", DType::Int16},
    {"int", DType::Int32},
    {"long", DType::Int64},
    {"cfloat", DType::Complex64},
    {"cdouble", DType::Complex128},
    {"chalf", DType::Complex32},
    {"complex", DType::Complex64},
}};

} // namespace

std::string_view dtypeName(DType dtype)
{
    for (const auto& i : kInfos)
        if (i.dtype == dtype) return i.name;
    return "unknown";
}

size_t dtypeSize(DType dtype)
{
    for (const auto& i : kInfos)
        if (i.dtype == dtype) return i.size;
    return 1;
}

std::optional<DType> dtypeFromName(std::string_view name)
{
    if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
    for (const auto& i : kInfos)
        if (i.name == name) return i.dtype;
    for (const auto& a : kAliases)
        if (a.alias == name) return a.dtype;
    return std::nullopt;
}

std::optional<DType> dtypeFromStorageClass(std::string_view className)
{
    const auto dot = className.rfind('.');
    if (dot != std::string_view::npos) className.remove_prefix(dot + 1);
    if (className == "UntypedStorage") return DType::UInt8;
    for (const auto& i : kInfos)
        if (!i.storageClass.empty() && i.storageClass == className) return i.dtype;
    return std::nullopt;
}

std::string_view dtypeStorageClass(DType dtype)
{
    for (const auto& i : kInfos)
        if (i.dtype == dtype) return i.storageClass;
    return {};
}

DType dtypeStoredAs(DType dtype)
{
    switch (dtype) {
    case DType::QInt32:
        return DType::Int32;
    case DType::QInt8:
        return DType::Int8;
    case DType::QUInt8:
    case DType::QUInt4x2:
    case DType::QUInt2x4:
        return DType::UInt8;
    default:
        return dtype;
    }
}

bool dtypeIsQuantized(DType dtype)
{
    return dtypeStoredAs(dtype) != dtype;
}

bool dtypeIsFloatingPoint(DType d)
{
    switch (d) {
    case DType::Float64:
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float8_e5m2:
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2fnuz:
    case DType::Float8_e4m3fnuz:
    case DType::Float8_e8m0fnu:
        return true;
    default:
        return false;
    }
}

bool dtypeIsComplex(DType d)
{
    return d == DType::Complex32 || d == DType::Complex64 || d == DType::Complex128;
}

} // namespace optscope
