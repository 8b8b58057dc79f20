// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/run_folder.h"
#include "optscope/base/error.h"
#include "optscope/formats/hf_trainer/hf_trainer_reader.h"
#include "optscope/formats/safetensors/safetensors_reader.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/io/storage.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <optional>

namespace optscope {

namespace fs = std::filesystem;

namespace {

/// a run of digits in a name: where it lies and its value (begin == npos: none)
struct DigitRun
{
    size_t begin = std::string::npos;
    size_t end = std::string::npos;
    int64_t value = -1;
};

/// the digits right after @p word (in any case), past one '=', '_' or '-' ("step=100" -> 100): after its first
/// occurrence that has them, or, with @p lastOnly, after its last occurrence only
DigitRun digitsAfter(const std::string& name, const std::string& word, bool lastOnly)
{
    std::string lower = name;
    for (char& ch : lower)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    size_t at = lastOnly ? lower.rfind(word) : lower.find(word);
    for (; at != std::string::npos; at = lastOnly ? std::string::npos : lower.find(word, at + 1)) {
        size_t i = at + word.size();
        if (i < lower.size() && (lower[i] == '=' || lower[i] == '_' || lower[i] == '-')) ++i;
        size_t end = i;
        while (end < lower.size() && std::isdigit(static_cast<unsigned char>(lower[end])) && end - i < 18)
            ++end;
        if (end > i) return {i, end, std::stoll(lower.substr(i, end - i))};
    }
    return {};
}

/// the step a name says: the number after "step" or "iter" where it has one (Lightning's
/// epoch=0-step=100-val_loss=0.93.ckpt -> 100, global_step300, iter_0000400), else its last run of digits
/// (checkpoint-200 -> 200)
int64_t stepNumber(const std::string& name)
{
    for (const char* word : {"step", "iter"})
        if (const DigitRun n = digitsAfter(name, word, false); n.value >= 0) return n.value;
    size_t end = name.size();
    while (end > 0 && !std::isdigit(static_cast<unsigned char>(name[end - 1])))
        --end;
    if (end == 0) return -1;
    size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(name[begin - 1])))
        --begin;
    if (end - begin > 18) return -1;
    return std::stoll(name.substr(begin, end - begin));
}

bool temporaryName(const std::string& name)
{
    auto endsWith = [&name](const char* suffix) {
        const std::string s(suffix);
        return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    // "tmp-checkpoint-N": transformers 4.36-4.38 write a Trainer checkpoint there, then rename it
    return name.empty() || name[0] == '.' || name.compare(0, 4, "tmp-") == 0 || endsWith(".tmp") || endsWith(".partial")
        || endsWith("~") || endsWith(".lock");
}

void mix(uint64_t& h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
}

void addFile(uint64_t& h, const fs::directory_entry& e)
{
    std::error_code ec;
    const auto size = e.file_size(ec);
    mix(h, ec ? 0 : static_cast<uint64_t>(size));
    const auto time = e.last_write_time(ec);
    mix(h, ec ? 0 : static_cast<uint64_t>(time.time_since_epoch().count()));
    mix(h, std::hash<std::string>()(e.path().filename().string()));
}

uint64_t signatureOf(const fs::directory_entry& entry)
{
    uint64_t h = 0;
    std::error_code ec;
    if (!entry.is_directory(ec)) {
        addFile(h, entry);
        return h;
    }
    // a folder: its files and those one level down (DCP: .metadata and __r_0.distcp; DeepSpeed: global_stepN/*)
    std::vector<fs::directory_entry> files;
    for (fs::recursive_directory_iterator it(entry.path(), fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
        if (it.depth() > 1) {
            it.disable_recursion_pending();
            continue;
        }
        if (!it->is_directory(ec)) files.push_back(*it);
    }
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path() < b.path(); });
    mix(h, files.size());
    for (const auto& f : files)
        addFile(h, f);
    return h;
}

/// the entry @p name at @p path as a step of the run, signature not yet taken; nullopt when it names no step or is a
/// writer's temporary
std::optional<RunCheckpoint> stepEntry(const std::string& name, const std::string& path)
{
    if (temporaryName(name)) return std::nullopt;
    const int64_t step = stepNumber(name);
    if (step < 0) return std::nullopt;
    RunCheckpoint c;
    c.path = path;
    c.name = name;
    c.step = step;
    return c;
}

/// an entry on object storage: its objects' names, sizes and ETags, two levels down as for a local folder (the ETag
/// stands for the modification time a local file has: an object re-uploaded with the same size changes it)
uint64_t remoteSignatureOf(const std::string& location, int depth = 0)
{
    uint64_t h = 0;
    const LocationStat st = statLocation(location);
    if (st.kind != LocationKind::Folder) {
        mix(h, st.size);
        mix(h, static_cast<uint64_t>(st.kind));
        mix(h, std::hash<std::string>()(st.version));
        return h;
    }
    const std::vector<FolderEntry> entries = listFolder(location);
    mix(h, entries.size());
    for (const auto& e : entries) {
        mix(h, std::hash<std::string>()(e.name));
        if (depth < 1) mix(h, remoteSignatureOf(e.location, depth + 1));
    }
    return h;
}

