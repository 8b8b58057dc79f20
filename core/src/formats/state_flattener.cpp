// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/state_flattener.h"
#include "optscope/base/error.h"

#include <unordered_map>
#include <unordered_set>

namespace optscope {

namespace {

/// Path elements (items times their depth) that re-expanding containers already expanded once (shared references:
/// the same object under two keys) may add in total. Pickles share objects through the memo, so a few bytes can
/// describe a DAG whose expansion is exponential; past this budget a repeated container stays one leaf.
constexpr size_t kMaxRepeatedPathElements = size_t(1) << 20;

struct Walk
{
    std::unordered_map<const PyValue*, std::pair<bool, int>> holds; ///< holdsTensorOrMapping: (answer, depth)
    // Only a pinned container (one referred to from more than one place) can be met twice or close a cycle, so only
    // pinned ones are looked up in these sets: an unpinned one is met again only inside a repeated expansion of a
    // pinned ancestor (repeatedOnPath), and is charged as repeated then. 1M plain values spent a second here.
    std::unordered_set<const PyValue*> active; ///< pinned containers on the current path: a cycle back is a leaf
    std::unordered_set<const PyValue*> expanded; ///< pinned containers expanded at least once
    int repeatedOnPath = 0; ///< containers on the current path expanded for a second (or later) time
    size_t repeatBudget = kMaxRepeatedPathElements;
    uint64_t pathBytes = 0; ///< keyPathBytes of the current path
    uint64_t totalBytes = 0; ///< keyPathBytes of every leaf so far
    const std::function<void(FlattenedLeaf&&)>* sink = nullptr;
    size_t leaves = 0;
    int pinnedOnPath = 0; ///< pinned containers on the current path
};

uint64_t elemBytes(const KeyPathElem& e)
{
    return sizeof(KeyPathElem) + 2 * e.key.size() + 1; // the element, its key, and the key in the joined key
}

/// does the sequence hold a tensor or a mapping within @p depth levels (through nested sequences)? Memoized per
/// sequence with the depth it was answered for: a false answer holds for every smaller depth, a true one for every
/// larger one, so shared sequences are walked at most once per depth, never exponentially often.
bool holdsTensorOrMapping(const PyValue* v, int depth, Walk& w)
{
    if (depth <= 0) return false;
    auto it = w.holds.find(v);
    if (it != w.holds.end()) {
        const auto [found, at] = it->second;
        if (found ? depth >= at : depth <= at) return found;
    }
    w.holds[v] = {false, depth}; // in progress: a cycle back to v adds nothing
    bool found = false;
    for (const auto* item : v->items()) {
        if (item->kind == PyKind::Tensor || item->kind == PyKind::Dict
            || (item->isSequence() && holdsTensorOrMapping(item, depth - 1, w))) {
            found = true;
            break;
        }
    }
    w.holds[v] = {found, depth};
    return found;
}

/// kCount: only count the leaves, making no key strings; the path then holds placeholder elements, because the
/// repeat budget depends on its length
template<bool kCount> void traverse(KeyPath& path, const PyValue* v, int depth, Walk& w)
{
    // an empty mapping below the root is a leaf of its own: DCP's save drops it, but a file that holds one (an
    // optimizer's "state": {} before its first step, Lightning's loop states) needs it back to load
    const bool emptyMapping = v->kind == PyKind::Dict && v->size() == 0 && !path.empty();
    const bool descend = depth > 0 && !emptyMapping
        && (v->kind == PyKind::Dict || (v->isSequence() && holdsTensorOrMapping(v, depth, w)));
    if (descend && (!v->pinned || !w.active.count(v))) {
        const bool repeated = v->pinned ? !w.expanded.insert(v).second : w.repeatedOnPath > 0;
        const size_t charge = v->size() * (path.size() + 1);
        if (!repeated || charge <= w.repeatBudget) {
            if (repeated) w.repeatBudget -= charge;
            if (v->pinned) {
                w.active.insert(v);
                ++w.pinnedOnPath;
            }
            w.repeatedOnPath += repeated;
            for (size_t i = 0; i < v->size(); ++i) {
                if constexpr (kCount) {
                    path.emplace_back();
                    traverse<kCount>(path, v->kind == PyKind::Dict ? v->dictValue(i) : v->item(i), depth - 1, w);
                    path.pop_back();
                    continue;
                }
                if (v->kind == PyKind::Dict) {
                    path.push_back(KeyPathElem::fromKey(pyStr(v->dictKey(i))));
                    path.back().keyValue = v->dictKey(i);
                    w.pathBytes += elemBytes(path.back());
                    traverse<kCount>(path, v->dictValue(i), depth - 1, w);
                } else {
                    path.push_back(KeyPathElem::fromIndex(static_cast<int64_t>(i)));
                    path.back().inTuple = v->kind == PyKind::Tuple;
                    w.pathBytes += elemBytes(path.back());
                    traverse<kCount>(path, v->item(i), depth - 1, w);
                }
                w.pathBytes -= elemBytes(path.back());
                path.pop_back();
            }
            w.repeatedOnPath -= repeated;
            if (v->pinned) {
                --w.pinnedOnPath;
                w.active.erase(v);
            }
            return;
        }
    }
    ++w.leaves;
    if constexpr (kCount) return;
    w.totalBytes += w.pathBytes;
    if (w.totalBytes > kMaxKeyPathBytes)
        throw Error(ErrorKind::Limit, {},
            "the state dict's key paths take more than " + std::to_string(kMaxKeyPathBytes >> 20)
                + " MiB (long keys repeated through deep nesting)");
    (*w.sink)({path, v, v->pinned || w.pinnedOnPath > 0});
}

} // namespace

uint64_t keyPathBytes(const KeyPath& path)
{
    uint64_t bytes = 0;
    for (const auto& e : path)
        bytes += elemBytes(e);
    return bytes;
}

void forEachStateLeaf(const PyValue* root, const std::function<void(FlattenedLeaf&&)>& sink, int maxDepth)
{
    if (!root) return;
    Walk w;
    w.sink = &sink;
    KeyPath path;
    traverse<false>(path, root, maxDepth, w);
}

size_t countStateLeaves(const PyValue* root, int maxDepth)
{
    if (!root) return 0;
    Walk w;
    KeyPath path;
    traverse<true>(path, root, maxDepth, w);
    return w.leaves;
}

std::vector<FlattenedLeaf> flattenStateDict(const PyValue* root, int maxDepth)
{
    std::vector<FlattenedLeaf> out;
    forEachStateLeaf(
        root, [&](FlattenedLeaf&& leaf) { out.push_back(std::move(leaf)); }, maxDepth);
    return out;
}

} // namespace optscope
