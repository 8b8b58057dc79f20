// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/mapped_file.h"
#include "optscope/error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
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

} // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == EMFILE && raiseOpenFileLimit()) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
        throw Error(
            ErrorKind::Io, path, S_ISDIR(st.st_mode) ? "is a directory, expected a file" : "not a regular file");
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
        f->m_data = static_cast<const uint8_t*>(p);
    }
    f->m_fd = fd;
    return f;
}

MappedFile::~MappedFile()
{
    if (m_data) ::munmap(const_cast<uint8_t*>(m_data), m_size);
    if (m_fd >= 0) ::close(m_fd);
}

void MappedFile::adviseSequential(uint64_t offset, uint64_t length) const
{
    if (!m_data || offset >= m_size) return;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t start = offset / page * page;
    const uint64_t end = std::min(m_size, offset + length);
    auto* p = const_cast<uint8_t*>(m_data) + start;
    ::madvise(p, end - start, MADV_SEQUENTIAL);
    ::madvise(p, end - start, MADV_WILLNEED);
}

void MappedFile::release(uint64_t offset, uint64_t length) const
{
    if (!m_data || offset >= m_size) return;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    // only whole pages inside the range: neighbours may still be in use
    const uint64_t start = (offset + page - 1) / page * page;
    const uint64_t end = std::min(m_size, offset + length) / page * page;
    if (end > start) ::madvise(const_cast<uint8_t*>(m_data) + start, end - start, MADV_DONTNEED);
}

} // namespace optscope
