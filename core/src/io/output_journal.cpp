// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/output_journal.h"
#include "optscope/io/process_identity.h"
#include "optscope/io/remote_object.h"
#include "optscope/io/storage.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace optscope {

namespace {

namespace fs = std::filesystem;

/// $XDG_STATE_HOME/optscope/outputs, else ~/.local/state/optscope/outputs; empty when neither is set
fs::path journalFolder()
{
    if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state == '/')
        return fs::path(state) / "optscope" / "outputs";
    if (const char* home = std::getenv("HOME"); home && *home)
        return fs::path(home) / ".local" / "state" / "optscope" / "outputs";
    return {};
}

/// This process's journal: made at its first line, removed at exit when every output it names is settled
class Journal
{
public:
    static Journal& instance()
    {
        static Journal journal;
        return journal;
    }

    void add(const std::string& line, const std::string& key, bool settles)
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (settles) {
            if (m_open.erase(key) == 0) return; // never journalled (it could not be)
        } else if (!open()) {
            return;
        }
        const std::string text = line + "\n";
        // one write of a whole line, appended: a process killed between two writes leaves whole lines
        if (::write(m_fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && !settles)
            m_open.insert(key);
    }

    ~Journal()
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_fd < 0) return;
        ::close(m_fd);
        if (m_open.empty()) ::unlink(m_path.c_str()); // else the next run undoes what this one could not
    }

private:
    bool open()
    {
        if (m_fd >= 0) return true;
        if (m_failed) return false;
        m_failed = true; // tried once
        const std::string identity = thisProcessIdentity();
        const fs::path folder = journalFolder();
        std::error_code ec;
        if (identity.empty() || folder.empty() || (fs::create_directories(folder, ec), ec)) return false;
        m_path = (folder / ("run-" + std::to_string(::getpid()) + "-" + std::to_string(::time(nullptr)) + ".journal"))
                     .string();
        m_fd = ::open(m_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
        if (m_fd < 0) return false;
        const std::string head = "process\t" + identity + "\n";
        if (::write(m_fd, head.data(), head.size()) != static_cast<ssize_t>(head.size())) {
            ::close(m_fd);
            ::unlink(m_path.c_str());
            m_fd = -1;
            return false;
        }
        m_failed = false;
        return true;
    }

    std::mutex m_mutex;
    int m_fd = -1;
    bool m_failed = false;
    std::string m_path;
    std::set<std::string> m_open; ///< "URL\tID" of the outputs journalled and not settled
};

const char* kindName(JournalledOutput kind)
{
    return kind == JournalledOutput::Upload ? "upload" : "folder";
}

bool journallable(const std::string& text)
{
    return text.find_first_of("\t\n") == std::string::npos;
}

std::mutex g_notesMutex;
std::vector<std::string> g_notes;

void note(std::string text)
{
    std::lock_guard<std::mutex> lock(g_notesMutex);
    g_notes.push_back(std::move(text));
}

