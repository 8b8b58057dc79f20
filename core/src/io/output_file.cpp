// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/output_file.h"
#include "optscope/base/error.h"
#include "optscope/io/fault_injection.h"
#include "optscope/io/remote_object.h"
#include "optscope/io/storage.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace optscope {

std::string temporaryNamePrefix(const std::string& output)
{
    const std::filesystem::path p(output);
    const std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
    return dir + "/." + p.filename().string() + ".tmp-";
}

std::string temporaryPrefix(const std::string& output)
{
    return temporaryNamePrefix(output) + std::to_string(::getpid()) + "-";
}

bool TemporaryLock::lock(const std::string& path)
{
    if (m_fd >= 0) ::close(m_fd);
    // O_NOFOLLOW: a temporary is never a symlink, and a symlink named like one must not lead us elsewhere
    m_fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (m_fd < 0) return false;
    if (::flock(m_fd, LOCK_EX | LOCK_NB) == 0) return true;
    ::close(m_fd);
    m_fd = -1;
    return false;
}

bool TemporaryLock::lockFd(int fd)
{
    return ::flock(fd, LOCK_EX | LOCK_NB) == 0;
}

TemporaryLock::~TemporaryLock()
{
    if (m_fd >= 0) ::close(m_fd);
}

size_t removeDeadEntries(const std::string& dir, const std::string& prefix)
{
    namespace fs = std::filesystem;
    size_t removed = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir.empty() ? fs::path(".") : fs::path(dir), ec), end; !ec && it != end;
         it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.rfind(prefix, 0) != 0) continue;
        // "PREFIX<PID>-XXXXXX"
        const std::string rest = name.substr(prefix.size());
        const auto dash = rest.find('-');
        if (dash == std::string::npos || dash == 0) continue;
        char* stop = nullptr;
        const long pid = std::strtol(rest.c_str(), &stop, 10);
        if (stop != rest.c_str() + dash || pid <= 0) continue;
        // a live writer holds the lock, in whatever PID namespace or host it runs
        TemporaryLock lock;
        if (!lock.lock(it->path().string())) continue;
        // and a PID alive here may be a writer that has created its temporary and not yet locked it
        if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
        std::error_code rm;
        fs::remove_all(it->path(), rm);
        removed += !rm;
    }
    return removed;
}

size_t removeStaleTemporaries(const std::string& output)
{
    const std::filesystem::path p(output);
    return removeDeadEntries(
        p.has_parent_path() ? p.parent_path().string() : std::string("."), "." + p.filename().string() + ".tmp-");
}

namespace {

/// @p a is @p b or lies below it (both lexically normal and absolute)
bool isWithin(const std::filesystem::path& a, const std::filesystem::path& b)
{
    auto ai = a.begin();
    for (auto bi = b.begin(); bi != b.end(); ++bi, ++ai) {
        if (bi->empty() && std::next(bi) == b.end()) break; // a trailing separator
        if (ai == a.end() || *ai != *bi) return false;
    }
    return true;
}

} // namespace

void refuseOutputOverSpecialFile(const std::string& output, OutputShape shape)
{
    std::string name = output;
    while (name.size() > 1 && name.back() == '/') // "out/" names the link "out" too
        name.pop_back();
    struct stat there
    { };
    if (::lstat(name.c_str(), &there) != 0 || S_ISREG(there.st_mode) || S_ISDIR(there.st_mode)) return;
    const bool link = S_ISLNK(there.st_mode);
    const char* what = link       ? "a symbolic link"
        : S_ISCHR(there.st_mode)  ? "a character device"
        : S_ISBLK(there.st_mode)  ? "a block device"
        : S_ISFIFO(there.st_mode) ? "a FIFO"
        : S_ISSOCK(there.st_mode) ? "a socket"
                                  : "not a regular file";
    const bool folder = shape == OutputShape::Folder;
    struct stat target
    { };
    // the hint names what the link leads to only when that is what this output is (a folder for a folder)
    const bool leadsToShape
        = link && ::stat(name.c_str(), &target) == 0 && (folder ? S_ISDIR(target.st_mode) : S_ISREG(target.st_mode));
    throw Error(ErrorKind::Usage, output,
        std::string("is ") + what + ": the output " + (folder ? "folder" : "") + (folder ? " is" : "is")
            + " written whole and then renamed onto its name, which would replace it with a "
            + (folder ? "folder" : "regular file") + "; name a " + (folder ? "folder" : "regular file")
            + " (or a new name)"
            + (leadsToShape ? (folder ? ", the folder the link leads to if that is where to write"
                                      : ", the file the link leads to if that is the one to replace")
                            : ""));
}