std::vector<RunCheckpoint> scanRemoteRunFolder(const std::string& folder)
{
    std::vector<RunCheckpoint> out;
    forgetRemoteListings(); // a run folder is polled: what the last scan listed may have changed since
    for (const auto& e : listFolder(folder)) {
        std::optional<RunCheckpoint> c = stepEntry(e.name, e.location);
        if (!c) continue;
        try {
            c->signature = remoteSignatureOf(e.location);
        } catch (const std::exception&) {
            continue; // gone between the listing and the look inside it: the next scan says what is there
        }
        out.push_back(std::move(*c));
    }
    return out;
}

/// per-rank files of one step side by side: only the lowest rank's stays, noted (a step is not compared with its own
/// other ranks; `diff --ranks` compares ranks)
void followLowestRank(std::vector<RunCheckpoint>& entries)
{
    std::map<std::string, std::pair<int64_t, size_t>> lowest; // by the name without its rank number: rank, files
    std::vector<DigitRun> ranks(entries.size());
    std::vector<std::string> groups(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
        // "ckpt_step4_rank1.pt": the "1"
        ranks[i] = digitsAfter(entries[i].name, "rank", true);
        if (ranks[i].value < 0) continue;
        groups[i] = entries[i].name.substr(0, ranks[i].begin) + "*" + entries[i].name.substr(ranks[i].end);
        auto [it, added] = lowest.try_emplace(groups[i], ranks[i].value, 0);
        it->second.first = std::min(it->second.first, ranks[i].value);
        ++it->second.second;
    }
    std::vector<RunCheckpoint> kept;
    for (size_t i = 0; i < entries.size(); ++i) {
        if (!groups[i].empty()) {
            const auto& [rank, files] = lowest.at(groups[i]);
            if (files >= 2 && ranks[i].value != rank) continue;
            if (files >= 2) // one file: the rank is just part of its name
                entries[i].notes.push_back("rank " + std::to_string(rank) + "'s file of " + std::to_string(files)
                    + " per-rank files (" + groups[i] + "): the other ranks are not followed");
        }
        kept.push_back(std::move(entries[i]));
    }
    entries = std::move(kept);
}

/// RunCheckpoint::incomplete for @p c
std::string incompleteReason(const RunCheckpoint& c)
{
    // a Trainer checkpoint (Trainer's own name, checkpoint-N) without its state: written last
    if (c.name.compare(0, 11, "checkpoint-") != 0) return {};
    if (statLocation(c.path).kind != LocationKind::Folder) return {};
    if (isFile(childLocation(c.path, HfTrainerReader::kTrainerStateFile))) return {};
    bool trainerFiles = false;
    for (const char* name :
        {HfTrainerReader::kOptimizerFiles[0], HfTrainerReader::kOptimizerFiles[1], SafetensorsReader::kSingleFile,
            SafetensorsReader::kIndexFile, TorchSaveReader::kSingleModelFile, TorchSaveReader::kShardIndexFile})
        trainerFiles = trainerFiles || isFile(childLocation(c.path, name));
    return trainerFiles ? "has no trainer_state.json yet (the Trainer writes it last)" : std::string();
}

} // namespace

std::vector<RunCheckpoint> scanRunFolder(const std::string& folder)
{
    std::vector<RunCheckpoint> out;
    if (isUrl(folder) && !canListFolder(folder))
        throw Error(ErrorKind::Usage, displayLocation(folder),
            "is a plain HTTP URL, and a folder cannot be listed over HTTP: follow the run on s3:// or gs://, or in a "
            "local folder");
    if (isUrl(folder)) {
        out = scanRemoteRunFolder(folder);
    } else {
        std::error_code ec;
        for (fs::directory_iterator it(folder, fs::directory_options::skip_permission_denied, ec), end;
             !ec && it != end; it.increment(ec)) {
            std::optional<RunCheckpoint> c = stepEntry(it->path().filename().string(), it->path().string());
            if (!c) continue;
            c->signature = signatureOf(*it);
            out.push_back(std::move(*c));
        }
    }
    followLowestRank(out);
    for (auto& c : out)
        c.incomplete = incompleteReason(c);
    std::sort(out.begin(), out.end(), [](const RunCheckpoint& a, const RunCheckpoint& b) {
        return a.step != b.step ? a.step < b.step : a.name < b.name;
    });
    return out;
}

} // namespace optscope
