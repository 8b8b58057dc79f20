// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/state_flattener.h"

namespace optscope {

namespace {

bool holdsTensorOrMapping(const PyValue* v, int depth)
{
    if (depth <= 0)
        return false;
    for (const auto* item : v->items()) {
        if (item->kind == PyKind::Tensor || item->kind == PyKind::Dict)
            return true;
        if (item->isSequence() && holdsTensorOrMapping(item, depth - 1))
            return true;
    }
    return false;
}

void traverse(KeyPath& path, const PyValue* v, int depth, std::vector<FlattenedLeaf>& out)
{
    if (depth > 0 && v->kind == PyKind::Dict) {
        for (size_t i = 0; i < v->size(); ++i) {
            path.push_back(KeyPathElem::fromKey(pyStr(v->dictKey(i))));
            path.back().keyValue = v->dictKey(i);
            traverse(path, v->dictValue(i), depth - 1, out);
            path.pop_back();
        }
        return;
    }
    if (depth > 0 && v->isSequence() && holdsTensorOrMapping(v, depth)) {
        for (size_t i = 0; i < v->size(); ++i) {
            path.push_back(KeyPathElem::fromIndex(static_cast<int64_t>(i)));
            path.back().inTuple = v->kind == PyKind::Tuple;
            traverse(path, v->item(i), depth - 1, out);
            path.pop_back();
        }
        return;
    }
    out.push_back({path, v});
}

} // namespace

std::vector<FlattenedLeaf> flattenStateDict(const PyValue* root, int maxDepth)
{
    std::vector<FlattenedLeaf> out;
    if (!root)
        return out;
    KeyPath path;
    traverse(path, root, maxDepth, out);
    return out;
}

} // namespace optscope
