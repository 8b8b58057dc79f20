// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Where a checkpoint lives: a location is a local path or a URL, and readers ask these functions (not
// std::filesystem) what is there, so that one reader serves both.
//
// URLs (remote_object.cpp, through libcurl):
//   s3://BUCKET/KEY      S3 or an S3-compatible store. Endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the
//                        profile's endpoint_url (path-style addressing), else https://BUCKET.s3.REGION.amazonaws.com.
//                        Credentials as AWS tools take them: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
//                        AWS_SESSION_TOKEN, else AWS_PROFILE (default "default") in ~/.aws/credentials and
//                        ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE); none: anonymous. Region:
//                        AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1. Signed with curl's own
//                        SigV4 (CURLOPT_AWS_SIGV4). Folders are listed with ListObjectsV2.
//   gs://BUCKET/KEY      Google Cloud Storage through its S3-compatible XML API (storage.googleapis.com, HMAC keys in
//                        the same variables, SigV4 with region "auto"); STORAGE_EMULATOR_HOST (as Google's client
//                        libraries take it: host:port or a URL) sends the requests to an emulator or gateway instead.
//   http(s)://HOST/PATH  any server with Range support (presigned URLs, Hugging Face resolve URLs). A folder cannot
//                        be listed over plain HTTP: its files are found by the names a format looks for.
// TLS is verified; CURL_CA_BUNDLE, AWS_CA_BUNDLE or SSL_CERT_FILE name another CA file. Proxies: the usual variables
// (libcurl's own). Credentials never appear in any message: a URL is shown without its query or user part.

#include <cstdint>
#include <string>
#include <vector>

