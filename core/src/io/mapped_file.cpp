// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/mapped_file.h"
#include "optscope/base/error.h"
#include "optscope/io/storage.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <mutex>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace optscope {

namespace {

/// Raises the soft limit on open files to the hard limit; true if it was raised. Every mapped file keeps its
/// descriptor (for copy_file_range), and a DCP folder can hold thousands of files: more than the usual soft limit of
/// 1024, far fewer than the hard limit (524288 under systemd), which any process may raise its soft limit to.
bool raiseOpenFileLimit()
{
    struct rlimit rl
    { };
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return false;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? rlim_t(1) << 20 : rl.rlim_max; // the kernel's nr_open default
    return ::setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

// --- the SIGBUS guard ------------------------------------------------------------------------------------------
// A fixed table of mapped ranges the handler can search without locks or allocation (async-signal-safe): a slot is
// claimed with a CAS on `end`, published by storing `begin` last, and released before the range is unmapped.
constexpr int kSlots = 1 << 17; // more maps than any checkpoint has files; past it maps are simply unguarded
struct Slot
{
    std::atomic<uintptr_t> begin {0};
    std::atomic<uintptr_t> end {0};
    std::atomic<int> faulted {0};
};
Slot g_slots[kSlots];
std::atomic<int> g_slotHint {0};
std::atomic<uint64_t> g_faults {0};
uintptr_t g_pageSize = 4096;
struct sigaction g_previous
{ };

void onSigbus(int sig, siginfo_t* info, void* context)
{
    const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
    for (auto& slot : g_slots) {
        const uintptr_t b = slot.begin.load(std::memory_order_acquire);
        if (!b || addr < b) continue;
        const uintptr_t e = slot.end.load(std::memory_order_acquire);
        if (addr >= e) continue;
        // the file is shorter than the map now: zeros from the faulting page to the end of the map, then go on
        const uintptr_t page = addr & ~(g_pageSize - 1);
        if (::mmap(reinterpret_cast<void*>(page), e - page, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
            == MAP_FAILED)
            break;
        slot.faulted.store(1, std::memory_order_release);
        g_faults.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    // not ours: what would have happened without us
    if (g_previous.sa_flags & SA_SIGINFO) {
        if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, context);
    } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
        return g_previous.sa_handler(sig);
    }
    ::signal(SIGBUS, SIG_DFL); // returning re-executes the access, which now ends the process as it always would
}

void installGuard()
{
    static std::once_flag once;
    std::call_once(once, [] {
        g_pageSize = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
        struct sigaction sa
        { };
        sa.sa_sigaction = onSigbus;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        ::sigaction(SIGBUS, &sa, &g_previous);
    });
}

int registerRange(const void* data, uint64_t size)
{
    installGuard();
    const auto b = reinterpret_cast<uintptr_t>(data);
    for (int i = 0; i < kSlots; ++i) {
        const int k = (g_slotHint.fetch_add(1, std::memory_order_relaxed) & (kSlots - 1));
        uintptr_t expected = 0;
        if (g_slots[k].end.compare_exchange_strong(expected, b + size, std::memory_order_acq_rel)) {
            g_slots[k].faulted.store(0, std::memory_order_relaxed);
            g_slots[k].begin.store(b, std::memory_order_release);
            return k;
        }
    }
    return -1;
}

void unregisterRange(int slot)
{
    if (slot < 0) return;
    g_slots[slot].begin.store(0, std::memory_order_release);
    g_slots[slot].end.store(0, std::memory_order_release);
}

std::string sizeText(uint64_t n)
{
    return std::to_string(n) + " bytes";
}

} // namespace

uint64_t MappedFile::faultCount()
{
    return g_faults.load(std::memory_order_relaxed);
}

bool MappedFile::faulted() const
{
    return m_slot >= 0 && g_slots[m_slot].faulted.load(std::memory_order_acquire) != 0;
}

namespace {

/// what a file read as (path, size, mtime, inode) against what its path names now
struct FileIdentity
{
    std::string path;
    uint64_t size = 0, dev = 0, ino = 0;
    int64_t mtimeSec = 0, mtimeNsec = 0;
    void check(bool faulted) const
    {
        struct stat st
        { };
        const bool exists = ::stat(path.c_str(), &st) == 0;
        const std::string now = exists ? sizeText(static_cast<uint64_t>(st.st_size)) : std::string("gone");
        if (faulted)
            throw Error(ErrorKind::Io, path, "changed while being read (was " + sizeText(size) + ", now " + now + ")");
        if (!exists) throw Error(ErrorKind::Io, path, "removed while being read (was " + sizeText(size) + ")");
        if (static_cast<uint64_t>(st.st_dev) != dev || static_cast<uint64_t>(st.st_ino) != ino)
            throw Error(ErrorKind::Io, path,
                "replaced while being read (was " + sizeText(size) + ", now another file of " + now + ")");
        if (static_cast<uint64_t>(st.st_size) != size || st.st_mtim.tv_sec != mtimeSec
            || st.st_mtim.tv_nsec != mtimeNsec)
            throw Error(ErrorKind::Io, path, "changed while being read (was " + sizeText(size) + ", now " + now + ")");
    }
};

} // namespace

size_t openFileBudget()
{
    static const size_t budget = [] {
        raiseOpenFileLimit();
        struct rlimit rl
        { };
        const uint64_t soft = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
            ? static_cast<uint64_t>(rl.rlim_cur)
            : uint64_t(1) << 20;
        // the rest is for the process's own: standard streams, outputs, and the files readers hold while reading
        return static_cast<size_t>(std::clamp<uint64_t>(soft > 32 ? (soft - 24) / 2 : 4, 4, 16384));
    }();
    return budget;
}

void MappedFile::checkUnchanged() const
{
    FileIdentity {m_path, m_size, m_dev, m_ino, m_mtimeSec, m_mtimeNsec}.check(faulted());
}

std::function<void()> MappedFile::detachedCheck() const
{
    return [id = FileIdentity {m_path, m_size, m_dev, m_ino, m_mtimeSec, m_mtimeNsec}] { id.check(false); };
}

void MappedFile::checkContentUnchanged() const
{
    struct stat st
    { };
    if (m_fd < 0 || ::fstat(m_fd, &st) != 0) return checkUnchanged();
    // the file the map was made of, wherever its path now leads
    if (faulted() || static_cast<uint64_t>(st.st_size) != m_size || st.st_mtim.tv_sec != m_mtimeSec
        || st.st_mtim.tv_nsec != m_mtimeNsec)
        throw Error(ErrorKind::Io, m_path,
            "changed while being read (was " + sizeText(m_size) + ", now " + sizeText(static_cast<uint64_t>(st.st_size))
                + (st.st_size == static_cast<off_t>(m_size) ? ", rewritten" : "") + ")");
}

namespace {

std::atomic<bool> g_allowOutside {false};

const char* specialKind(mode_t mode)
{
    if (S_ISDIR(mode)) return "is a folder";
    if (S_ISFIFO(mode)) return "is a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "is a character device";
    if (S_ISBLK(mode)) return "is a block device";
    if (S_ISSOCK(mode)) return "is a socket";
    return "is not a regular file";
}

} // namespace

void allowReadsOutsideCheckpoint(bool allow)
{
    g_allowOutside.store(allow);
}

bool readsOutsideCheckpointAllowed()
{
    return g_allowOutside.load();
}

namespace {

/// why @p relative, named by a remote checkpoint's metadata, leads out of it (empty: it stays inside). An object store
/// has no links: only the path's own words can.
std::string remoteMemberOutside(const std::string& relative)
{
    const std::filesystem::path rel(relative);
    if (isUrl(relative) || rel.is_absolute()) return "is an absolute path or URL, outside the checkpoint";
    for (const auto& part : rel)
        if (part == "..") return "climbs out of the checkpoint folder ('..')";
    return {};
}

} // namespace

void statInsideAhead(const std::string& root, const std::vector<std::string>& relatives)
{
    if (!isUrl(root)) return; // a local stat is no round trip
    std::vector<std::string> locations;
    locations.reserve(relatives.size());
    for (const auto& r : relatives)
        if (remoteMemberOutside(r).empty()) locations.push_back(childLocation(root, r));
    statAhead(locations);
}

MemberStat statInside(const std::string& root, const std::string& relative)
{
    namespace fs = std::filesystem;
    MemberStat m;
    const bool allowOutside = g_allowOutside.load();
    const fs::path rel(relative);
    const fs::path rootPath = root.empty() ? fs::path(".") : fs::path(root);
    const fs::path full = rel.is_absolute() ? rel : rootPath / rel;
    if (isUrl(root) || isUrl(relative)) {
        if (std::string outside = remoteMemberOutside(relative); !outside.empty()) {
            m.kind = MemberStat::Outside;
            m.what = std::move(outside);
            return m;
        }
        LocationStat s = statLocation(childLocation(root, relative));
        if (s.kind == LocationKind::Folder && !canListFolder(root)) {
            // plain HTTP: no object there. A refusal is not an absence: say what the server said
            m.kind = s.detail == "HTTP 403" ? MemberStat::Unreadable : MemberStat::Missing;
            m.what = s.detail == "HTTP 403" ? "cannot be read: HTTP 403 (access denied; a signed URL's signature may "
                                              "hold for the one object it names)"
                                            : "is missing" + (s.detail.empty() ? std::string() : " (" + s.detail + ")");
            return m;
        }
        m.kind = s.kind == LocationKind::File ? MemberStat::Regular
            : s.kind == LocationKind::Missing ? MemberStat::Missing
                                              : MemberStat::Special;
        m.size = s.size;
        m.what = s.kind == LocationKind::Missing ? "is missing" : s.kind == LocationKind::Folder ? "is a folder" : "";
        return m;
    }
    if (!allowOutside) {
        if (rel.is_absolute()) {
            m.kind = MemberStat::Outside;
            m.what = "is an absolute path, outside the checkpoint";
            return m;
        }
        // lexically: "a/../../x" leaves the root whatever the links say
        int depth = 0;
        for (const auto& part : rel.lexically_normal()) {
            if (part == "..")
                --depth;
            else if (!part.empty() && part != ".")
                ++depth;
            if (depth < 0) {
                m.kind = MemberStat::Outside;
                m.what = "climbs out of the checkpoint folder ('..')";
                return m;
            }
        }
    }
    struct stat st
    { };
    if (::stat(full.c_str(), &st) != 0) {
        const int e = errno;
        m.kind = e == ENOENT || e == ENOTDIR ? MemberStat::Missing
            : e == ELOOP                     ? MemberStat::Loop
                                             : MemberStat::Unreadable;
        m.what = e == ELOOP ? "is a symlink loop" : std::string("cannot be read: ") + std::strerror(e);
        if (m.kind == MemberStat::Missing) m.what = "is missing";
        return m;
    }
    if (!allowOutside) {
        // symlinks, the file's own or a folder's on the way: where it really is must be under where the root really is
        std::error_code ec1, ec2;
        const fs::path realRoot = fs::canonical(rootPath, ec1);
        const fs::path real = fs::canonical(full, ec2);
        if (ec1 || ec2) {
            m.kind = MemberStat::Unreadable;
            m.what = "cannot be resolved: " + (ec1 ? ec1 : ec2).message();
            return m;
        }
        auto r = realRoot.begin();
        auto f = real.begin();
        for (; r != realRoot.end(); ++r, ++f)
            if (f == real.end() || *f != *r) {
                m.kind = MemberStat::Outside;
                m.what = "is a symlink that leads outside the checkpoint, to " + real.string();
                return m;
            }
    }
    if (!S_ISREG(st.st_mode)) {
        m.kind = MemberStat::Special;
        m.what = specialKind(st.st_mode);
        return m;
    }
    m.kind = MemberStat::Regular;
    m.size = static_cast<uint64_t>(st.st_size);
    return m;
}

void refuseFolderOutside(const std::string& root, const std::string& name, const std::string& namedBy)
{
    const MemberStat m = statInside(root, name);
    if (m.kind == MemberStat::Outside)
        throw Error(ErrorKind::Io, childLocation(root, name),
            "(the folder " + namedBy + ") " + m.what + "; not read (--allow-outside-reads reads it)");
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path)
{
    // O_NONBLOCK: a FIFO named like a checkpoint file must not block the open (it is refused below as not regular)
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == EMFILE && raiseOpenFileLimit()) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(ErrorKind::Io, path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st
    { };
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        throw Error(ErrorKind::Io, path, std::string("cannot stat: ") + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(ErrorKind::Io, path,
            S_ISDIR(st.st_mode) ? std::string("is a directory, expected a file")
                                : std::string(specialKind(st.st_mode)) + ", not a regular file: not read");
    }
    std::shared_ptr<MappedFile> f(new MappedFile());
    f->m_path = path;
    f->m_size = static_cast<uint64_t>(st.st_size);
    if (f->m_size > 0) {
        void* p = ::mmap(nullptr, f->m_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            throw Error(ErrorKind::Io, path, std::string("cannot map: ") + std::strerror(e));
        }
        f->m_base = static_cast<const uint8_t*>(p);
        f->m_slot = registerRange(p, f->m_size);
    }
    f->m_fd = fd;
    f->m_dev = static_cast<uint64_t>(st.st_dev);
    f->m_ino = static_cast<uint64_t>(st.st_ino);
    f->m_mtimeSec = st.st_mtim.tv_sec;
    f->m_mtimeNsec = st.st_mtim.tv_nsec;
    return f;
}

MappedFile::~MappedFile()
{
    unregisterRange(m_slot);
    if (m_base) ::munmap(const_cast<uint8_t*>(m_base), m_size);
    if (m_fd >= 0) ::close(m_fd);
}

void MappedFile::adviseSequential(uint64_t offset, uint64_t length) const
{
    if (!m_base || offset >= m_size) return;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t start = offset / page * page;
    const uint64_t end = std::min(m_size, offset + length);
    auto* p = const_cast<uint8_t*>(m_base) + start;
    ::madvise(p, end - start, MADV_SEQUENTIAL);
    ::madvise(p, end - start, MADV_WILLNEED);
}

void MappedFile::release(uint64_t offset, uint64_t length) const
{
    if (!m_base || offset >= m_size) return;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    // only whole pages inside the range: neighbours may still be in use
    const uint64_t start = (offset + page - 1) / page * page;
    const uint64_t end = std::min(m_size, offset + length) / page * page;
    if (end > start) ::madvise(const_cast<uint8_t*>(m_base) + start, end - start, MADV_DONTNEED);
}

} // namespace optscope
