// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/base/error.h"

#include <new>

namespace optscope {

const char* errorKindName(ErrorKind kind)
{
    switch (kind) {
    case ErrorKind::Io:
        return "io";
    case ErrorKind::Format:
        return "format";
    case ErrorKind::Truncated:
        return "truncated";
    case ErrorKind::Unsupported:
        return "unsupported";
    case ErrorKind::Limit:
        return "limit";
    case ErrorKind::Cancelled:
        return "cancelled";
    case ErrorKind::Usage:
        return "usage";
    }
    return "error";
}

namespace {
std::string composeMessage(const std::string& file, const std::string& detail, uint64_t offset)
{
    std::string msg;
    // a URL's location may end in the tag that stands for its password and query (readerLocation's "#q=N"): a
    // message shows neither, nor the tag
    const size_t tag = file.rfind("#q=");
    const bool tagged = tag != std::string::npos && tag + 3 < file.size()
        && file.find_first_not_of("0123456789", tag + 3) == std::string::npos;
    if (!file.empty()) msg = (tagged ? file.substr(0, tag) : file) + ": ";
    msg += detail;
    if (offset != Error::NoOffset) msg += " (at byte " + std::to_string(offset) + ")";
    // what() is a C string: a NUL that the detail quotes from a file (a `latest` tag) would end the message there
    for (size_t at = msg.find('\0'); at != std::string::npos; at = msg.find('\0', at + 4))
        msg.replace(at, 1, "\\x00");
    return msg;
}
} // namespace

Error::Error(ErrorKind kind, std::string file, std::string detail, uint64_t offset)
    : std::runtime_error(composeMessage(file, detail, offset))
    , m_kind(kind)
    , m_file(std::move(file))
    , m_detail(std::move(detail))
    , m_offset(offset)
{ }

std::string unexpectedErrorText(const std::exception& e)
{
    if (dynamic_cast<const std::bad_alloc*>(&e))
        return "ran out of memory (this checkpoint needs more than this process may use: the machine's memory, or a "
               "limit set on it such as ulimit -v or a cgroup's memory.max)";
    return std::string("internal error: ") + e.what();
}

} // namespace optscope
