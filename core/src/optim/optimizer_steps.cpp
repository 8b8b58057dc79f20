// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/optim/optimizer_steps.h"
#include "optscope/base/error.h"
#include "optscope/io/storage.h"
#include "optscope/optim/optimizer_view.h"
#include "optscope/tensor/tensor_values.h"

#include <cmath>
#include <cstdio>
#include <optional>

namespace optscope {

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

TrainingOrder trainingOrder(const Checkpoint& a, const Checkpoint& b)
{
    const auto ra = stepRange(a);
    const auto rb = stepRange(b);
    if (ra && rb && *ra != *rb) {
        const bool aLater = ra->second != rb->second ? ra->second > rb->second : ra->first > rb->first;
        return {aLater ? 1 : -1, TrainingOrder::By::Step};
    }
    const int64_t ta = statLocation(a.path).modifiedNs;
    const int64_t tb = statLocation(b.path).modifiedNs;
    if (ta == 0 || tb == 0 || ta == tb) return {};
    return {ta > tb ? 1 : -1, TrainingOrder::By::WriteTime};
}

} // namespace optscope