void refuseOutputOverInputs(const std::string& output, const std::vector<std::string>& inputs)
{
    if (isUrl(output)) {
        // object stores have no links: the names say it
        const std::string out = displayLocation(output);
        auto within = [](const std::string& a, const std::string& b) {
            return a.size() > b.size() && a.compare(0, b.size(), b) == 0 && a[b.size()] == '/';
        };
        for (const auto& input : inputs) {
            const std::string in = displayLocation(input);
            std::string why;
            if (out == in)
                why = "is the input " + in;
            else if (within(out, in))
                why = "lies inside the input checkpoint folder " + in;
            else if (within(in, out))
                why = "is a folder that holds the input " + in;
            if (!why.empty())
                throw Error(ErrorKind::Usage, out,
                    why + ": writing it would destroy what is being read; choose an output outside the input");
        }
        return;
    }
    namespace fs = std::filesystem;
    std::error_code ec;
    // weakly_canonical resolves the symlinks of the part that exists, so another spelling of an input is that input
    const fs::path out = fs::weakly_canonical(fs::absolute(output, ec), ec);
    struct stat outSt
    { };
    const bool outExists = ::stat(output.c_str(), &outSt) == 0;
    for (const auto& input : inputs) {
        if (input.empty()) continue;
        std::error_code iec;
        const fs::path in = fs::weakly_canonical(fs::absolute(input, iec), iec);
        struct stat inSt
        { };
        const bool inExists = ::stat(input.c_str(), &inSt) == 0;
        const bool inIsDir = inExists && S_ISDIR(inSt.st_mode);
        std::string why;
        if ((outExists && inExists && outSt.st_dev == inSt.st_dev && outSt.st_ino == inSt.st_ino) || (!ec && out == in))
            why = "is the input " + input;
        else if (inIsDir && !ec && isWithin(out, in))
            why = "lies inside the input checkpoint folder " + input;
        else if (outExists && S_ISDIR(outSt.st_mode) && !ec && isWithin(in, out))
            why = "is a folder that holds the input " + input;
        if (!why.empty())
            throw Error(ErrorKind::Usage, output,
                why + ": writing it would destroy what is being read; choose an output outside the input");
    }
}

OutputFile::OutputFile(std::string path, WriteOptions options)
    : m_path(std::move(path))
    , m_options(options)
{
    refuseOutputOverInputs(m_path, m_options.inputs);
    // one file or object: a name ending in '/' (on object storage it would become a "folder" marker holding the data)
    // or a folder that is there names none
    if (!m_path.empty() && (displayLocation(m_path).back() == '/' || (!isUrl(m_path) && isFolder(m_path))))
        throw Error(ErrorKind::Usage, displayLocation(m_path),
            "names a folder: name the file to write in it (for example "
                + childLocation(displayLocation(m_path), "out.pt") + ")");
    if (isUrl(m_path)) {
        // on object storage "P" and the folder "P/" can both be there; an object beside a checkpoint folder of the
        // same name is one no reader opens (it opens the folder). One listing; none for the files of a fresh output
        checkWritableUrl(m_path);
        if (!m_options.inFreshFolder && isFolder(m_path))
            throw Error(ErrorKind::Usage, displayLocation(m_path),
                "names a folder: name the file to write in it (for example "
                    + childLocation(displayLocation(m_path), "out.pt") + ")");
        m_upload = std::make_unique<ObjectUpload>(m_path); // visible only once commit() completes it
        if (!m_options.newObjectsTag.empty()) m_upload->createOnlyNew(m_options.newObjectsTag);
        m_buffer = new char[kBufferSize];
        return;
    }
    refuseOutputOverSpecialFile(m_path, OutputShape::File);
    if (!m_options.inFreshFolder) removeStaleTemporaries(m_path);
    std::string templ;
    for (;;) {
        templ = temporaryPrefix(m_path) + "XXXXXX";
        m_fd = ::mkstemp(templ.data());
        if (m_fd < 0)
            throw Error(ErrorKind::Io, m_path,
                std::string("cannot create a temporary file next to it: ") + std::strerror(errno));
        // held until the descriptor closes: another process's cleanup sees that this temporary is alive
        TemporaryLock::lockFd(m_fd);
        // a cleanup that took it between mkstemp and the lock removed it: start again with a new name
        struct stat st
        { };
        if (::fstat(m_fd, &st) == 0 && st.st_nlink > 0) break;
        ::close(m_fd);
    }
    ::fchmod(m_fd, 0644);
    m_temp = templ;
    m_buffer = new char[kBufferSize];
}

const uint64_t OutputFile::kMinShareBytes = ObjectUpload::kMinPartBytes;

