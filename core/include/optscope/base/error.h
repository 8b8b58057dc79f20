// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace optscope {

/// What went wrong, coarsely; callers branch on this, people read the message.
enum class ErrorKind {
    Io, ///< the file system refused (missing file, permission, mmap failure)
    Format, ///< the bytes are not what the format says they must be
    Truncated, ///< the input ends before a record it announces
    Unsupported, ///< a valid input that this version does not handle (compressed zip, pickle buffers, ...)
    Limit, ///< a safety cap was hit (memo size, stack depth, nesting, allocation from a length field)
    Cancelled, ///< the caller's cancel predicate returned true
    Usage, ///< the caller asked for something impossible (bad option, unknown key)
};

const char* errorKindName(ErrorKind kind);

/// Every failure in the core is an Error: it names the file, the byte offset when there is one, and what is wrong.
class Error : public std::runtime_error
{
public:
    static constexpr uint64_t NoOffset = UINT64_MAX;

    Error(ErrorKind kind, std::string file, std::string detail, uint64_t offset = NoOffset);

    ErrorKind kind() const { return m_kind; }
    const std::string& file() const { return m_file; }
    const std::string& detail() const { return m_detail; }
    uint64_t offset() const { return m_offset; }
    bool hasOffset() const { return m_offset != NoOffset; }

private:
    ErrorKind m_kind;
    std::string m_file;
    std::string m_detail;
    uint64_t m_offset;
};

/// What to say of an exception that is not an Error (the CLI and the app both say this): running out of memory (a
/// checkpoint's structure larger than the memory this process may use: the machine's, or a limit set on it), or an
/// internal error, a bug, with what it says.
std::string unexpectedErrorText(const std::exception& e);

} // namespace optscope
