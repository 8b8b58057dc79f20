// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/weight_index.h"

#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/storage.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>

namespace fs = std::filesystem;

namespace optscope {

namespace {

using json = nlohmann::json;

/// larger than any real index (a 1T-parameter model's is a few MB): past it, the file is not one
constexpr uint64_t kMaxIndexBytes = 100'000'000;

std::string quote(const std::string& s)
{
    return "'" + (s.size() > 200 ? s.substr(0, 200) + "..." : s) + "'";
}

/// file names an index may point to: relative, inside the folder
bool isPlainRelative(const std::string& name)
{
    if (name.empty() || name[0] == '/') return false;
    for (const auto& part : fs::path(name))
        if (part == "..") return false;
    return true;
}

} // namespace

std::vector<WeightIndexShard> readWeightIndex(const Checkpoint& cp, const std::string& indexFile)
{
    const std::string indexPath = cp.files->absolute(indexFile);
    auto file = cp.files->open(indexFile);
    if (file->size() > kMaxIndexBytes)
        throw Error(ErrorKind::Limit, indexPath, "index of " + std::to_string(file->size()) + " bytes is too large");
    json index;
    try {
        const char* text = reinterpret_cast<const char*>(file->all());
        index = json::parse(text, text + file->size());
    } catch (const json::exception& e) {
        throw Error(ErrorKind::Format, indexPath, std::string("is not valid JSON: ") + e.what());
    }
    const auto wm = index.is_object() ? index.find("weight_map") : index.end();
    if (!index.is_object() || wm == index.end() || !wm->is_object())
        throw Error(ErrorKind::Format, indexPath, "has no \"weight_map\" object (not a sharded model's index)");
    std::map<std::string, std::vector<std::string>> byFile; // shard -> names, shards in name order
    for (const auto& [name, shard] : wm->items()) {
        if (!shard.is_string())
            throw Error(ErrorKind::Format, indexPath, "weight_map entry " + quote(name) + " is not a file name");
        const std::string f = shard.get<std::string>();
        if (!isPlainRelative(f))
            throw Error(ErrorKind::Format, indexPath,
                "weight_map entry " + quote(name) + " points outside the folder: " + quote(f));
        byFile[f].push_back(name);
    }
    std::vector<WeightIndexShard> out;
    for (auto& [f, names] : byFile)
        out.push_back({f, std::move(names)});
    return out;
}

std::string addIndexedShards(Checkpoint& cp, CheckpointBuilder& builder, const std::string& indexFile,
    const std::vector<WeightIndexShard>& shards,
    const std::function<std::set<std::string>(const std::string&)>& addShard, const std::function<void(size_t)>& before,
    const Progress& progress, const char* what)
{
    const std::string indexPath = cp.files->absolute(indexFile);
    size_t read = 0;
    std::map<std::string, std::string> holder; // tensor -> the shard read that holds it
    std::vector<bool> wasRead(shards.size(), false);
    for (size_t i = 0; i < shards.size(); ++i) {
        const WeightIndexShard& s = shards[i];
        progress(static_cast<double>(i) / static_cast<double>(shards.size()), what);
        if (before) before(i);
        if (const MemberStat m = statInside(cp.files->rootDir(), s.file); !m.ok()) {
            builder.memberProblem(
                m, s.file, indexPath, std::to_string(s.names.size()) + " tensors, e.g. " + quote(s.names.front()));
            continue;
        }
        for (const auto& n : addShard(s.file))
            holder.emplace(n, s.file);
        wasRead[i] = true;
        ++read;
    }
    // a tensor in another shard than the index says is still there, as a loader that reads every shard finds it (a
    // warning); one that no shard holds is missing (an error)
    std::set<std::string> placed;
    for (size_t i = 0; i < shards.size(); ++i) {
        for (const auto& n : shards[i].names) {
            placed.insert(n);
            if (!wasRead[i]) continue; // its shard is missing: said above
            const auto it = holder.find(n);
            if (it == holder.end())
                builder.error(ReaderCode::MissingTensor,
                    indexPath + " places tensor " + quote(n) + " in '" + shards[i].file + "', which does not hold it");
            else if (it->second != shards[i].file)
                builder.warn(ReaderCode::IndexMismatch,
                    indexPath + " places tensor " + quote(n) + " in '" + shards[i].file + "', but '" + it->second
                        + "' holds it");
        }
    }
    for (const auto& [n, file] : holder)
        if (!placed.count(n))
            builder.warn(ReaderCode::IndexMismatch,
                "'" + file + "' holds tensor " + quote(n) + ", which " + indexPath + " does not place anywhere");
    return std::to_string(read) + " of " + std::to_string(shards.size()) + " shards";
}

std::string addTorchSaveShards(Checkpoint& cp, CheckpointBuilder& builder, const std::string& indexFile,
    const KeyPath& prefix, const Progress& progress)
{
    const auto shards = readWeightIndex(cp, indexFile);
    return addIndexedShards(
        cp, builder, indexFile, shards,
        [&](const std::string& rel) {
            const size_t first = cp.entries.size();
            builder.addTorchSaveFile(rel, prefix, progress);
            std::set<std::string> held;
            for (size_t i = first; i < cp.entries.size(); ++i) {
                // a state dict's keys are one element after the prefix
                const KeyPath& p = cp.entries[i].path;
                held.insert(p.size() == prefix.size() + 1
                        ? p.back().key.str()
                        : joinKeyPath(KeyPath(p.begin() + static_cast<std::ptrdiff_t>(prefix.size()), p.end())));
            }
            return held;
        },
        {}, progress, "reading pytorch_model shards");
}

} // namespace optscope
