// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/zip_archive.h"
#include "optscope/base/error.h"
#include "optscope/io/byte_source.h"

#include <algorithm>
#include <cstring>
#include <zlib.h>

namespace optscope {

namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kEocd64Sig = 0x06064b50;
constexpr uint32_t kEocd64LocatorSig = 0x07064b50;
constexpr uint64_t kEocdSize = 22;
constexpr uint64_t kCentralSize = 46;
constexpr uint64_t kLocalSize = 30;
constexpr uint64_t kMaxComment = 65535;
constexpr uint64_t kHeadBytes = uint64_t(64) << 10; // a remote source's block: data.pkl of most state dicts

uint16_t rd16(const uint8_t* p)
{
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t rd32(const uint8_t* p)
{
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16)
        | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t rd64(const uint8_t* p)
{
    return static_cast<uint64_t>(rd32(p)) | (static_cast<uint64_t>(rd32(p + 4)) << 32);
}
/// a central directory record's length at @p c: its fixed part, name, extra field and comment
uint64_t centralRecordLength(const uint8_t* c)
{
    return kCentralSize + rd16(c + 28) + rd16(c + 30) + rd16(c + 32);
}

} // namespace

std::vector<std::pair<uint64_t, uint64_t>> zipFirstReads(uint64_t size)
{
    if (size < kEocdSize) return {};
    const uint64_t tail = std::min(size, kEocdSize + kMaxComment); // what parse's EOCD scan reads
    std::vector<std::pair<uint64_t, uint64_t>> r {{size - tail, tail}};
    if (size - tail > 0) r.emplace_back(0, std::min(kHeadBytes, size - tail));
    return r;
}

bool looksLikeZip(const uint8_t* data, uint64_t size)
{
    return size >= 4 && rd32(data) == kLocalHeaderSig;
}

ZipArchive ZipArchive::parseInPlace(
    const ByteSource& file, uint64_t offset, uint64_t size, std::string name, bool compressedAllowed)
{
    return parse(
        file.bytes(offset, 0), size, std::move(name),
        [&file, offset](uint64_t at, uint64_t length) { file.bytes(offset + at, length); }, compressedAllowed);
}

namespace {

/// Reads a zip archive's directory (parse's stages), each failure an Error naming the archive and the offset
class ZipDirectoryReader
{
public:
    ZipDirectoryReader(const uint8_t* data, uint64_t size, const std::string& name,
        const std::function<void(uint64_t offset, uint64_t length)>& need, bool compressedAllowed = false)
        : m_data(data)
        , m_size(size)
        , m_name(name)
        , m_need(need)
        , m_compressedAllowed(compressedAllowed)
    { }

    struct Directory
    {
        uint64_t eocd = 0; ///< where the end-of-central-directory record is
        uint64_t entries = 0;
        uint64_t offset = 0;
        uint64_t size = 0;
    };

    /// the end-of-central-directory record (scanned back over a comment of at most 65535 bytes) and the ZIP64 one
    /// its locator names, checked against the archive's size
    Directory directory() const
    {
        if (m_size < kEocdSize)
            fail(ErrorKind::Truncated, "too short to be a zip archive (" + std::to_string(m_size) + " bytes)", 0);
        Directory d;
        d.eocd = findEocd();
        d.entries = rd16(m_data + d.eocd + 10);
        d.size = rd32(m_data + d.eocd + 12);
        d.offset = rd32(m_data + d.eocd + 16);
        // a ZIP64 locator right before the EOCD
        if (d.eocd >= 20 && rd32(m_data + d.eocd - 20) == kEocd64LocatorSig) {
            const uint64_t eocd64 = rd64(m_data + d.eocd - 20 + 8);
            if (eocd64 <= m_size && m_size - eocd64 >= 56) fetch(eocd64, 56);
            if (eocd64 > m_size || m_size - eocd64 < 56 || rd32(m_data + eocd64) != kEocd64Sig)
                fail(ErrorKind::Format, "ZIP64 end-of-central-directory record missing or out of range", d.eocd - 20);
            d.entries = rd64(m_data + eocd64 + 32);
            d.size = rd64(m_data + eocd64 + 40);
            d.offset = rd64(m_data + eocd64 + 48);
        }
        if (d.offset > m_size || d.size > m_size - d.offset)
            fail(ErrorKind::Format,
                "central directory [" + std::to_string(d.offset) + ", +" + std::to_string(d.size)
                    + ") lies outside the archive of " + std::to_string(m_size) + " bytes",
                d.eocd);
        if (d.entries > d.size / kCentralSize)
            fail(ErrorKind::Format,
                std::to_string(d.entries) + " entries cannot fit a central directory of " + std::to_string(d.size)
                    + " bytes",
                d.eocd);
        fetch(d.offset, d.size);
        return d;
    }

