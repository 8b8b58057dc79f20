// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// A torch.save archive zipped again by another tool (`zip -r`, Python's zipfile with ZIP_DEFLATED): torch.save stores
// every record, but torch.load (miniz) also reads deflated ones. OptScope reads records in place, so such a local
// file is inflated once, when it is opened, into a stored archive in an unlinked temporary file (TMPDIR): the same
// records, in the same order, 64-byte aligned as torch.save writes them, each inflated record checked against its
// CRC-32 (a stored one is copied as it is, as torch.load checks none). Readers read that copy as they read any
// torch.save file; its path, change checks and errors are the original file's. A remote archive (S3, HTTP) is
// inflated the same way when a reader opens it as a whole torch.save file (TorchSaveReader, CheckpointFiles::
// openArchive): its central directory, which the reader fetches first anyway, says whether; then every record is
// fetched once (ranged GETs, many in flight) and the copy is read locally.

#include <memory>

namespace optscope {

class ByteSource;

/// @p file (local or remote) inflated as above when it is a zip archive with a deflated record; @p file itself
/// otherwise. Throws
/// Error naming @p file when a record does not inflate to its size and CRC-32 (damaged), for another compression
/// method, or when the copy cannot be written (the temporary folder full: what to do is said).
std::shared_ptr<const ByteSource> inflatedIfCompressed(std::shared_ptr<const ByteSource> file);

} // namespace optscope
