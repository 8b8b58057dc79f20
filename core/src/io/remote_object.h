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
void remoteStatAhead(const std::vector<std::string>& urls);
std::vector<std::string> remoteFolderEntries(const std::string& url);
bool remoteCanList(const std::string& url);
/// a tag that stands for @p userinfo ("user:password") and @p query in a location ("q=N", readerLocation puts it
/// after '#'): a request for a URL that carries it is sent with them instead (the same pair, the same tag). So no
/// location, which messages and reports show, holds a password or a presigned signature
std::string tagRequestParts(const std::string& userinfo, const std::string& query);

/// The URL of @p encodedKey in @p bucket on AWS's own endpoint of @p region, addressed as botocore's default does:
/// virtual-hosted (https://BUCKET.s3.REGION.amazonaws.com/KEY) when the name is a DNS label without dots, else
/// path-style (https://s3.REGION.amazonaws.com/BUCKET/KEY): a dotted name fails TLS under the one-label wildcard
/// certificate, and a legacy name (upper case, '_') is no host name at all
std::string awsObjectUrl(const std::string& bucket, const std::string& region, const std::string& encodedKey);

/// A streamed upload to the object @p url (s3:// or gs:// only): an output larger than the local disk is never
/// staged there. write() appends; each part of 16 MiB (doubling every 1,000 parts, so the 10,000 parts S3 allows
/// reach 16 TiB) is sent as soon as the next byte arrives, by a background thread while the writer goes on, each
/// SHA-256-signed and retried as reads are. At most 128 MiB of parts (or one part, once they are larger) wait or are
/// in flight; the writer waits for room. complete() makes the object visible: one PUT when it is 16 MiB or less,
/// else CompleteMultipartUpload. Destroyed before complete(), a multipart upload is aborted: nothing appears.
/// Failures are Error(Io) naming the URL, thrown by the write() or complete() after them.
///
/// Written by the processes of a job (one torch.save file): the object's bytes are cut into shares, contiguous runs
/// in the object's order, each streamed front to back by one process. The process that made the upload starts it
/// (startShared) and tells the others its id; they join it. Before a share's first byte, every writer says which
/// share of how many it begins (beginShare): share i of n gets part numbers from 1 + i * (10,000 / n), so that the
/// processes number their parts apart without talking, and k parts of about bytes / k each, so that a share fits its
/// block and none of its parts is short. S3 needs every part but the object's last to be at least kMinPartBytes: the
/// caller plans shares that long.
/// A joined upload's finishShare() sends its last part and gives its parts (number and ETag each) for the maker's
/// addParts(); only the maker completes or aborts.
class ObjectUpload
{
public:
    /// S3's smallest part but the last
    static constexpr uint64_t kMinPartBytes = uint64_t(5) << 20;

    explicit ObjectUpload(const std::string& url);
    /// joins the multipart upload @p uploadId of @p url that another process started (its startShared())
    ObjectUpload(const std::string& url, const std::string& uploadId);
    ~ObjectUpload();
    ObjectUpload(const ObjectUpload&) = delete;
    ObjectUpload& operator=(const ObjectUpload&) = delete;
    void write(const void* data, size_t size);
    void complete();

    /// the object is created only where none is (If-None-Match: * on S3, x-goog-if-generation-match: 0 on GCS) and
    /// carries @p writerTag as its metadata: an object another writer created meanwhile is an error, and kept; a
    /// failed run's clean-up removes its own objects by their tag (removeObject). Before the first write.
    void createOnlyNew(const std::string& writerTag);
    /// starts the multipart upload now (nothing written yet); its id, for the other processes' joined uploads
    std::string startShared();
    /// the writes that follow are share @p index of @p count, @p bytes long (0: not known, the object's last share)
    void beginShare(size_t index, size_t count, uint64_t bytes);
    /// a joined upload: sends the last part and waits for all; "NUMBER ETAG" lines of every part this process sent
    std::string finishShare();
    /// the maker: parts another process sent (its finishShare()), listed when complete() completes the upload
    void addParts(const std::string& parts);

private:
    struct State;
    void sendFilledPart();
    void sendParts();
    void sendLastParts();
    std::unique_ptr<State> m;
};
/// removes the object @p url (cleanup of an output that did not complete); errors are ignored, and what could not be
/// removed is said (remoteLeftBehind). With @p writerTag, only an object that carries it (createOnlyNew): one another
/// writer created there is kept
void removeObject(const std::string& url, const std::string& writerTag = {});
/// aborts the incomplete multipart uploads of the object @p url, or of every key under it when it ends in '/' (a
/// job's output, whose killed process left its upload open: no process would ever complete or abort it); best
/// effort, given up after the undo's 20 s, and what is left is said (remoteLeftBehind)
void abortUploadsUnder(const std::string& url);
/// throws Error(Usage) naming @p url when outputs cannot be written there (plain HTTP); first undoes, once per process,
/// what runs killed on this machine left on object storage (output_journal.h)
void checkWritableUrl(const std::string& url);
/// the store @p url is asked at, as this process's settings resolve it (its bucket's request URL: the endpoint and
/// addressing): a journalled output is undone only against the store it was written to
std::string storeOf(const std::string& url);
/// aborts the multipart upload @p uploadId of the object @p url; false when the store did not confirm it (one that
/// is not there any more is aborted)
bool abortUpload(const std::string& url, const std::string& uploadId);
/// removes the objects under the folder @p prefix that carry @p writerTag (createOnlyNew); false when one could not
/// be listed, read or removed
bool removeTaggedObjectsUnder(const std::string& prefix, const std::string& writerTag);

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
/// One page of an S3 ListMultipartUploads answer (@p body, XML) for the keys under @p prefix: each incomplete upload
/// (its key and id) below it, the markers of the next page, whether more pages follow. Throws Error(Io) naming
/// @p shown when the body is not XML. Apart from its request, so that it is fuzzed (tests/fuzz).
struct UploadsPage
{
    struct Upload
    {
        std::string key; ///< the whole key, below the prefix
        std::string id;
    };
    std::vector<Upload> uploads;
    std::string nextKeyMarker, nextUploadIdMarker;
    bool truncated = false;
};
UploadsPage parseUploadsPage(const std::string& body, const std::string& prefix, const std::string& shown);
/// the S3 error code of an XML error body ("NoSuchKey", "SignatureDoesNotMatch"), or ""
std::string s3ErrorCode(const std::string& body);

} // namespace optscope
