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

ZipArchive ZipArchive::parseInPlace(const ByteSource& file, uint64_t offset, uint64_t size, std::string name)
{
    return parse(file.bytes(offset, 0), size, std::move(name),
        [&file, offset](uint64_t at, uint64_t length) { file.bytes(offset + at, length); });
}

ZipArchive ZipArchive::parse(const uint8_t* data, uint64_t size, std::string name,
    const std::function<void(uint64_t offset, uint64_t length)>& need)
{
    auto fetch = [&](uint64_t offset, uint64_t length) {
        if (need && offset < size) need(offset, std::min(length, size - offset));
    };
    ZipArchive z;
    z.m_data = data;
    z.m_size = size;
    z.m_name = std::move(name);
    auto fail = [&](ErrorKind kind, const std::string& what, uint64_t offset) {
        throw Error(kind, z.m_name, "zip: " + what, offset);
    };

    if (size < kEocdSize)
        fail(ErrorKind::Truncated, "too short to be a zip archive (" + std::to_string(size) + " bytes)", 0);

    // 1. EOCD: scan back over a possible comment (at most 65535 bytes)
    uint64_t eocd = UINT64_MAX;
    const uint64_t scanStart = size - kEocdSize;
    const uint64_t scanEnd = scanStart > kMaxComment ? scanStart - kMaxComment : 0;
    // a remote archive: the record without a comment (torch.save writes none) and a ZIP64 locator before it first,
    // the 64 KiB a comment may take only when that is not it (a check parsing a DCP item again after its storage's
    // blocks were given back fetched a 64 KiB block of tensor bytes again for this)
    const uint64_t noComment = std::min<uint64_t>(size, kEocdSize + 20);
    fetch(size - noComment, noComment);
    if (rd32(data + scanStart) != kEocdSig || rd16(data + scanStart + 20) != 0) fetch(scanEnd, size - scanEnd);
    for (uint64_t pos = scanStart + 1; pos-- > scanEnd;) {
        if (rd32(data + pos) == kEocdSig && pos + kEocdSize + rd16(data + pos + 20) == size) {
            eocd = pos;
            break;
        }
    }
    if (eocd == UINT64_MAX)
        fail(ErrorKind::Truncated, "no end-of-central-directory record (file cut short or not a zip archive)", size);

    uint64_t entryCount = rd16(data + eocd + 10);
    uint64_t cdSize = rd32(data + eocd + 12);
    uint64_t cdOffset = rd32(data + eocd + 16);

    // 2. ZIP64 locator right before the EOCD
    if (eocd >= 20 && rd32(data + eocd - 20) == kEocd64LocatorSig) {
        const uint64_t eocd64 = rd64(data + eocd - 20 + 8);
        if (eocd64 <= size && size - eocd64 >= 56) fetch(eocd64, 56);
        if (eocd64 > size || size - eocd64 < 56 || rd32(data + eocd64) != kEocd64Sig)
            fail(ErrorKind::Format, "ZIP64 end-of-central-directory record missing or out of range", eocd - 20);
        entryCount = rd64(data + eocd64 + 32);
        cdSize = rd64(data + eocd64 + 40);
        cdOffset = rd64(data + eocd64 + 48);
    }
    if (cdOffset > size || cdSize > size - cdOffset)
        fail(ErrorKind::Format,
            "central directory [" + std::to_string(cdOffset) + ", +" + std::to_string(cdSize)
                + ") lies outside the archive of " + std::to_string(size) + " bytes",
            eocd);
    if (entryCount > cdSize / kCentralSize)
        fail(ErrorKind::Format,
            std::to_string(entryCount) + " entries cannot fit a central directory of " + std::to_string(cdSize)
                + " bytes",
            eocd);

    fetch(cdOffset, cdSize);
    z.m_entries.reserve(static_cast<size_t>(entryCount));
    z.m_byName.reserve(static_cast<size_t>(entryCount));
    uint64_t pos = cdOffset;
    const uint64_t cdEnd = cdOffset + cdSize;
    for (uint64_t i = 0; i < entryCount; ++i) {
        if (cdEnd - pos < kCentralSize || rd32(data + pos) != kCentralSig)
            fail(ErrorKind::Format, "bad central directory record " + std::to_string(i), pos);
        const uint8_t* c = data + pos;
        const uint16_t flags = rd16(c + 8);
        const uint16_t method = rd16(c + 10);
        ZipEntry e;
        e.crc32 = rd32(c + 16);
        uint64_t compSize = rd32(c + 20);
        uint64_t size32 = rd32(c + 24);
        const uint16_t nameLen = rd16(c + 28);
        const uint16_t extraLen = rd16(c + 30);
        const uint16_t commentLen = rd16(c + 32);
        uint64_t localOffset = rd32(c + 42);
        const uint64_t recLen = kCentralSize + nameLen + extraLen + commentLen;
        if (cdEnd - pos < recLen)
            fail(ErrorKind::Format, "central directory record " + std::to_string(i) + " runs past the directory", pos);
        e.name = std::string_view(reinterpret_cast<const char*>(c + kCentralSize), nameLen);
        if (i == 0) {
            const auto slash = e.name.find('/');
            if (slash == std::string_view::npos)
                fail(ErrorKind::Format,
                    "first entry '" + std::string(e.name) + "' has no '/' (not a torch.save archive)", pos);
            z.m_prefix = std::string(e.name.substr(0, slash));
        }
        // every record lies in the first one's folder: torch.load refuses an archive with one outside it, as "../x"
        // (PyTorchStreamReader: "file in archive is not in a subdirectory PREFIX/: NAME")
        if (e.name.size() <= z.m_prefix.size() || e.name.compare(0, z.m_prefix.size(), z.m_prefix) != 0
            || e.name[z.m_prefix.size()] != '/')
            fail(ErrorKind::Format,
                "record '" + std::string(e.name) + "' is not in the archive's folder '" + z.m_prefix
                    + "/' (torch.load refuses the file: \"file in archive is not in a subdirectory " + z.m_prefix
                    + "/: " + std::string(e.name) + "\")",
                pos);
        // ZIP64 extra field: the 64-bit values appear only for fields that are 0xFFFFFFFF, in this order
        const uint8_t* x = c + kCentralSize + nameLen;
        const uint8_t* xEnd = x + extraLen;
        while (xEnd - x >= 4) {
            const uint16_t id = rd16(x);
            const uint16_t len = rd16(x + 2);
            if (xEnd - x - 4 < len)
                fail(ErrorKind::Format, "extra field of '" + std::string(e.name) + "' runs past its record", pos);
            if (id == 0x0001) {
                const uint8_t* f = x + 4;
                const uint8_t* fEnd = f + len;
                auto next = [&](uint64_t& field) {
                    if (field != 0xFFFFFFFFu) return;
                    if (fEnd - f < 8)
                        fail(ErrorKind::Format, "short ZIP64 extra field of '" + std::string(e.name) + "'", pos);
                    field = rd64(f);
                    f += 8;
                };
                next(size32);
                next(compSize);
                next(localOffset);
            }
            x += 4 + len;
        }
        if (method != 0)
            fail(ErrorKind::Unsupported,
                "entry '" + std::string(e.name) + "' is compressed (method " + std::to_string(method)
                    + "); torch.save archives store records uncompressed",
                pos);
        if (flags & 0x1) fail(ErrorKind::Unsupported, "entry '" + std::string(e.name) + "' is encrypted", pos);
        if (compSize != size32)
            fail(ErrorKind::Format, "entry '" + std::string(e.name) + "' has different stored and uncompressed sizes",
                pos);
        e.size = size32;
        // local header gives the data offset (its extra field differs from the central one: torch's alignment pad)
        fetch(localOffset, kLocalSize);
        if (localOffset > size || size - localOffset < kLocalSize || rd32(data + localOffset) != kLocalHeaderSig)
            fail(ErrorKind::Format,
                "entry '" + std::string(e.name) + "' has no local header at its recorded offset "
                    + std::to_string(localOffset),
                pos);
        const uint64_t lNameLen = rd16(data + localOffset + 26);
        const uint64_t lExtraLen = rd16(data + localOffset + 28);
        e.dataOffset = localOffset + kLocalSize + lNameLen + lExtraLen;
        if (e.dataOffset > size || e.size > size - e.dataOffset)
            fail(ErrorKind::Truncated,
                "entry '" + std::string(e.name) + "' data [" + std::to_string(e.dataOffset) + ", +"
                    + std::to_string(e.size) + ") runs past the end of the archive (" + std::to_string(size)
                    + " bytes)",
                localOffset);
        if (!z.m_byName.emplace(e.name, z.m_entries.size()).second)
            fail(ErrorKind::Format, "duplicate entry '" + std::string(e.name) + "'", pos);
        z.m_entries.push_back(std::move(e));
        pos += recLen;
    }
    if (z.m_entries.empty()) fail(ErrorKind::Format, "archive has no entries", eocd);
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
