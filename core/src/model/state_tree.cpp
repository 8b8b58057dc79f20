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
    m_nodes.emplace_back();
    setKind(0, Kind::Dict);
}

void StateTree::reserve(size_t nodes)
{
    m_nodes.reserve(nodes);
}

void StateTree::setKind(size_t node, Kind kind)
{
    // a container keeps its children when it changes kind (the root: an empty dict that becomes a list)
    m_nodes[node].kind = kind;
}

std::vector<size_t> StateTree::children(const Node& n) const
{
    std::vector<size_t> out;
    forEachChild(n, [&](size_t c, const Node&) { out.push_back(c); });
    return out;
}

size_t StateTree::slotHash(uint32_t parent, bool keyed, std::string_view key, uint32_t position)
{
    uint64_t h = keyed ? std::hash<std::string_view>()(key) : position * 0xd6e8feb86659fd93ULL + 1;
    h ^= (uint64_t(parent) + 1) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 31; // the slot is taken from the low bits: mix the high ones down
    h *= 0xbf58476d1ce4e5b9ULL;
    return static_cast<size_t>(h ^ (h >> 29));
}

size_t StateTree::slotHash(const Node& n) const
{
    return slotHash(n.parent, n.keyed, n.key.view(), n.position);
}

void StateTree::index(uint32_t node)
{
    if ((m_indexed + 1) * 2 > m_slots.size()) grow();
    const size_t mask = m_slots.size() - 1;
    for (size_t s = slotHash(m_nodes[node]) & mask;; s = (s + 1) & mask)
        if (m_slots[s] == 0) {
            m_slots[s] = node;
            ++m_indexed;
            return;
        }
}

void StateTree::grow()
{
    std::vector<uint32_t> old(std::max<size_t>(64, m_slots.size() * 2), 0);
    old.swap(m_slots);
    const size_t mask = m_slots.size() - 1;
    for (uint32_t node : old) {
        if (node == 0) continue;
        size_t s = slotHash(m_nodes[node]) & mask;
        while (m_slots[s] != 0)
            s = (s + 1) & mask;
        m_slots[s] = node;
    }
}

uint32_t StateTree::append(uint32_t parent, Kind kind, const KeyPathElem* keyed)
{
    if (m_nodes.size() >= kNoNode - 1)
        throw Error(ErrorKind::Usage, {}, "state tree: more than " + std::to_string(kNoNode - 1) + " nodes");
    const auto n = static_cast<uint32_t>(m_nodes.size());
    m_nodes.emplace_back();
    Node& c = m_nodes.back();
    c.kind = kind;
    c.parent = parent;
    Node& p = m_nodes[parent];
    c.position = p.size++;
    if (keyed) {
        c.keyed = true;
        c.key = keyed->key;
        // a key that is not a plain str keeps its object (an int, a tuple, a torch.device: a str with its torch type)
        const PyValue* k = keyed->keyValue;
        c.keyValue = k && (k->kind != PyKind::Str || k->torchType != PyTorchType::None) ? k : nullptr;
    }
    if (p.last == kNoNode)
        p.first = n;
    else
        m_nodes[p.last].next = n;
    p.last = n;
    index(n);
    return n;
}

size_t StateTree::child(size_t parent, const KeyPathElem& elem, Kind containerKind)
{
    // containerKind: what to create if the child does not exist yet
    // (m_nodes grows below: no reference into it is held across a new node)
    const Kind parentKind = m_nodes[parent].kind;
    const auto p = static_cast<uint32_t>(parent);
    const bool keyed = parentKind == Kind::Dict;
    if (!keyed && parentKind != Kind::List && parentKind != Kind::Tuple)
        throw Error(ErrorKind::Usage, {}, "state tree: cannot descend into a leaf at '" + elem.key + "'");
    if (!keyed && !elem.isIndex())
        throw Error(ErrorKind::Usage, {}, "state tree: a key '" + elem.key + "' inside a list or tuple");
    if (!keyed && elem.index >= int64_t(kNoNode) - 1)
        throw Error(ErrorKind::Usage, {}, "state tree: list index " + std::to_string(elem.index) + " is too large");
    const std::string_view key = elem.key.view();
    const auto position = static_cast<uint32_t>(keyed ? 0 : elem.index);
    if (!keyed && position >= m_nodes[parent].size) {
        while (m_nodes[parent].size < position) // padded with None up to the index
            append(p, Kind::None, nullptr);
        return append(p, containerKind, nullptr);
    }
    if (!m_slots.empty()) {
        const size_t mask = m_slots.size() - 1;
        for (size_t s = slotHash(p, keyed, key, position) & mask; m_slots[s] != 0; s = (s + 1) & mask) {
            const Node& c = m_nodes[m_slots[s]];
            if (c.parent != p || c.keyed != keyed) continue;
            if (keyed ? c.key == key : c.position == position) {
                const size_t found = m_slots[s];
                if (!keyed && c.kind == Kind::None) setKind(found, containerKind);
                return found;
            }
        }
    }
    return append(p, containerKind, keyed ? &elem : nullptr);
}

size_t StateTree::place(const KeyPath& path)
{
    if (path.empty()) return 0;
    if (path[0].isIndex() && m_nodes[0].kind == Kind::Dict && m_nodes[0].size == 0)
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
    const size_t n = place(path);
    m_nodes[n].kind = Kind::Value;
    m_nodes[n].value = value;
}

void StateTree::setTensor(const KeyPath& path, TensorToWrite tensor)
{
    m_tensors.push_back(std::move(tensor));
    const size_t n = place(path);
    m_nodes[n].kind = Kind::Tensor;
    m_nodes[n].tensor = m_tensors.size() - 1;
}

void StateTree::addStorage(const PyStorageInfo* storage, TensorToWrite bytes)
{
    if (!m_storages.emplace(storage, m_tensors.size()).second) return;
    m_tensors.push_back(std::move(bytes));
}

int64_t StateTree::storageRecordOf(const PyStorageInfo* storage) const
{
    const auto it = m_storages.find(storage);
    return it == m_storages.end() ? -1 : static_cast<int64_t>(it->second);
}

} // namespace optscope
