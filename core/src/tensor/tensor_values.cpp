// SPDX-License-Identifier: GPL-3.0-or-later
#include "tensor_values.h"
#include "optscope/element_decoder.h"
#include "optscope/error.h"
#include "optscope/optimizer_view.h"
#include "optscope/py_value.h"
#include "optscope/scalar_value.h"
#include "optscope/tensor_assembler.h"

#include <cmath>
#include <cstdio>

namespace optscope {

namespace {
struct Enough
{ };
} // namespace

std::vector<double> readTensorValues(const Checkpoint& cp, const Entry& entry, size_t maxElements)
{
    const size_t elem = dtypeSize(entry.tensor.dtype);
    const size_t want = std::min<uint64_t>(maxElements, static_cast<uint64_t>(entry.tensor.numel())) * elem;
    std::vector<uint8_t> bytes;
    bytes.reserve(want);
    try {
        TensorAssembler(cp, entry, std::max<size_t>(want, 1)).stream([&](const uint8_t* p, size_t n) {
            const size_t take = std::min(n, want - bytes.size());
            bytes.insert(bytes.end(), p, p + take);
            if (bytes.size() >= want) throw Enough {};
        });
    } catch (const Enough&) { }
    cp.files->checkFaults(); // a truncated file read as zeros: say so instead of returning them
    // decoded here, not through ATen: check and diagnose read `step` values and must not load libtorch
    return ElementDecoder::decode(bytes.data(), bytes.size() / elem, entry.tensor.dtype);
}

std::optional<double> readScalar(const Checkpoint& cp, const Entry& entry)
{
    if (entry.isTensor()) {
        if (entry.tensor.numel() != 1) return std::nullopt;
        const auto v = readTensorValues(cp, entry, 1);
        return v.empty() ? std::nullopt : std::optional<double>(v[0]);
    }
    const PyValue* v = entry.value;
    if (!v) return std::nullopt;
    switch (v->kind) {
    case PyKind::Int:
        return static_cast<double>(v->integer);
    case PyKind::Float:
        return v->real;
    case PyKind::Bool:
        return v->boolean ? 1.0 : 0.0;
    default:
        return std::nullopt;
    }
}

bool sameNumberStoredTwoWays(const Checkpoint& a, const Entry& ea, const Checkpoint& b, const Entry& eb)
{
    auto isNumber = [](const Entry& e) {
        return !e.isTensor() && e.value && (e.value->kind == PyKind::Int || e.value->kind == PyKind::Float);
    };
    auto is0dim = [](const Entry& e) { return e.isTensor() && e.tensor.shape.empty(); };
    if (!((isNumber(ea) && is0dim(eb)) || (is0dim(ea) && isNumber(eb)))) return false;
    const auto x = readScalar(a, ea);
    const auto y = readScalar(b, eb);
    return x && y && *x == *y;
}

bool isScalarEntry(const Entry& entry)
{
    // complex numbers are not one number: their statistics (real parts) say more than a repr of half of it
    if (entry.isTensor()) return entry.tensor.numel() == 1 && !dtypeIsComplex(entry.tensor.dtype);
    const PyValue* v = entry.value;
    return v && (v->kind == PyKind::Int || v->kind == PyKind::Float || v->kind == PyKind::Bool);
}

std::optional<std::string> scalarValueText(const Checkpoint& cp, const Entry& entry)
{
    if (!isScalarEntry(entry)) return std::nullopt;
    if (!entry.isTensor()) return pyRepr(entry.value);
    const auto v = readScalar(cp, entry);
    if (!v) return std::nullopt;
    const DType dt = entry.tensor.dtype;
    if (dt == DType::Bool) return *v != 0.0 ? "True" : "False";
    if (dtypeIsFloatingPoint(dt) || dtypeIsComplex(dt) || !std::isfinite(*v)) return pyFloatRepr(*v);
    // integer dtypes print without a fraction (int64 beyond 2^53 loses digits in the double, as readScalar does)
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", *v);
    return std::string(buf);
}

namespace {

/// the smallest and largest `step` over every parameter of every optimizer; nullopt without any
std::optional<std::pair<double, double>> stepRange(const Checkpoint& cp)
{
    std::optional<std::pair<double, double>> range;
    for (const auto& view : findOptimizers(cp))
        for (const auto& param : view.params) {
            const auto it = param.states.find("step");
            if (it == param.states.end() || !it->second) continue;
            std::optional<double> v;
            try {
                v = readScalar(cp, *it->second);
            } catch (const Error&) {
                continue; // reported by check/diagnose; the headline uses what can be read
            }
            if (!v || std::isnan(*v)) continue;
            if (!range)
                range = std::make_pair(*v, *v);
            else
                range = std::make_pair(std::min(range->first, *v), std::max(range->second, *v));
        }
    return range;
}

std::string stepText(double v)
{
    // steps count iterations: 3.0 reads as 3
    if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.0f", v);
        return buf;
    }
    return pyFloatRepr(v);
}

std::string rangeText(const std::pair<double, double>& r)
{
    return r.first == r.second ? stepText(r.first) : stepText(r.first) + "\u2013" + stepText(r.second);
}

} // namespace

std::string stepChangeText(const Checkpoint& a, const Checkpoint& b)
{
    const auto ra = stepRange(a);
    const auto rb = stepRange(b);
    if (!ra || !rb || *ra == *rb) return {};
    return "step " + rangeText(*ra) + " \u2192 " + rangeText(*rb);
}

} // namespace optscope
