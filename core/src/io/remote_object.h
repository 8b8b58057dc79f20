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

} // namespace optscope
