// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/state_tree.h"
#include "optscope/base/error.h"

#include <cstring>

namespace optscope {

void writeFloat32Scalar(float value, const ByteSink& sink)
{
    uint32_t bits = 0;
    std::memcpy(&bits, &value, 4);
    const uint8_t le[4] = {uint8_t(bits), uint8_t(bits >> 8), uint8_t(bits >> 16), uint8_t(bits >> 24)};
    sink(le, 4);
}

int64_t TensorToWrite::numel() const
{
    int64_t n = 1;
    for (auto s : shape)
        n *= s;
    return n;
}

// ------------------------------------------------------------------------------------------------ StateTree

StateTree::StateTree()
{
    m_nodes.push_back({});
    setKind(0, Kind::Dict);
}

void StateTree::setKind(size_t node, Kind kind)
{
    const bool container = kind == Kind::Dict || kind == Kind::List || kind == Kind::Tuple;
    const Kind was = m_nodes[node].kind;
    if (container && was != Kind::Dict && was != Kind::List && was != Kind::Tuple) {
        m_containers.emplace_back();
        m_nodes[node].container = m_containers.size() - 1;
    }
    m_nodes[node].kind = kind;
}

size_t StateTree::keyHash(size_t parent, std::string_view key)
{
    return std::hash<std::string_view>()(key) ^ (parent * 0x9e3779b97f4a7c15ULL);
}

size_t StateTree::child(size_t parent, const KeyPathElem& elem, Kind containerKind)
{
    // containerKind: what to create if the child does not exist yet
    // (m_nodes and m_containers grow below: no reference into them is held across a new node)
    auto make = [&](Kind kind) {
        m_nodes.push_back({});
        setKind(m_nodes.size() - 1, kind);
        return m_nodes.size() - 1;
    };
    const Kind parentKind = m_nodes[parent].kind;
    const size_t box = m_nodes[parent].container;
    if (parentKind == Kind::Dict) {
        const std::string_view key(elem.key.data(), elem.key.size());
        const size_t h = keyHash(parent, key);
        for (auto [it, end] = m_keyIndex.equal_range(h); it != end; ++it) {
            const auto [owner, pos] = it->second;
            if (owner == parent && m_containers[box].keys[pos] == key) return m_containers[box].children[pos];
        }
        const size_t c = make(containerKind);
        Container& p = m_containers[box];
        m_keyIndex.emplace(h, std::make_pair(parent, p.keys.size()));
        p.keys.push_back(elem.key.str());
        p.keyValues.push_back(elem.keyValue && elem.keyValue->kind != PyKind::Str ? elem.keyValue : nullptr);
        p.children.push_back(c);
        return c;
    }
    if (parentKind == Kind::List || parentKind == Kind::Tuple) {
        while (m_containers[box].children.size() <= static_cast<size_t>(elem.index)) {
            const size_t none = make(Kind::None);
            m_containers[box].children.push_back(none);
        }
        const size_t c = m_containers[box].children[static_cast<size_t>(elem.index)];
        if (m_nodes[c].kind == Kind::None) setKind(c, containerKind);
        return c;
    }
    throw Error(ErrorKind::Usage, {}, "state tree: cannot descend into a leaf at '" + elem.key + "'");
}

size_t StateTree::place(const KeyPath& path)
{
    if (path.empty()) return 0;
    if (path[0].isIndex() && m_nodes[0].kind == Kind::Dict && container(m_nodes[0]).children.empty())
        setKind(0, path[0].inTuple ? Kind::Tuple : Kind::List); // a top-level list (the dict's empty contents)
    size_t cur = 0;
    for (size_t i = 0; i + 1 < path.size(); ++i) {
        const KeyPathElem& next = path[i + 1];
        const Kind kind = next.isIndex() ? (next.inTuple ? Kind::Tuple : Kind::List) : Kind::Dict;
        cur = child(cur, path[i], kind);
        if (m_nodes[cur].kind != Kind::Dict && m_nodes[cur].kind != Kind::List && m_nodes[cur].kind != Kind::Tuple)
            throw Error(ErrorKind::Usage, {}, "state tree: '" + joinKeyPath(path) + "' goes through a leaf");
    }
    const size_t leaf = child(cur, path.back(), Kind::None);
    return leaf;
}

void StateTree::setValue(const KeyPath& path, const PyValue* value)
{
    if (path.empty()) {
        m_nodes[0] = {};
        m_nodes[0].kind = Kind::Value;
        m_nodes[0].value = value;
        return;
    }
    const size_t n = place(path);
    m_nodes[n].kind = Kind::Value;
    m_nodes[n].value = value;
}

void StateTree::setTensor(const KeyPath& path, TensorToWrite tensor)
{
    m_tensors.push_back(std::move(tensor));
    const size_t index = m_tensors.size() - 1;
    if (path.empty()) {
        m_nodes[0] = {};
        m_nodes[0].kind = Kind::Tensor;
        m_nodes[0].tensor = index;
        return;
    }
    const size_t n = place(path);
    m_nodes[n].kind = Kind::Tensor;
    m_nodes[n].tensor = index;
}

} // namespace optscope
