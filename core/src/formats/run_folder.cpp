// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/run_folder.h"
#include "optscope/base/error.h"
#include "optscope/io/storage.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>

namespace optscope {

namespace fs = std::filesystem;

namespace {

int64_t lastNumber(const std::string& name)
{
    // the last run of digits (epoch=1-step=500 -> 500; checkpoint-200 -> 200)
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
    return name.empty() || name[0] == '.' || endsWith(".tmp") || endsWith(".partial") || endsWith("~")
        || endsWith(".lock");
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
    const int64_t step = lastNumber(name);
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
    std::sort(out.begin(), out.end(), [](const RunCheckpoint& a, const RunCheckpoint& b) {
        return a.step != b.step ? a.step < b.step : a.name < b.name;
    });
    return out;
}

} // namespace optscope
