// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/optim/param_groups_table.h"

#include "optscope/base/error.h"
#include "optscope/tensor/scalar_value.h"

#include <algorithm>
#include <set>

namespace optscope {

namespace {

const char* const kFirst[] = {"lr", "betas", "eps", "weight_decay", "momentum"};

std::string cellText(const Checkpoint& cp, const Entry& e)
{
    if (!e.isTensor()) return pyRepr(e.value, 80);
    try {
        // a tensor lr (capturable / compiled optimizers) reads as its value
        if (auto v = scalarValueText(cp, e)) return *v;
    } catch (const Error&) { }
    return "tensor " + shapeText(e.tensor->shape);
}

} // namespace

ParamGroupsTable paramGroupsTable(const Checkpoint& checkpoint, const OptimizerView& optimizer)
{
    ParamGroupsTable t;
    std::set<std::string> names;
    for (const auto& g : optimizer.groups)
        for (const auto& [name, entry] : g.hyperparams)
            if (name != "params" && name != "param_names") names.insert(name);
    for (const char* n : kFirst)
        if (names.erase(n)) t.columns.emplace_back(n);
    t.columns.insert(t.columns.end(), names.begin(), names.end());
    for (const auto& g : optimizer.groups) {
        std::vector<std::string> row;
        row.reserve(t.columns.size());
        for (const auto& c : t.columns) {
            const auto it = g.hyperparams.find(c);
            row.push_back(it != g.hyperparams.end() && it->second ? cellText(checkpoint, *it->second) : std::string());
        }
        t.cells.push_back(std::move(row));
        t.paramCounts.push_back(g.params.size());
    }
    return t;
}

std::vector<std::vector<bool>> differingCells(const ParamGroupsTable& a, const ParamGroupsTable& b)
{
    std::vector<std::vector<bool>> out(a.cells.size(), std::vector<bool>(a.columns.size(), true));
    for (size_t c = 0; c < a.columns.size(); ++c) {
        const auto bc = std::find(b.columns.begin(), b.columns.end(), a.columns[c]);
        if (bc == b.columns.end()) continue;
        const size_t j = static_cast<size_t>(bc - b.columns.begin());
        for (size_t g = 0; g < a.cells.size() && g < b.cells.size(); ++g)
            out[g][c] = a.cells[g][c] != b.cells[g][j];
    }
    return out;
}

} // namespace optscope
