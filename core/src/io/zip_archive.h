// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Zip container of torch.save archives (PyTorch's PyTorchStreamWriter / miniz), as far as a reader needs it.
//
//  1. The archive is a byte range; every offset below is relative to its first byte (torch.save zips are also
//     embedded inside DCP .distcp files, so the range need not start at 0 of a file).
//  2. End of central directory (EOCD, "PK\5\6", 22 bytes + comment) at the end. torch.save always also writes a
//     ZIP64 EOCD record ("PK\6\6") and its locator ("PK\6\7", 20 bytes, right before the EOCD); when present,
//     entry count, directory size and offset come from the ZIP64 record.
//  3. Central directory: one "PK\1\2" record per entry: method, sizes, name, extra (ZIP64 extra id 0x0001 holds
//     the 64-bit uncompressed size / compressed size / local header offset, each present only when the 32-bit field
//     is 0xFFFFFFFF), local header offset. Sizes are taken from here: torch writes data descriptors (flag bit 3),
//     so the local header's sizes are zero.
//  4. Local header "PK\3\4" (30 bytes + name + extra). Data starts at local_offset + 30 + name_len + extra_len;
//     torch pads the extra field ("FB" id) so that the data is 64-byte aligned relative to the archive start.
//  5. Method must be 0 (STORED); torch never compresses. An archive zipped again by another tool (deflate, method 8,
//     which torch.load reads) is inflated into a stored copy when its file is opened (zip_inflate.h); parse reads
//     it only when asked to (compressedAllowed). CRC-32 is not checked on read (torch.load does not either); check
//     verifies it (recordCrc32), and each record the copy inflates is checked against it.
//  6. The archive prefix is the first entry's name up to its first '/'; every record is "<prefix>/<name>" (torch.load
//  refuses
//     an archive with a record outside that folder, such as "../x"; so does parse).
//
// Failure semantics: anything inconsistent (bad signatures, entries or data past the end, compressed entries,
// duplicate names, a first entry without '/', a record outside the prefix) throws Error naming the archive and the byte
// offset.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace optscope {

class ByteSource;

struct ZipEntry
{
    std::string_view name; ///< full name, including the prefix (in the archive's bytes: 100k records copied no names)
    uint64_t dataOffset = 0; ///< first data byte, relative to the archive start
    uint64_t size = 0; ///< uncompressed size
    uint32_t crc32 = 0;
    uint16_t method = 0; ///< 0: stored; 8: deflate (only when parsed with compressedAllowed)
    uint64_t storedSize = 0; ///< the bytes at dataOffset: size, or the compressed size
};

class ZipArchive
{
public:
    /// Parses the central directory of the archive in [data, data+size). @p name is used in error messages.
    /// The bytes must outlive the ZipArchive. @p need(offset, length), when given, is called before each range of
    /// the archive is read (the end records, the central directory, each local header): a remote source fetches
    /// those, not the records' data.
    /// @p compressedAllowed: deflated records are listed (method, storedSize) rather than refused
    static ZipArchive parse(const uint8_t* data, uint64_t size, std::string name,
        const std::function<void(uint64_t offset, uint64_t length)>& need = {}, bool compressedAllowed = false);
    /// The archive at [offset, offset + size) of @p file, parsed reading only what parse reads (each range fetched
    /// first from a remote source: ByteSource::bytes); its records' data is fetched when a reader asks for it.
    /// @p file must outlive the ZipArchive.
    static ZipArchive parseInPlace(
        const ByteSource& file, uint64_t offset, uint64_t size, std::string name, bool compressedAllowed = false);

    const std::string& prefix() const { return m_prefix; }
    const std::vector<ZipEntry>& entries() const { return m_entries; }
    /// by full name
    const ZipEntry* find(std::string_view fullName) const;
    /// by name under the prefix ("data.pkl" finds "<prefix>/data.pkl")
    const ZipEntry* findRecord(std::string_view record) const;
    /// the record's bytes; throws if it is missing
    std::string_view recordBytes(std::string_view record) const;
    const uint8_t* base() const { return m_data; }
    uint64_t size() const { return m_size; }
    const std::string& name() const { return m_name; }

private:
    const uint8_t* m_data = nullptr;
    uint64_t m_size = 0;
    std::string m_name;
    std::string m_prefix;
    std::vector<ZipEntry> m_entries;
    std::unordered_map<std::string_view, size_t> m_byName; ///< keys point into the archive's bytes
};

/// The ranges ZipArchive::parse of an archive of @p size bytes reads before any other, for a remote source to ask for
/// ahead (ByteSource::prefetch) when many archives are opened in turn: the end records (the tail parse scans back
/// over) and the archive's first block (torch.save writes data.pkl first). Relative to the archive's start.
std::vector<std::pair<uint64_t, uint64_t>> zipFirstReads(uint64_t size);

/// a remote archive no larger than this is fetched whole, with one request, before it is parsed; a larger one has its
/// end records, central directory and local headers fetched first
constexpr uint64_t kZipFetchWholeBytes = 4u << 20;

/// true if the bytes start like a zip local header ("PK\3\4")
bool looksLikeZip(const uint8_t* data, uint64_t size);
/// true if [data, data+size) is a zip archive (its directory readable) with a record that is not stored: a look at
/// each central directory record's method, nothing else parsed. @p need as parse's: the ranges read (the first bytes,
/// the end records, the central directory) are asked for first
bool zipHasCompressedRecords(
    const uint8_t* data, uint64_t size, const std::function<void(uint64_t offset, uint64_t length)>& need = {});

/// CRC-32 (zip's, zlib's) of @p size bytes at @p data, in pieces of at most @p piece bytes; @p afterPiece(done) runs
/// after each (to check for cancellation, report progress, drop the pages read)
uint32_t recordCrc32(const uint8_t* data, uint64_t size, uint64_t piece = 64u << 20,
    const std::function<void(uint64_t done)>& afterPiece = {});

} // namespace optscope