/// undoes what the journal at @p path names and its process (ended) left unsettled; true when all of it is undone
bool undoJournal(const fs::path& path)
{
    std::ifstream in(path);
    std::string line, identity;
    // "URL\tID" -> kind, in the order journalled
    std::vector<std::pair<std::string, JournalledOutput>> order;
    std::map<std::string, JournalledOutput> open;
    std::map<std::string, std::string> stores; ///< "URL\tID" -> the store it was written to (storeOf)
    std::map<std::string, std::string> lastObjects; ///< "URL\tID" -> a folder's object written last
    while (std::getline(in, line)) {
        const size_t t1 = line.find('\t');
        const size_t t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
        const std::string what = line.substr(0, t1);
        if (what == "process" && t1 != std::string::npos) {
            identity = line.substr(t1 + 1);
            continue;
        }
        if (t2 == std::string::npos) continue; // a line cut short
        const size_t t3 = line.find('\t', t2 + 1);
        const std::string key = line.substr(t1 + 1, t3 == std::string::npos ? t3 : t3 - t1 - 1); // "URL\tID"
        if (what == "upload" || what == "folder") {
            const JournalledOutput kind = what == "upload" ? JournalledOutput::Upload : JournalledOutput::Folder;
            if (t3 == std::string::npos) continue;
            const size_t t4 = line.find('\t', t3 + 1);
            stores[key] = line.substr(t3 + 1, t4 == std::string::npos ? t4 : t4 - t3 - 1);
            lastObjects[key] = t4 == std::string::npos ? std::string() : line.substr(t4 + 1);
            if (open.emplace(key, kind).second) order.emplace_back(key, kind);
        } else if (what == "settled") {
            open.erase(key);
        }
    }
    if (identity.empty() || !processEnded(identity)) return false; // a live run's (or one this machine cannot tell)
    bool all = true;
    for (const auto& [key, kind] : order) {
        if (!open.count(key)) continue;
        const size_t tab = key.find('\t');
        const std::string url = key.substr(0, tab), id = key.substr(tab + 1);
        std::string storeNow;
        try {
            storeNow = storeOf(url);
        } catch (const std::exception&) { }
        if (storeNow != stores[key]) { // written to another store (endpoint) than this run's settings name: its own
            all = false;
            continue;
        }
        if (kind == JournalledOutput::Folder && !lastObjects[key].empty()) {
            // its last object there: the output is whole, only its settled line was lost (a full disk): kept
            try {
                const std::vector<std::string> names = folderEntries(url);
                if (std::find(names.begin(), names.end(), lastObjects[key]) != names.end()) continue;
            } catch (const std::exception&) {
                all = false; // cannot tell: left for a later run
                continue;
            }
        }
        const bool undone = kind == JournalledOutput::Upload ? abortUpload(url, id) : removeTaggedObjectsUnder(url, id);
        all = all && undone;
        const std::string shown = displayLocation(url);
        if (kind == JournalledOutput::Upload)
            note(undone ? shown + ": a run killed on this machine left its upload open (upload id " + id
                        + "): aborted, nothing of it is stored"
                        : shown + ": a run killed on this machine left its upload open (upload id " + id
                        + "), and it could not be aborted: tried again by the next run that writes to object storage");
        else
            note(undone
                    ? shown + ": a run killed on this machine left this DCP output unfinished: its objects are removed"
                    : shown
                        + ": a run killed on this machine left this DCP output unfinished, and not all of its "
                          "objects could be removed: tried again by the next run that writes to object storage");
    }
    return all;
}

} // namespace

void journalOutput(JournalledOutput kind, const std::string& url, const std::string& id, const std::string& lastObject)
{
    if (!journallable(url) || !journallable(id) || !journallable(lastObject) || !isUrl(url)) return;
    const std::string store = storeOf(url);
    if (!journallable(store)) return;
    Journal::instance().add(std::string(kindName(kind)) + "\t" + url + "\t" + id + "\t" + store + "\t" + lastObject,
        url + "\t" + id, false);
}

void journalSettled(const std::string& url, const std::string& id)
{
    if (!journallable(url) || !journallable(id)) return;
    Journal::instance().add("settled\t" + url + "\t" + id, url + "\t" + id, true);
}

void undoKilledRuns()
{
    static std::once_flag once;
    std::call_once(once, [] {
        const fs::path folder = journalFolder();
        std::error_code ec;
        if (folder.empty() || !fs::is_directory(folder, ec)) return;
        for (const auto& e : fs::directory_iterator(folder, ec)) {
            const fs::path p = e.path();
            if (p.extension() != ".journal") continue;
            if (undoJournal(p)) fs::remove(p, ec);
        }
    });
}

std::vector<std::string> killedRunsNotes()
{
    std::lock_guard<std::mutex> lock(g_notesMutex);
    return g_notes;
}

} // namespace optscope