    /// central directory record @p i at @p pos (before @p end): its entry, with where its data is (its local
    /// header), in @p prefix's folder (the first record's, which it sets); @p recordLength is set to its length
    ZipEntry record(uint64_t i, uint64_t pos, uint64_t end, std::string& prefix, uint64_t& recordLength) const
    {
        if (end - pos < kCentralSize || rd32(m_data + pos) != kCentralSig)
            fail(ErrorKind::Format, "bad central directory record " + std::to_string(i), pos);
        const uint8_t* c = m_data + pos;
        const uint16_t flags = rd16(c + 8);
        const uint16_t method = rd16(c + 10);
        ZipEntry e;
        e.crc32 = rd32(c + 16);
        Sizes sizes {rd32(c + 20), rd32(c + 24), rd32(c + 42)};
        const uint16_t nameLen = rd16(c + 28);
        const uint16_t extraLen = rd16(c + 30);
        recordLength = centralRecordLength(c);
        if (end - pos < recordLength)
            fail(ErrorKind::Format, "central directory record " + std::to_string(i) + " runs past the directory", pos);
        e.name = std::string_view(reinterpret_cast<const char*>(c + kCentralSize), nameLen);
        if (i == 0) {
            const auto slash = e.name.find('/');
            if (slash == std::string_view::npos)
                fail(ErrorKind::Format,
                    "first entry '" + std::string(e.name) + "' has no '/' (not a torch.save archive)", pos);
            prefix = std::string(e.name.substr(0, slash));
        }
        checkInFolder(e.name, prefix, pos);
        zip64Extra(c + kCentralSize + nameLen, extraLen, e.name, sizes, pos);
        if (method != 0 && !(method == 8 && m_compressedAllowed))
            fail(ErrorKind::Unsupported,
                "entry '" + std::string(e.name) + "' is compressed (method " + std::to_string(method)
                    + (method == 8 ? ", deflate" : "")
                    + (method == 8 ? "): torch.save stores records uncompressed, so the file was zipped again by "
                                     "another tool; OptScope inflates such a file when it opens it, but not an archive "
                                     "inside another file: save it again with torch.save(torch.load(PATH), NEW_PATH)"
                                   : "): torch.save stores records uncompressed and torch.load reads only deflate "
                                     "besides; zip it again with -0 (stored)"),
                pos);
        if (flags & 0x1) fail(ErrorKind::Unsupported, "entry '" + std::string(e.name) + "' is encrypted", pos);
        if (method == 0 && sizes.compressed != sizes.uncompressed)
            fail(ErrorKind::Format, "entry '" + std::string(e.name) + "' has different stored and uncompressed sizes",
                pos);
        e.method = method;
        e.storedSize = sizes.compressed;
        e.size = sizes.uncompressed;
        e.dataOffset = dataOffset(e, sizes.localOffset, pos);
        return e;
    }

    [[noreturn]] void fail(ErrorKind kind, const std::string& what, uint64_t offset) const
    {
        throw Error(kind, m_name, "zip: " + what, offset);
    }

private:
    /// a record's sizes and local header offset, 32-bit in the record and 64-bit in its ZIP64 extra field
    struct Sizes
    {
        uint64_t compressed, uncompressed, localOffset;
    };

