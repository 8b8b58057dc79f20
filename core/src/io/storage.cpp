// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/storage.h"
#include "optscope/base/error.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/remote_object.h"
#include "optscope/io/zip_inflate.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace optscope {

bool isUrl(const std::string& location)
{
    for (const char* scheme : {"s3://", "gs://", "http://", "https://"})
        if (location.rfind(scheme, 0) == 0) return true;
    return false;
}

namespace {

bool isHttp(const std::string& location)
{
    return location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0;
}

/// where an http(s) URL's query or fragment begins; npos when it has none, and always for s3:// and gs://, whose
/// keys may hold '?' and '#' as any other character
size_t queryStart(const std::string& location)
{
    return isHttp(location) ? location.find_first_of("?#") : std::string::npos;
}

/// the '@' that ends a URL's user info ("user:password@host"): the last one before the path, query or fragment
/// (a password may hold an unencoded '@'), npos when there is none; @p host is where the authority starts
size_t userInfoEnd(const std::string& url, size_t host)
{
    const size_t end = std::min(url.find_first_of("/?#", host), url.size());
    const size_t at = end > host ? url.rfind('@', end - 1) : std::string::npos;
    return at != std::string::npos && at >= host ? at : std::string::npos;
}

/// a URL whose password holds '/', '?' or '#' unencoded ("user:Pw/x@host/..."): its authority ends early at a
/// port that is no number, and an '@' comes later; the position of the last '@', else npos. A password of digits
/// before the '/' ("user:1234/secret@host/...") reads as a host and port, its rest as the first path segment, which
/// then holds an '@' (not first: "/@scope/x" is a path; nor after a '=' in a query, "?to=a@b"): its last '@'. A path
/// whose first segment holds an '@' after a port is taken so too (refused, asked to be encoded), never shown raw
size_t unencodedUserInfoEnd(const std::string& url, size_t host)
{
    const size_t end = std::min(url.find_first_of("/?#", host), url.size());
    const size_t colon = url.find(':', host);
    if (userInfoEnd(url, host) != std::string::npos || colon >= end || url[host] == '[') return std::string::npos;
    const size_t lastAt = url.rfind('@');
    if (url.find_first_not_of("0123456789", colon + 1) < end && lastAt != std::string::npos && lastAt > colon)
        return lastAt;
    if (end + 1 >= url.size()) return std::string::npos;
    const size_t segmentEnd = std::min(url.find('/', end + 1), url.size());
    const size_t at = url.rfind('@', segmentEnd - 1);
    if (at == std::string::npos || at <= end + 1) return std::string::npos;
    if (url[end] == '?' && url.find('=', end) < at) return std::string::npos;
    return at;
}

/// RFC 3986 percent-encoding of a name appended to an http(s) URL's path ('/' kept: "sub/file" stays two segments)
std::string encodePath(const std::string& name)
{
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char c : name) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

/// the inverse of encodePath; a malformed escape stays as it is, as servers take it
std::string decodePath(const std::string& name)
{
    const auto hexValue = [](char c) {
        return c >= '0' && c <= '9' ? c - '0'
            : c >= 'a' && c <= 'f'  ? c - 'a' + 10
            : c >= 'A' && c <= 'F'  ? c - 'A' + 10
                                    : -1;
    };
    std::string out;
    for (size_t i = 0; i < name.size(); ++i) {
        const int hi = name[i] == '%' && i + 2 < name.size() ? hexValue(name[i + 1]) : -1;
        const int lo = hi >= 0 ? hexValue(name[i + 2]) : -1;
        if (lo >= 0) {
            out += static_cast<char>(hi * 16 + lo);
            i += 2;
        } else {
            out += name[i];
        }
    }
    return out;
}

/// a URL without its query and trailing slashes, and where its path begins (after the bucket or host)
std::pair<std::string, size_t> urlPath(const std::string& location)
{
    std::string base = canonicalLocation(location.substr(0, queryStart(location)));
    const size_t host = base.find("://") + 3;
    return {base, base.find('/', host)};
}

} // namespace

std::string parentLocation(const std::string& location)
{
    if (!isUrl(location)) return std::filesystem::path(location).parent_path().string();
    const auto [base, pathStart] = urlPath(location);
    if (pathStart == std::string::npos) return location;
    const size_t q = queryStart(location);
    return base.substr(0, base.rfind('/')) + (q == std::string::npos ? "" : location.substr(q));
}

std::string locationName(const std::string& location)
{
    if (!isUrl(location)) return std::filesystem::path(location).filename().string();
    const auto [base, pathStart] = urlPath(location);
    if (pathStart == std::string::npos) return {};
    const std::string name = base.substr(base.rfind('/') + 1);
    if (!isHttp(location)) return name;
    // "%2F" stays encoded: decoded, it would read as two names
    const std::string decoded = decodePath(name);
    return decoded.find('/') == std::string::npos ? decoded : name;
}

std::string canonicalLocation(const std::string& location)
{
    if (!isUrl(location)) return location;
    const size_t q = queryStart(location);
    std::string base = location.substr(0, q);
    const size_t keep = base.find("://") + 4; // "s3://b": the bucket's (the host's) first character stays
    while (base.size() > keep && base.back() == '/')
        base.pop_back();
    return q == std::string::npos ? base : base + location.substr(q);
}

