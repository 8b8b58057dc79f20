// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The remote ByteSource and the remote half of storage.h: objects on S3-compatible stores and HTTP(S) servers, read
// through ranged GETs (libcurl). See storage.h for the URLs, credentials and endpoints.
//
// A RemoteObject is backed by a sparse anonymous map of the object's size (address space only: MAP_NORESERVE): a
// range is fetched the first time bytes() asks for it, in blocks of 64 KiB, missing blocks of one request coalesced
// into runs and the runs split into parts of at most 8 MiB fetched concurrently (curl's multi interface, 16 in flight).
// Every GET is pinned to the object's ETag (If-Match): an object replaced while it is read gives "changed while being
// read" as a local file does. 500/502/503/504/429 (S3's SlowDown), resets, timeouts and bodies shorter than asked are
// retried with exponential backoff (Retry-After honoured), never used. Fetched blocks stay until the object is let go.

#include "optscope/io/byte_source.h"
#include "optscope/io/storage.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace optscope {

std::shared_ptr<const ByteSource> openRemoteObject(const std::string& url);

LocationStat remoteStat(const std::string& url);
std::vector<std::string> remoteFolderEntries(const std::string& url);
bool remoteCanList(const std::string& url);

/// Uploads the local file @p localPath to the object @p url (s3:// or gs:// only): one PUT up to 16 MiB, else a
/// multipart upload (parts of 16 MiB or more, 16 in flight, each SHA-256-signed) that becomes visible only when it
/// is completed, and is aborted on any failure. Throws Error(Io) naming the URL.
void uploadObject(const std::string& localPath, const std::string& url);
/// removes the object @p url (cleanup of an output that did not complete); errors are ignored
void removeObject(const std::string& url);
/// throws Error(Usage) naming @p url when outputs cannot be written there (plain HTTP)
void checkWritableUrl(const std::string& url);

/// One page of an S3 ListObjectsV2 answer (@p body, XML) for the keys under @p prefix: each object or common prefix
/// below it, the continuation token, whether more pages follow. Throws Error(Io) naming @p shown when the body is
/// not XML. The listing's parser apart from its request, so that it is fuzzed (tests/fuzz).
struct ListingPage
{
    struct Item
    {
        std::string name; ///< below the prefix; a common prefix without its trailing '/'
        std::string listedAs; ///< as listed (S3 pages in this order)
        bool folder = false;
        uint64_t size = 0;
        std::string etag; ///< quoted
    };
    std::vector<Item> items;
    std::string continuation;
    bool truncated = false;
};
ListingPage parseListingPage(const std::string& body, const std::string& prefix, const std::string& shown);
/// the S3 error code of an XML error body ("NoSuchKey", "SignatureDoesNotMatch"), or ""
std::string s3ErrorCode(const std::string& body);

} // namespace optscope
