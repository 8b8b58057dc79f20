// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/tensor/scalar_value.h"
#include "optscope/model/py_value.h"
#include "optscope/tensor/tensor_values.h"

#include <cmath>
#include <cstdio>

namespace optscope {

bool isScalarEntry(const Entry& entry)
{
    // complex numbers are not one number: their statistics (real parts) say more than a repr of half of it
    if (entry.isTensor()) return entry.tensor->numel() == 1 && !dtypeIsComplex(entry.tensor->dtype);
    const PyValue* v = entry.value;
    return v && (v->kind == PyKind::Int || v->kind == PyKind::Float || v->kind == PyKind::Bool);
}

std::optional<std::string> scalarValueText(const Checkpoint& cp, const Entry& entry)
{
    if (!isScalarEntry(entry)) return std::nullopt;
    if (!entry.isTensor()) return pyRepr(entry.value);
    const auto v = readScalar(cp, entry);
    if (!v) return std::nullopt;
    const DType dt = entry.tensor->dtype;
    if (dt == DType::Bool) return *v != 0.0 ? "True" : "False";
    if (dtypeIsFloatingPoint(dt) || dtypeIsComplex(dt) || !std::isfinite(*v)) return pyFloatRepr(*v);
    // integer dtypes print without a fraction (int64 beyond 2^53 loses digits in the double, as readScalar does)
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", *v);
    return std::string(buf);
}

} // namespace optscope