    void fetch(uint64_t offset, uint64_t length) const
    {
        if (m_need && offset < m_size) m_need(offset, std::min(length, m_size - offset));
    }

    uint64_t findEocd() const
    {
        const uint64_t scanStart = m_size - kEocdSize;
        const uint64_t scanEnd = scanStart > kMaxComment ? scanStart - kMaxComment : 0;
        // a remote archive: the record without a comment (torch.save writes none) and a ZIP64 locator before it
        // first, the 64 KiB a comment may take only when that is not it (a check parsing a DCP item again after its
        // storage's blocks were given back fetched a 64 KiB block of tensor bytes again for this)
        const uint64_t noComment = std::min<uint64_t>(m_size, kEocdSize + 20);
        fetch(m_size - noComment, noComment);
        if (rd32(m_data + scanStart) != kEocdSig || rd16(m_data + scanStart + 20) != 0)
            fetch(scanEnd, m_size - scanEnd);
        for (uint64_t pos = scanStart + 1; pos-- > scanEnd;)
            if (rd32(m_data + pos) == kEocdSig && pos + kEocdSize + rd16(m_data + pos + 20) == m_size) return pos;
        fail(ErrorKind::Truncated, "no end-of-central-directory record (file cut short or not a zip archive)", m_size);
    }

    /// every record lies in the first one's folder: torch.load refuses an archive with one outside it, as "../x"
    /// (PyTorchStreamReader: "file in archive is not in a subdirectory PREFIX/: NAME")
    void checkInFolder(std::string_view name, const std::string& prefix, uint64_t pos) const
    {
        if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 || name[prefix.size()] != '/')
            fail(ErrorKind::Format,
                "record '" + std::string(name) + "' is not in the archive's folder '" + prefix
                    + "/' (torch.load refuses the file: \"file in archive is not in a subdirectory " + prefix
                    + "/: " + std::string(name) + "\")",
                pos);
    }

    /// the ZIP64 extra field: the 64-bit values appear only for fields that are 0xFFFFFFFF, in this order
    void zip64Extra(const uint8_t* x, uint16_t length, std::string_view name, Sizes& sizes, uint64_t pos) const
    {
        const uint8_t* xEnd = x + length;
        while (xEnd - x >= 4) {
            const uint16_t id = rd16(x);
            const uint16_t len = rd16(x + 2);
            if (xEnd - x - 4 < len)
                fail(ErrorKind::Format, "extra field of '" + std::string(name) + "' runs past its record", pos);
            if (id == 0x0001) {
                const uint8_t* f = x + 4;
                const uint8_t* fEnd = f + len;
                auto next = [&](uint64_t& field) {
                    if (field != 0xFFFFFFFFu) return;
                    if (fEnd - f < 8)
                        fail(ErrorKind::Format, "short ZIP64 extra field of '" + std::string(name) + "'", pos);
                    field = rd64(f);
                    f += 8;
                };
                next(sizes.uncompressed);
                next(sizes.compressed);
                next(sizes.localOffset);
            }
            x += 4 + len;
        }
    }

    /// where @p e's data starts: after its local header, whose extra field differs from the central one (torch's
    /// alignment pad)
    uint64_t dataOffset(const ZipEntry& e, uint64_t localOffset, uint64_t pos) const
    {
        fetch(localOffset, kLocalSize);
        if (localOffset > m_size || m_size - localOffset < kLocalSize || rd32(m_data + localOffset) != kLocalHeaderSig)
            fail(ErrorKind::Format,
                "entry '" + std::string(e.name) + "' has no local header at its recorded offset "
                    + std::to_string(localOffset),
                pos);
        const uint64_t lNameLen = rd16(m_data + localOffset + 26);
        const uint64_t lExtraLen = rd16(m_data + localOffset + 28);
        const uint64_t at = localOffset + kLocalSize + lNameLen + lExtraLen;
        if (at > m_size || e.storedSize > m_size - at)
            fail(ErrorKind::Truncated,
                "entry '" + std::string(e.name) + "' data [" + std::to_string(at) + ", +" + std::to_string(e.storedSize)
                    + ") runs past the end of the archive (" + std::to_string(m_size) + " bytes)",
                localOffset);
        return at;
    }

