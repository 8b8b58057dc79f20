// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/base/error.h"

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
    if (!file.empty()) msg = file + ": ";
    msg += detail;
    if (offset != Error::NoOffset) msg += " (at byte " + std::to_string(offset) + ")";
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

} // namespace optscope