namespace optscope {

/// s3://, gs://, http:// or https://
bool isUrl(const std::string& location);
/// @p location as every reader builds on it: a URL without trailing slashes after its bucket or host
/// (s3://b/run/ is the folder s3://b/run, as `aws s3 ls` names prefixes); a path as it is
std::string canonicalLocation(const std::string& location);
/// canonicalLocation(@p location), and an http(s) URL's query (a presigned URL's signature, an Azure SAS, a token
/// for a folder's objects) replaced by a tag after '#' ("#q=N") that stands for it in this process: every request for
/// the location, and for names built on it (childLocation, parentLocation keep the tag), is sent with the query. So
/// no message, report or listing built from locations can show it, and two versions of one object (?versionId=)
/// are two locations. What openCheckpoint does with what the user gives
std::string readerLocation(const std::string& location);
/// a URL as messages show it: no query string (a presigned URL's signature), no user:password
std::string displayLocation(const std::string& location);

enum class LocationKind {
    Missing,
    File, ///< a regular file or an object
    Folder, ///< a directory, or a prefix that objects lie under (always assumed over plain HTTP, which cannot tell)
    Other, ///< a FIFO, device, socket
};
struct LocationStat
{
    LocationKind kind = LocationKind::Missing;
    uint64_t size = 0; ///< a file's
    int64_t modifiedNs
        = 0; ///< last modification (a folder's: an entry added or removed), ns since the epoch; 0: unknown (URLs)
    std::string detail; ///< over plain HTTP, why a location is taken for a folder: the server's answer ("HTTP 404")
    /// an object's content version where the store gives one (its ETag, from the listing or a HEAD): a same-size
    /// re-upload changes it; empty for local files (their modifiedNs says it) and folders
    std::string version;
};
LocationStat statLocation(const std::string& location);
/// Asks about many locations at once, so that the statLocation of each that follows answers from what was learned:
/// over plain HTTP (no listing) their HEADs are in flight together rather than one round trip after the other (a
/// 1,024-rank DCP's data files, a model's shards). An object store's listing already answers; local paths need no
/// asking. Failures are left to statLocation, which meets them again and says so.
void statAhead(const std::vector<std::string>& locations);
inline LocationKind locationKind(const std::string& location)
{
    return statLocation(location).kind;
}
inline bool isFolder(const std::string& location)
{
    return locationKind(location) == LocationKind::Folder;
}
inline bool isFile(const std::string& location)
{
    return locationKind(location) == LocationKind::File;
}

/// the names directly under a folder (files and folders, sorted); throws Error(Io) naming it when it cannot be listed
/// (over plain HTTP it never can: "cannot list a folder over HTTP")
std::vector<std::string> folderEntries(const std::string& folder);
/// what a folder holds, for readers that look at every entry; nothing when there is no folder there (nothing, a file)
/// or it cannot be listed (plain HTTP). A folder that is there but cannot be read throws, as folderEntries() does
/// (Error(Io) naming it: a permission, an object store's 403 or 5xx, a dropped connection; Error(Cancelled)): taken
/// for empty, it would make a format's files look missing
struct FolderEntry
{
    std::string name;
    std::string location; ///< childLocation(folder, name)
};
std::vector<FolderEntry> listFolder(const std::string& folder);
class Error;
/// whether @p e says that a location could not be read (ErrorKind::Io: gone, refused, an object store's 403 or 5xx, a
/// dropped connection; or a cancel) rather than what its bytes are. A format's probe rethrows such an error: taken
/// for "not this format", a refused read became "holds none of the checkpoint formats"
bool isReadFailure(const Error& e);
/// whether folderEntries() works for @p folder (local folders and object stores: yes; plain HTTP: no)
bool canListFolder(const std::string& folder);

/// the whole of a small file or object (a tag, a JSON index); throws Error(Limit) naming it when it holds more than
/// @p maxBytes (a 3 GB file named like a tag is not read), Error(Io) when it cannot be read
std::string readSmallFile(const std::string& location, uint64_t maxBytes);

/// @p folder + "/" + @p name, for paths and URLs alike; appended to an http(s) URL, @p name is percent-encoded and goes
/// before the URL's query
std::string childLocation(const std::string& folder, const std::string& name);
/// a folder's location without the '/'s that may end it ("out/" -> "out", "s3://b/ckpt//" -> "s3://b/ckpt", as
/// canonicalLocation; "/" kept): what a written folder's files are named from, so that they are where a reader of the
/// same location lists them
std::string folderLocation(const std::string& location);
/// the folder that holds @p location, for paths and URLs alike (std::filesystem's parent_path, which reads a URL's
/// query as part of its last name): an http(s) URL's query stays on the folder (an Azure SAS token or any token that
/// holds for the folder's objects), so childLocation(parentLocation(x), locationName(x)) is x again. A bucket or host
/// has no parent: it is returned as it is
std::string parentLocation(const std::string& location);
/// the last name of @p location (std::filesystem's filename()): without an http(s) URL's query, percent-decoded (the
/// name a listing or a local copy shows; childLocation encodes it again)
std::string locationName(const std::string& location);

/// A location to build names on, spelled as std::filesystem::path is for local paths, for paths and URLs alike:
/// `dir / "name"` is childLocation, parent_path() parentLocation, filename() locationName (a URL's query or tag stays
/// with the folder; std::filesystem::path would put names after it and read it as part of the last name)
class Location
{
public:
    Location() = default;
    Location(std::string location)
        : m_location(std::move(location))
    { }
    Location(const char* location)
        : m_location(location)
    { }
    const std::string& string() const { return m_location; }
    operator const std::string&() const { return m_location; }
    bool empty() const { return m_location.empty(); }
    Location parent_path() const { return parentLocation(m_location); }
    Location filename() const { return locationName(m_location); }
    friend Location operator/(const Location& folder, const std::string& name)
    {
        return childLocation(folder.m_location, name);
    }
    friend bool operator==(const Location& a, const std::string& b) { return a.m_location == b; }
    friend bool operator!=(const Location& a, const std::string& b) { return a.m_location != b; }

private:
    std::string m_location;
};

/// what remote reads did so far in this process (the status bar, the benchmarks)
struct RemoteTransferStats
{
    uint64_t requests = 0; ///< HTTP requests sent (HEAD, GET, LIST), retries included
    uint64_t bytesFetched = 0; ///< body bytes of ranged GETs
    uint64_t retries = 0;
    int inFlight = 0; ///< requests in flight now
    uint64_t held = 0; ///< bytes of fetched blocks held now (not given back or evicted)
    uint64_t peakHeld = 0; ///< the most bytes of fetched blocks held at once
    /// reads of an object's bytes given up after the retries (the store failing, not the checkpoint), and what the
    /// first said: a command whose findings may be those failures says so (check, diff, diagnose exit 2, not 1)
    uint64_t readFailures = 0;
    std::string firstReadFailure;
    /// objects read with neither an ETag nor a Last-Modified older than the answer (a dynamic answer): their reads
    /// could not be held to one version, so a change while they were read went unseen. The CLI and the GUI say so,
    /// naming one
    uint64_t unpinnedObjects = 0;
    std::string firstUnpinned; ///< the first by name, as messages show URLs
};
RemoteTransferStats remoteTransferStats();
/// what the CLI (at exit) and the GUI (status bar) say of @p stats' unpinned objects, one sentence naming the first;
/// empty when there are none
std::string unpinnedObjectsNote(const RemoteTransferStats& stats);
/// what undoing an unfinished output on object storage could not remove (the server did not answer in time, or
/// refused), one line each naming the object: an incomplete multipart upload (with its id, for
/// `aws s3api abort-multipart-upload`), or an object written and not removed. The CLI says them when it exits.
std::vector<std::string> remoteLeftBehind();
/// what this run undid of the outputs that runs killed on this machine left unfinished on object storage (their open
/// uploads aborted, their DCP outputs' objects removed), or could not: one sentence each, naming the URL. The CLI
/// says them when it exits (output_journal.h)
std::vector<std::string> killedRunsNotes();
/// forget the cached folder listings and object sizes (a watched run's folder grows)
void forgetRemoteListings();

} // namespace optscope
