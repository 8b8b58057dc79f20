// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"

#include <QString>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace optscope::ui {

/// The checkpoint's entries as a tree of their key paths (model / optim / state / FQN / state name, ...): one node per
/// path element, so an FQN stays one node. Built once per checkpoint, off the UI thread; immutable afterwards.
class KeyTree
{
public:
    struct Node
    {
        int parent = -1;
        int row = 0; ///< position among the parent's children
        int entry = -1; ///< index into Checkpoint::entries for a leaf, -1 for inner nodes
        QString name; ///< the path element
        std::string key; ///< joined path of this node (the entry key for leaves)
        std::vector<int> children;
        int64_t numel = 0; ///< sum over the tensors below
        uint64_t bytes = 0;
        int tensors = 0;
        int leaves = 0;
    };

    static std::shared_ptr<const KeyTree> build(const Checkpoint& checkpoint);

    static constexpr int Root = 0;
    const Node& node(int i) const { return m_nodes[static_cast<size_t>(i)]; }
    int size() const { return static_cast<int>(m_nodes.size()); }
    /// node of a key (an entry key or an inner node's joined path), -1 if none
    int find(const std::string& key) const;

private:
    std::vector<Node> m_nodes;
    std::unordered_map<std::string, int> m_byKey;
};

} // namespace optscope::ui