OutputFile::OutputFile(std::string path, const std::string& shared, WriteOptions options)
    : m_path(std::move(path))
    , m_joined(true)
    , m_options(std::move(options))
{
    if (isUrl(m_path)) {
        m_upload = std::make_unique<ObjectUpload>(m_path, shared);
        m_buffer = new char[kBufferSize];
        return;
    }
    const std::string& tempPath = shared;
    m_temp = tempPath;
    m_fd = ::open(tempPath.c_str(), O_WRONLY | O_CLOEXEC);
    if (m_fd < 0)
        throw Error(ErrorKind::Io, m_path,
            "cannot open its temporary " + tempPath + ", made by another process of the job: " + std::strerror(errno)
                + " (every process must see the output's folder: a file system they share)");
    m_buffer = new char[kBufferSize];
}

OutputFile::~OutputFile()
{
    m_upload.reset(); // not committed: the upload is aborted
    delete[] m_buffer;
    if (m_fd >= 0) ::close(m_fd);
    if (!m_committed && !m_joined && !m_temp.empty()) ::unlink(m_temp.c_str());
}

void OutputFile::abandonJoined()
{
    if (m_joined && !m_temp.empty() && !isUrl(m_path)) ::unlink(m_temp.c_str());
    // the upload rank 0 started, which it will never complete or abort
    if (m_joined && isUrl(m_path)) abortUploadsUnder(m_path);
}

std::string OutputFile::shareWithJob()
{
    return m_upload ? m_upload->startShared() : m_temp;
}

void OutputFile::beginShare(uint64_t position, size_t index, size_t count, uint64_t bytes)
{
    if (!m_upload) return seek(position);
    flushBuffer();
    m_upload->beginShare(index, count, bytes);
    m_position = position;
}

void OutputFile::addPartsWritten(const std::string& parts)
{
    if (m_upload) m_upload->addParts(parts);
}

void OutputFile::seek(uint64_t position)
{
    if (position == m_position) return;
    if (m_upload)
        throw Error(ErrorKind::Usage, m_path,
            "an object is written front to back: bytes out of order cannot be streamed to object storage");
    flushBuffer();
    if (::lseek(m_fd, static_cast<off_t>(position), SEEK_SET) < 0)
        throw Error(ErrorKind::Io, m_path, std::string("seek failed: ") + std::strerror(errno));
    m_position = position;
}

void OutputFile::flushBuffer()
{
    if (m_upload) {
        m_upload->write(m_buffer, m_buffered);
        if (m_buffered > 0) pausePoint("writing");
        m_buffered = 0;
        return;
    }
    size_t done = 0;
    while (done < m_buffered) {
        const ssize_t n = ::write(m_fd, m_buffer + done, m_buffered - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error(ErrorKind::Io, m_path, std::string("write failed: ") + std::strerror(errno));
        done += static_cast<size_t>(n);
    }
    m_buffered = 0;
    if (done > 0) pausePoint("writing");
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
    if (m_upload) {
        m_upload->write(p, size);
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
    if (m_upload) {
        copyThroughBuffer(srcFd, offset, length);
        return;
    }
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
            copyThroughBuffer(srcFd, static_cast<uint64_t>(in), left);
            return;
        }
        throw Error(ErrorKind::Io, m_path, std::string("copy_file_range failed: ") + std::strerror(errno));
    }
}

void OutputFile::copyThroughBuffer(int srcFd, uint64_t offset, uint64_t length)
{
    std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(length, 8u << 20)));
    uint64_t left = length;
    off_t in = static_cast<off_t>(offset);
    while (left > 0) {
        const ssize_t r = ::pread(srcFd, buf.data(), std::min<uint64_t>(left, buf.size()), in);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) throw Error(ErrorKind::Io, m_path, "copying from a source file: it ended early or failed to read");
        write(buf.data(), static_cast<size_t>(r));
        flushBuffer();
        in += r;
        left -= static_cast<uint64_t>(r);
    }
}

void OutputFile::commit()
{
    flushBuffer();
    if (m_fd >= 0 && m_options.fsync && ::fsync(m_fd) != 0)
        throw Error(ErrorKind::Io, m_path, std::string("fsync failed: ") + std::strerror(errno));
    if (m_joined) { // its maker renames or completes it
        if (m_upload) m_partsWritten = m_upload->finishShare();
        m_committed = true;
        if (m_fd >= 0) ::close(m_fd);
        m_fd = -1;
        return;
    }
    if (m_options.cancelled && m_options.cancelled()) throw Error(ErrorKind::Cancelled, m_path, "cancelled");
    if (m_options.beforeCommit) m_options.beforeCommit();
    if (m_upload) {
        m_upload->complete(); // the object appears whole, now
        m_committed = true;
        return;
    }
    if (::rename(m_temp.c_str(), m_path.c_str()) != 0)
        throw Error(ErrorKind::Io, m_path,
            std::string("cannot rename the finished temporary into place: ") + std::strerror(errno));
    m_committed = true;
    ::close(m_fd); // only now: the lock on it says "alive" until the temporary has its final name
    m_fd = -1;
}

} // namespace optscope
