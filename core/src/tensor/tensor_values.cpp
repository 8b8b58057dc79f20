// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/tensor/tensor_values.h"
#include "optscope/base/error.h"
#include "optscope/io/storage.h"
#include "optscope/model/element_decoder.h"
#include "optscope/model/py_value.h"
#include "optscope/tensor/tensor_assembler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace optscope {

namespace {
struct Enough
{ };
} // namespace

std::vector<double> readTensorValues(const Checkpoint& cp, const Entry& entry, size_t maxElements)
{
    const size_t elem = dtypeSize(entry.tensor->dtype);
    const size_t want = std::min<uint64_t>(maxElements, static_cast<uint64_t>(entry.tensor->numel())) * elem;
    std::vector<uint8_t> bytes;
    bytes.reserve(want);
    try {
        TensorAssembler(cp, entry, std::max<size_t>(want, 1))
            .readAheadAtMost(want)
            .stream([&](const uint8_t* p, size_t n) {
                const size_t take = std::min(n, want - bytes.size());
                bytes.insert(bytes.end(), p, p + take);
                if (bytes.size() >= want) throw Enough {};
            });
    } catch (const Enough&) { }
    cp.files->checkFaults(); // a truncated file read as zeros: say so instead of returning them
    // decoded here, not through ATen: check and diagnose read `step` values and must not load libtorch
    return ElementDecoder::decode(bytes.data(), bytes.size() / elem, entry.tensor->dtype);
}

namespace {

/// a remote checkpoint's one-element tensors (`step` of every parameter), asked for ahead of @p entry's: callers read
/// them one by one (check, diagnose, a diff's headline, the GUI's rows), each a round trip otherwise (1,000
/// parameters: 1,000). A window of the next 1,024 entries, asked again when the reads come within 256 of its end: all
/// of them at once fetched every block they lie in (steps spread through a rank file: the whole file, held at once)
void askScalarsAhead(const Checkpoint& cp, const Entry& entry)
{
    constexpr size_t kAhead = 1024, kRefill = 256;
    const Entry* first = cp.entries.data();
    const std::less<const Entry*> before; // a total order for pointers into different objects too
    if (before(&entry, first) || !before(&entry, first + cp.entries.size())) return; // not one of cp's entries
    const size_t i = static_cast<size_t>(&entry - first);
    const size_t asked = cp.files->scalarsAskedBefore();
    if (i + kRefill < asked) return;
    const size_t from = std::max(i, asked), to = std::min(cp.entries.size(), i + kAhead);
    if (from >= to || !cp.files->askScalarsBefore(asked, to)) return;
    for (size_t k = from; k < to; ++k) {
        const Entry& e = cp.entries[k];
        if (!e.isTensor() || e.tensor->numel() != 1 || e.tensor->storesNoData()) continue;
        try {
            TensorAssembler::prefetch(cp, e, uint64_t(64) << 10);
        } catch (const Error&) {
            // the read that needs it meets it again, and says so
        }
    }
}

} // namespace

std::optional<double> readScalar(const Checkpoint& cp, const Entry& entry)
{
    if (entry.isTensor()) {
        if (entry.tensor->numel() != 1) return std::nullopt;
        if (isUrl(cp.path) && cp.files) askScalarsAhead(cp, entry);
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
    auto is0dim = [](const Entry& e) { return e.isTensor() && e.tensor->shape.empty(); };
    if (!((isNumber(ea) && is0dim(eb)) || (is0dim(ea) && isNumber(eb)))) return false;
    const auto x = readScalar(a, ea);
    const auto y = readScalar(b, eb);
    return x && y && *x == *y;
}

} // namespace optscope