    const uint8_t* m_data;
    uint64_t m_size;
    const std::string& m_name;
    const std::function<void(uint64_t offset, uint64_t length)>& m_need;
    bool m_compressedAllowed;
};

} // namespace

bool zipHasCompressedRecords(
    const uint8_t* data, uint64_t size, const std::function<void(uint64_t offset, uint64_t length)>& need)
{
    if (need) need(0, std::min<uint64_t>(size, 4));
    if (!looksLikeZip(data, size)) return false;
    const std::string name;
    try {
        const auto d = ZipDirectoryReader(data, size, name, need).directory();
        const uint64_t end = d.offset + d.size;
        uint64_t pos = d.offset;
        for (uint64_t i = 0; i < d.entries && end - pos >= kCentralSize; ++i) {
            const uint8_t* c = data + pos;
            if (rd32(c) != kCentralSig) return false;
            if (rd16(c + 10) != 0) return true;
            pos += centralRecordLength(c);
            if (pos > end) return false;
        }
    } catch (const Error&) {
        return false; // not an archive of its own (a DCP data file starting with an item's): parse says why
    }
    return false;
}

ZipArchive ZipArchive::parse(const uint8_t* data, uint64_t size, std::string name,
    const std::function<void(uint64_t offset, uint64_t length)>& need, bool compressedAllowed)
{
    ZipArchive z;
    z.m_data = data;
    z.m_size = size;
    z.m_name = std::move(name);
    const ZipDirectoryReader reader(data, size, z.m_name, need, compressedAllowed);
    const ZipDirectoryReader::Directory d = reader.directory();
    z.m_entries.reserve(static_cast<size_t>(d.entries));
    z.m_byName.reserve(static_cast<size_t>(d.entries));
    uint64_t pos = d.offset;
    for (uint64_t i = 0; i < d.entries; ++i) {
        uint64_t length = 0;
        ZipEntry e = reader.record(i, pos, d.offset + d.size, z.m_prefix, length);
        if (!z.m_byName.emplace(e.name, z.m_entries.size()).second)
            reader.fail(ErrorKind::Format, "duplicate entry '" + std::string(e.name) + "'", pos);
        z.m_entries.push_back(std::move(e));
        pos += length;
    }
    if (z.m_entries.empty()) reader.fail(ErrorKind::Format, "archive has no entries", d.eocd);
    return z;
}

const ZipEntry* ZipArchive::find(std::string_view fullName) const
{
    auto it = m_byName.find(fullName);
    return it == m_byName.end() ? nullptr : &m_entries[it->second];
}

const ZipEntry* ZipArchive::findRecord(std::string_view record) const
{
    std::string full = m_prefix;
    full += '/';
    full.append(record);
    return find(full);
}

std::string_view ZipArchive::recordBytes(std::string_view record) const
{
    const ZipEntry* e = findRecord(record);
    if (!e)
        throw Error(ErrorKind::Format, m_name, "zip: missing record '" + m_prefix + "/" + std::string(record) + "'");
    if (e->method != 0) // (parsed with compressedAllowed: its bytes are inflated elsewhere)
        throw Error(ErrorKind::Unsupported, m_name, "zip: record '" + std::string(e->name) + "' is compressed");
    return {reinterpret_cast<const char*>(m_data + e->dataOffset), static_cast<size_t>(e->size)};
}

uint32_t recordCrc32(
    const uint8_t* data, uint64_t size, uint64_t piece, const std::function<void(uint64_t done)>& afterPiece)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    piece = std::max<uint64_t>(1, std::min<uint64_t>(piece, 1u << 30)); // zlib takes a uInt length
    for (uint64_t done = 0; done < size;) {
        const uint64_t n = std::min(piece, size - done);
        crc = crc32(crc, data + done, static_cast<uInt>(n));
        done += n;
        if (afterPiece) afterPiece(done);
    }
    return static_cast<uint32_t>(crc);
}

} // namespace optscope
