// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/checkpoint.h"
#include "optscope/py_value.h"

#include <vector>

namespace optscope {

struct FlattenedLeaf
{
    KeyPath path;
    const PyValue* value = nullptr;
};

/// Flattens a nested state dict the way DCP's flatten_state_dict (torch 2.4+ traverse_state_dict) does:
/// every mapping is descended (keys become str(key)); a list or tuple is descended (indices as path items) only if
/// it holds a tensor or a mapping at some depth; anything else is a leaf. Empty mappings produce no leaf, as in DCP.
/// A root that is not a mapping is traversed from the empty path (a bare tensor becomes the leaf "").
/// Graphs deeper than @p maxDepth (or cyclic) stop there and the rest becomes one leaf.
std::vector<FlattenedLeaf> flattenStateDict(const PyValue* root, int maxDepth = 200);

} // namespace optscope