std::string readerLocation(const std::string& location)
{
    if (isHttp(location) && unencodedUserInfoEnd(location, location.find("://") + 3) != std::string::npos)
        throw Error(ErrorKind::Usage, displayLocation(location),
            "the password in the URL holds '/', '?' or '#' unencoded: percent-encode them (%2F, %3F, %23)");
    const std::string canonical = canonicalLocation(location);
    if (!isHttp(canonical)) return canonical;
    const size_t q = queryStart(canonical);
    std::string base = canonicalLocation(canonical.substr(0, q));
    // the user info ("user:password@host") and the query, not a fragment ("#frag" is never sent): the location
    // carries a tag for them, as a fragment: names built on it go before it (childLocation), messages and reports
    // show it without them, requests send them
    const size_t host = base.find("://") + 3;
    const size_t at = userInfoEnd(base, host);
    std::string userinfo;
    if (at != std::string::npos) {
        userinfo = base.substr(host, at - host);
        base.erase(host, at + 1 - host);
    }
    const std::string query
        = q != std::string::npos && canonical[q] == '?' ? canonical.substr(q + 1, canonical.find('#', q) - q - 1) : "";
    return query.empty() && userinfo.empty() ? base : base + "#" + tagRequestParts(userinfo, query);
}

std::string displayLocation(const std::string& location)
{
    if (!isUrl(location)) return location;
    std::string s = location;
    const size_t host = s.find("://") + 3;
    if (const size_t at = userInfoEnd(s, host); at != std::string::npos) {
        s.erase(host, at + 1 - host);
    } else if (const size_t last = unencodedUserInfoEnd(s, host); last != std::string::npos) {
        s.erase(host, last + 1 - host); // a malformed URL's secret must not show either
    }
    return s.substr(0, queryStart(s));
}

LocationStat statLocation(const std::string& location)
{
    if (isUrl(location)) return remoteStat(location);
    struct stat st
    { };
    if (::stat(location.c_str(), &st) != 0) return {};
    const int64_t modified = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (S_ISDIR(st.st_mode)) return {LocationKind::Folder, 0, modified, {}, {}};
    if (S_ISREG(st.st_mode)) return {LocationKind::File, static_cast<uint64_t>(st.st_size), modified, {}, {}};
    return {LocationKind::Other, 0, modified, {}, {}};
}

void statAhead(const std::vector<std::string>& locations)
{
    std::vector<std::string> urls;
    for (const auto& l : locations)
        if (isUrl(l)) urls.push_back(l);
    if (!urls.empty()) remoteStatAhead(urls);
}

std::vector<std::string> folderEntries(const std::string& folder)
{
    if (isUrl(folder)) return remoteFolderEntries(folder);
    std::vector<std::string> names;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
        names.push_back(it->path().filename().string());
    if (ec) throw Error(ErrorKind::Io, folder, "cannot list the folder: " + ec.message());
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<FolderEntry> listFolder(const std::string& folder)
{
    std::vector<FolderEntry> out;
    // Nothing there, a file, or a web server: no entries, as a reader that looks for its files expects. A folder that
    // is there but cannot be listed (permission, an object store's 403 or 5xx, a dropped connection, a cancel) is an
    // error naming it: taken for empty, it made a format's files look missing ("no optimizer state") or, in a job,
    // made one process see another checkpoint than the others.
    if (!canListFolder(folder) || (!isUrl(folder) && !isFolder(folder))) return out;
    for (auto& n : folderEntries(folder))
        out.push_back({n, childLocation(folder, n)});
    return out;
}

bool isReadFailure(const Error& e)
{
    return e.kind() == ErrorKind::Io || e.kind() == ErrorKind::Cancelled;
}

bool canListFolder(const std::string& folder)
{
    return !isUrl(folder) || remoteCanList(folder);
}

std::string childLocation(const std::string& folder, const std::string& name)
{
    if (folder.empty()) return name;
    if (!isUrl(folder)) return folder.back() == '/' ? folder + name : folder + "/" + name;
    // a URL: the name before an http(s) query (a token that holds for the folder's objects), encoded as a path
    const size_t q = queryStart(folder);
    const std::string base = folder.substr(0, q);
    const std::string n = isHttp(folder) ? encodePath(name) : name;
    return (base.back() == '/' ? base + n : base + "/" + n) + (q == std::string::npos ? "" : folder.substr(q));
}

std::string folderLocation(const std::string& location)
{
    if (isUrl(location)) return canonicalLocation(location);
    std::string path = location;
    while (path.size() > 1 && path.back() == '/')
        path.pop_back();
    return path;
}

std::string readSmallFile(const std::string& location, uint64_t maxBytes)
{
    const auto file = openByteSource(location);
    if (file->size() > maxBytes)
        throw Error(ErrorKind::Limit, file->path(),
            "is larger than " + std::to_string(maxBytes) + " bytes (" + std::to_string(file->size()) + ")");
    return std::string(reinterpret_cast<const char*>(file->all()), file->size());
}

std::shared_ptr<const ByteSource> openByteSource(const std::string& location)
{
    if (isUrl(location)) return openRemoteObject(location);
    return inflatedIfCompressed(MappedFile::open(location)); // a torch.save archive zipped again (zip_inflate.h)
}

} // namespace optscope
