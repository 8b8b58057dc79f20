// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"
#include "optscope/model/py_value.h"

#include <functional>
#include <vector>

namespace optscope {

struct FlattenedLeaf
{
    KeyPath path;
    const PyValue* value = nullptr;
    /// the value may be reached again by another path: it, or a container above it, is referenced from more than one
    /// place (PyValue::pinned)
    bool shared = false;
};

/// How deep a state dict is descended (flattenStateDict's default): deeper nesting becomes one value
constexpr int kMaxStateDepth = 200;

/// Flattens a nested state dict the way DCP's flatten_state_dict (torch 2.4+ traverse_state_dict) does:
/// every mapping is descended (keys become str(key)); a list or tuple is descended (indices as path items) only if
/// it holds a tensor or a mapping at some depth; anything else is a leaf. An empty mapping below the root is a leaf
/// (DCP's save drops them, but a file that holds one needs it back: an optimizer's "state": {} before its first step).
/// A root that is not a mapping is traversed from the empty path (a bare tensor becomes the leaf "").
/// Graphs deeper than @p maxDepth stop there and the rest becomes one leaf; so does a container reached again on its
/// own path (a cycle). A container referenced from several places (one object shared through the pickle memo) is
/// expanded at each, as DCP would, but such repeats add at most 2^20 path elements in all (a few bytes of pickle can
/// describe an exponentially large tree); past that a repeated container stays one leaf.
/// Throws Error(Limit) when the leaves' key paths would take more than kMaxKeyPathBytes.
std::vector<FlattenedLeaf> flattenStateDict(const PyValue* root, int maxDepth = kMaxStateDepth);
/// flattenStateDict, handing each leaf to @p sink as it is found instead of collecting them (a reader builds its
/// entries without holding every leaf's key path twice)
void forEachStateLeaf(
    const PyValue* root, const std::function<void(FlattenedLeaf&&)>& sink, int maxDepth = kMaxStateDepth);
/// How many leaves forEachStateLeaf hands out, found by the same walk without making any key (a reader reserves its
/// entries with it: growing a vector of 100k entries by doubling peaks at 1.5 times their size)
size_t countStateLeaves(const PyValue* root, int maxDepth = kMaxStateDepth);

/// The most memory the key paths of a checkpoint's entries (and of one flattening) may take. Every leaf copies each
/// key on its path, so one long key string, shared through the pickle memo at every level of a deep nesting, would
/// multiply into gigabytes. Real checkpoints stay far below (100k entries with 6-level paths take about 40 MiB).
constexpr uint64_t kMaxKeyPathBytes = uint64_t(1) << 30;
/// what @p path costs against kMaxKeyPathBytes: its elements with their text, and its joined key
uint64_t keyPathBytes(const KeyPath& path);

} // namespace optscope
