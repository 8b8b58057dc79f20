// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/output_file.h"
#include "optscope/error.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace optscope {

OutputFile::OutputFile(std::string path, WriteOptions options)
    : m_path(std::move(path))
    , m_options(options)
{
    const std::filesystem::path p(m_path);
    const std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
    std::string templ = dir + "/." + p.filename().string() + ".tmp-XXXXXX";
    m_fd = ::mkstemp(templ.data());
    if (m_fd < 0)
        throw Error(
            ErrorKind::Io, m_path, std::string("cannot create a temporary file next to it: ") + std::strerror(errno));
    ::fchmod(m_fd, 0644);
    m_temp = templ;
    m_buffer = new char[kBufferSize];
}

OutputFile::~OutputFile()
{
    delete[] m_buffer;
    if (m_fd >= 0) ::close(m_fd);
    if (!m_committed && !m_temp.empty()) ::unlink(m_temp.c_str());
}

void OutputFile::flushBuffer()
{
    size_t done = 0;
    while (done < m_buffered) {
        const ssize_t n = ::write(m_fd, m_buffer + done, m_buffered - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error(ErrorKind::Io, m_path, std::string("write failed: ") + std::strerror(errno));
        done += static_cast<size_t>(n);
    }
    m_buffered = 0;
}

void OutputFile::write(const void* data, size_t size)
{
    const char* p = static_cast<const char*>(data);
    m_position += size;
    if (m_buffered + size <= kBufferSize) {
        std::memcpy(m_buffer + m_buffered, p, size);
        m_buffered += size;
        return;
    }
    flushBuffer();
    if (size < kBufferSize) {
        std::memcpy(m_buffer, p, size);
        m_buffered = size;
        return;
    }
    while (size > 0) {
        const ssize_t n = ::write(m_fd, p, std::min<size_t>(size, size_t(1) << 30));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error(ErrorKind::Io, m_path, std::string("write failed: ") + std::strerror(errno));
        p += n;
        size -= static_cast<size_t>(n);
    }
}

void OutputFile::writeZeros(size_t size)
{
    static const char zeros[256] = {};
    while (size > 0) {
        const size_t n = std::min(size, sizeof zeros);
        write(zeros, n);
        size -= n;
    }
}

void OutputFile::copyFrom(int srcFd, uint64_t offset, uint64_t length)
{
    flushBuffer();
    loff_t in = static_cast<loff_t>(offset);
    uint64_t left = length;
    while (left > 0) {
        const ssize_t n
            = ::copy_file_range(srcFd, &in, m_fd, nullptr, static_cast<size_t>(std::min<uint64_t>(left, 1u << 30)), 0);
        if (n > 0) {
            left -= static_cast<uint64_t>(n);
            m_position += static_cast<uint64_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP || errno == EBADF) {
            // not supported between these files (or the source ended early: read() reports it below)
            std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(left, 8u << 20)));
            while (left > 0) {
                const ssize_t r = ::pread(srcFd, buf.data(), std::min<uint64_t>(left, buf.size()), in);
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0)
                    throw Error(ErrorKind::Io, m_path, "copying from a source file: it ended early or failed to read");
                write(buf.data(), static_cast<size_t>(r));
                flushBuffer();
                in += r;
                left -= static_cast<uint64_t>(r);
            }
            return;
        }
        throw Error(ErrorKind::Io, m_path, std::string("copy_file_range failed: ") + std::strerror(errno));
    }
}

void OutputFile::commit()
{
    flushBuffer();
    if (m_options.fsync && ::fsync(m_fd) != 0)
        throw Error(ErrorKind::Io, m_path, std::string("fsync failed: ") + std::strerror(errno));
    ::close(m_fd);
    m_fd = -1;
    if (::rename(m_temp.c_str(), m_path.c_str()) != 0)
        throw Error(ErrorKind::Io, m_path,
            std::string("cannot rename the finished temporary into place: ") + std::strerror(errno));
    m_committed = true;
}

} // namespace optscope
