// SPDX-License-Identifier: GPL-3.0-or-later
#include "session/keytree.h"

#include "optscope/base/display_text.h"

namespace optscope::ui {

std::shared_ptr<const KeyTree> KeyTree::build(const Checkpoint& checkpoint)
{
    auto tree = std::make_shared<KeyTree>();
    auto& nodes = tree->m_nodes;
    nodes.reserve(checkpoint.entries.size() * 2 + 1);
    nodes.emplace_back(); // the invisible root
    // children by (parent, element): one hash keyed by the joined prefix, which is unique per node
    auto& byKey = tree->m_byKey;
    byKey.reserve(checkpoint.entries.size() * 2);
    std::string prefix;
    for (size_t i = 0; i < checkpoint.entries.size(); ++i) {
        const Entry& e = checkpoint.entries[i];
        int parent = Root;
        prefix.clear();
        const size_t depth = e.path.empty() ? 1 : e.path.size();
        for (size_t d = 0; d < depth; ++d) {
            const std::string_view element = e.path.empty() ? std::string_view(e.key) : std::string_view(e.path[d].key);
            if (d) prefix += '.';
            prefix += element;
            const bool leaf = d + 1 == depth;
            // a leaf always gets its own node (duplicate keys stay visible); inner nodes are shared
            int child = -1;
            if (!leaf) {
                auto it = byKey.find(prefix);
                if (it != byKey.end() && nodes[static_cast<size_t>(it->second)].entry < 0) child = it->second;
            }
            if (child < 0) {
                child = static_cast<int>(nodes.size());
                Node n;
                n.parent = parent;
                n.row = static_cast<int>(nodes[static_cast<size_t>(parent)].children.size());
                // control and bidi characters shown as escapes (evil\u202egpj.exe must not read as evilexe.jpg)
                const std::string shown = displayText(element);
                n.name = QString::fromUtf8(shown.data(), static_cast<qsizetype>(shown.size()));
                n.key = prefix;
                if (leaf) n.entry = static_cast<int>(i);
                nodes.push_back(std::move(n));
                nodes[static_cast<size_t>(parent)].children.push_back(child);
                byKey.emplace(prefix, child);
            }
            parent = child;
        }
        // aggregate sizes up the path
        const bool tensor = e.isTensor();
        const int64_t numel = tensor ? e.tensor->numel() : 0;
        const uint64_t bytes = tensor ? e.tensor->nbytes() : 0;
        for (int n = parent; n >= 0; n = nodes[static_cast<size_t>(n)].parent) {
            Node& node = nodes[static_cast<size_t>(n)];
            node.numel += numel;
            node.bytes += bytes;
            node.tensors += tensor ? 1 : 0;
            node.leaves += 1;
        }
    }
    return tree;
}

int KeyTree::find(const std::string& key) const
{
    auto it = m_byKey.find(key);
    return it == m_byKey.end() ? -1 : it->second;
}

} // namespace optscope::ui
