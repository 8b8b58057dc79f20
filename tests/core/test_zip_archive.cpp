// SPDX-License-Identifier: GPL-3.0-or-later
// ZipArchive::parse on real torch.save archives (tests/data, written by PyTorch), and on in-memory copies of them
// with one field changed at a time: every inconsistency must throw optscope::Error with the right kind and offset.
// The files in tests/data are only read.
#include "optscope/base/error.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/output_file.h"
#include "optscope/io/storage.h"
#include "optscope/io/zip_archive.h"
#include "optscope/io/zip_inflate.h"
#include "optscope/io/zip_writer.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

using namespace optscope;

namespace {

const std::string kData = OPTSCOPE_TEST_DATA;

using Bytes = std::vector<uint8_t>;

Bytes readFixture(const std::string& relative)
{
    auto f = MappedFile::open(kData + "/" + relative);
    return Bytes(f->all(), f->all() + f->size());
}

uint16_t rd16(const Bytes& b, uint64_t p)
{
    return static_cast<uint16_t>(b.at(p) | (b.at(p + 1) << 8));
}
uint32_t rd32(const Bytes& b, uint64_t p)
{
    return static_cast<uint32_t>(rd16(b, p)) | (static_cast<uint32_t>(rd16(b, p + 2)) << 16);
}
uint64_t rd64(const Bytes& b, uint64_t p)
{
    return static_cast<uint64_t>(rd32(b, p)) | (static_cast<uint64_t>(rd32(b, p + 4)) << 32);
}
void wr16(Bytes& b, uint64_t p, uint16_t v)
{
    b.at(p) = static_cast<uint8_t>(v);
    b.at(p + 1) = static_cast<uint8_t>(v >> 8);
}
void wr32(Bytes& b, uint64_t p, uint32_t v)
{
    wr16(b, p, static_cast<uint16_t>(v));
    wr16(b, p + 2, static_cast<uint16_t>(v >> 16));
}
void wr64(Bytes& b, uint64_t p, uint64_t v)
{
    wr32(b, p, static_cast<uint32_t>(v));
    wr32(b, p + 4, static_cast<uint32_t>(v >> 32));
}

/// Where the records of a torch.save zip are, found independently of ZipArchive (PKWARE APPNOTE 4.3).
struct Layout
{
    uint64_t eocd = 0; ///< "PK\5\6", last 22 bytes (torch writes no comment)
    uint64_t locator = 0; ///< "PK\6\7", 20 bytes before the EOCD
    uint64_t eocd64 = 0; ///< "PK\6\6"
    uint64_t cdOffset = 0;
    uint64_t cdSize = 0;
    uint64_t count = 0;
    std::vector<uint64_t> central; ///< offset of each "PK\1\2" record
    std::vector<std::string> names;
    std::vector<uint64_t> local; ///< local header offset of each entry
    size_t indexOf(const std::string& name) const
    {
        return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
    }
};

Layout layoutOf(const Bytes& b)
{
    Layout l;
    l.eocd = b.size() - 22;
    EXPECT_EQ(rd32(b, l.eocd), 0x06054b50u);
    l.locator = l.eocd - 20;
    EXPECT_EQ(rd32(b, l.locator), 0x07064b50u);
    l.eocd64 = rd64(b, l.locator + 8);
    EXPECT_EQ(rd32(b, l.eocd64), 0x06064b50u);
    l.count = rd64(b, l.eocd64 + 32);
    l.cdSize = rd64(b, l.eocd64 + 40);
    l.cdOffset = rd64(b, l.eocd64 + 48);
    uint64_t pos = l.cdOffset;
    for (uint64_t i = 0; i < l.count; ++i) {
        EXPECT_EQ(rd32(b, pos), 0x02014b50u);
        l.central.push_back(pos);
        const uint16_t n = rd16(b, pos + 28);
        l.names.emplace_back(reinterpret_cast<const char*>(b.data() + pos + 46), n);
        l.local.push_back(rd32(b, pos + 42));
        pos += 46 + n + rd16(b, pos + 30) + rd16(b, pos + 32);
    }
    EXPECT_EQ(pos, l.cdOffset + l.cdSize);
    return l;
}

/// parse() of @p size bytes of @p b that must fail; returns the error
std::optional<Error> parseError(const Bytes& b, uint64_t size)
{
    try {
        ZipArchive::parse(b.data(), size, "copy.pt");
    } catch (const Error& e) {
        return e;
    }
    return std::nullopt;
}

std::optional<Error> parseError(const Bytes& b)
{
    return parseError(b, b.size());
}

#define EXPECT_ZIP_ERROR(bytes, errorKind, errorOffset, text)                                                          \
    do {                                                                                                               \
        const auto err_ = parseError(bytes);                                                                           \
        ASSERT_TRUE(err_.has_value()) << "parse accepted a damaged archive";                                           \
        EXPECT_EQ(std::string(errorKindName(errorKind)), errorKindName(err_->kind())) << err_->what();                 \
        EXPECT_EQ(uint64_t(errorOffset), err_->offset()) << err_->what();                                              \
        EXPECT_NE(std::string(err_->what()).find(text), std::string::npos) << err_->what();                            \
        EXPECT_EQ(err_->file(), "copy.pt");                                                                            \
    } while (0)

uint32_t crc32(std::string_view s)
{
    uint32_t c = 0xffffffffu;
    for (unsigned char ch : s) {
        c ^= ch;
        for (int k = 0; k < 8; ++k)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

// --- reading real archives ------------------------------------------------------------------------------------

TEST(ZipArchive, ParsesARealTorchSaveArchive)
{
    auto file = MappedFile::open(kData + "/adam_int.pt");
    const ZipArchive zip = ZipArchive::parse(file->all(), file->size(), file->path());
    EXPECT_EQ(zip.prefix(), "adam_int");
    EXPECT_EQ(zip.base(), file->all());
    EXPECT_EQ(zip.size(), file->size());
    EXPECT_EQ(zip.name(), file->path());

    // the entries, in central directory order, as Python's zipfile lists them
    std::vector<std::string> names;
    for (const auto& e : zip.entries())
        names.push_back(std::string(e.name));
    const std::vector<std::string> expected = {"adam_int/data.pkl", "adam_int/byteorder", "adam_int/data/0",
        "adam_int/data/1", "adam_int/data/10", "adam_int/data/11", "adam_int/data/2", "adam_int/data/3",
        "adam_int/data/4", "adam_int/data/5", "adam_int/data/6", "adam_int/data/7", "adam_int/data/8",
        "adam_int/data/9", "adam_int/version", "adam_int/.data/serialization_id"};
    EXPECT_EQ(names, expected);

    const Bytes bytes(file->all(), file->all() + file->size());
    const Layout layout = layoutOf(bytes);
    ASSERT_EQ(layout.names, expected);
    for (size_t i = 0; i < zip.entries().size(); ++i) {
        const ZipEntry& e = zip.entries()[i];
        SCOPED_TRACE(e.name);
        // torch pads the local extra field so that every record's data is 64-byte aligned
        EXPECT_EQ(e.dataOffset % 64, 0u);
        EXPECT_LE(e.dataOffset + e.size, file->size());
        // data offset = local header + 30 + name + local extra (not the central extra)
        const uint64_t lh = layout.local[i];
        EXPECT_EQ(e.dataOffset, lh + 30 + rd16(bytes, lh + 26) + rd16(bytes, lh + 28));
        // sizes and CRC from the central directory; torch's local header has zeros there (data descriptor)
        EXPECT_EQ(e.size, rd32(bytes, layout.central[i] + 24));
        const std::string_view data(reinterpret_cast<const char*>(file->all() + e.dataOffset), e.size);
        EXPECT_EQ(e.crc32, crc32(data));
    }

    const ZipEntry* pkl = zip.findRecord("data.pkl");
    ASSERT_NE(pkl, nullptr);
    EXPECT_EQ(pkl, zip.find("adam_int/data.pkl"));
    EXPECT_EQ(pkl->dataOffset, 64u);
    EXPECT_EQ(pkl->size, 1029u);
    const std::string_view pklBytes = zip.recordBytes("data.pkl");
    ASSERT_EQ(pklBytes.size(), 1029u);
    EXPECT_EQ(static_cast<uint8_t>(pklBytes[0]), 0x80); // PROTO 2
    EXPECT_EQ(pklBytes[1], 2);
    EXPECT_EQ(pklBytes.back(), '.'); // STOP
    EXPECT_EQ(zip.recordBytes("byteorder"), "little");
    EXPECT_EQ(zip.recordBytes("version"), "3\n");
    ASSERT_NE(zip.findRecord("data/1"), nullptr);
    EXPECT_EQ(zip.findRecord("data/1")->size, 120u); // 30 float32
    EXPECT_EQ(zip.findRecord("data/1"), zip.find("adam_int/data/1"));
    EXPECT_EQ(zip.findRecord("data/12"), nullptr);
    EXPECT_EQ(zip.find("data.pkl"), nullptr); // full names include the prefix
    try {
        zip.recordBytes("missing");
        ADD_FAILURE() << "recordBytes of a missing record returned";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Format);
        EXPECT_NE(std::string(e.what()).find("adam_int/missing"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(file->path()), std::string::npos) << e.what();
    }
    EXPECT_TRUE(looksLikeZip(file->all(), file->size()));
    EXPECT_FALSE(looksLikeZip(file->all(), 3));
}

TEST(ZipArchive, Zip64RecordsArePresentAndAuthoritative)
{
    Bytes b = readFixture("adam_int.pt");
    const Layout l = layoutOf(b);
    // torch always writes the ZIP64 end record and its locator, even for a 4 KiB file
    EXPECT_EQ(rd32(b, l.locator), 0x07064b50u);
    EXPECT_EQ(rd32(b, l.eocd64), 0x06064b50u);
    EXPECT_EQ(l.count, 16u);
    EXPECT_EQ(rd16(b, l.eocd + 10), 16u);
    EXPECT_EQ(rd32(b, l.eocd + 16), l.cdOffset);

    // with the 32-bit EOCD fields saturated (as in archives with > 65535 entries), the ZIP64 record is used
    wr16(b, l.eocd + 8, 0xffff);
    wr16(b, l.eocd + 10, 0xffff);
    wr32(b, l.eocd + 12, 0xffffffff);
    wr32(b, l.eocd + 16, 0xffffffff);
    const ZipArchive zip = ZipArchive::parse(b.data(), b.size(), "copy.pt");
    EXPECT_EQ(zip.entries().size(), 16u);
    EXPECT_EQ(zip.recordBytes("byteorder"), "little");

    // and without the locator, the 32-bit EOCD is read
    Bytes plain = readFixture("adam_int.pt");
    wr32(plain, l.locator, 0);
    const ZipArchive zip32 = ZipArchive::parse(plain.data(), plain.size(), "copy.pt");
    EXPECT_EQ(zip32.entries().size(), 16u);
    EXPECT_EQ(zip32.recordBytes("version"), "3\n");
}

TEST(ZipArchive, ZipWithACommentIsFound)
{
    Bytes b = readFixture("adam_int.pt");
    const uint64_t eocd = b.size() - 22;
    wr16(b, eocd + 20, 5);
    for (char c : std::string("hello"))
        b.push_back(static_cast<uint8_t>(c));
    const ZipArchive zip = ZipArchive::parse(b.data(), b.size(), "copy.pt");
    EXPECT_EQ(zip.entries().size(), 16u);
}

TEST(ZipArchive, EveryTorchSaveFixtureParses)
{
    for (const char* name : {"adam_bf16.pt", "adam_fp16.pt", "adam_fp64.pt", "adam_int_proto4.pt", "adamw_fqn.pt",
             "compiled.pt", "dangerous.pt", "dtypes.pt", "sgd_momentum.pt", "fsdp1_raw_r2/optim_rank0.pt"}) {
        SCOPED_TRACE(name);
        const Bytes b = readFixture(name);
        const ZipArchive zip = ZipArchive::parse(b.data(), b.size(), name);
        EXPECT_NE(zip.findRecord("data.pkl"), nullptr);
        for (const auto& e : zip.entries()) {
            EXPECT_EQ(e.dataOffset % 64, 0u) << e.name;
            EXPECT_EQ(e.name.compare(0, zip.prefix().size() + 1, zip.prefix() + "/"), 0) << e.name;
        }
    }
    // the legacy format is not a zip
    const Bytes legacy = readFixture("adam_int_legacy.pt");
    EXPECT_FALSE(looksLikeZip(legacy.data(), legacy.size()));
    EXPECT_TRUE(parseError(legacy).has_value());
}

TEST(ZipArchive, ArchivesEmbeddedInADistcpFile)
{
    // a .distcp file is torch.save archives back to back; each parses as a byte range of its own, with offsets
    // (and the 64-byte alignment) relative to the start of the range
    const Bytes b = readFixture("fsdp2_r3/__1_0.distcp");
    uint64_t start = 0;
    size_t archives = 0;
    size_t tensors = 0;
    while (start < b.size()) {
        SCOPED_TRACE(start);
        uint64_t eocd = start;
        while (eocd + 22 <= b.size() && rd32(b, eocd) != 0x06054b50u)
            ++eocd;
        ASSERT_LE(eocd + 22, b.size());
        const uint64_t end = eocd + 22;
        const ZipArchive zip = ZipArchive::parse(b.data() + start, end - start, "item");
        EXPECT_EQ(zip.prefix(), "archive");
        ASSERT_NE(zip.findRecord("data.pkl"), nullptr);
        if (zip.findRecord("data/0")) // a tensor chunk; BYTE_IO values have no storage
            ++tensors;
        for (const auto& e : zip.entries()) {
            EXPECT_EQ(e.dataOffset % 64, 0u) << e.name;
            EXPECT_LE(e.dataOffset + e.size, end - start) << e.name;
        }
        EXPECT_EQ(zip.recordBytes("byteorder"), "little");
        ++archives;
        start = end;
    }
    EXPECT_GT(archives, 5u);
    EXPECT_GT(tensors, 5u);
    EXPECT_LT(tensors, archives);
}

// --- damaged archives -----------------------------------------------------------------------------------------

TEST(ZipArchive, TruncatedAtSeveralPoints)
{
    const Bytes b = readFixture("adam_int.pt");
    const Layout l = layoutOf(b);
    for (uint64_t cut : {uint64_t(0), uint64_t(1), uint64_t(4), uint64_t(21)}) {
        SCOPED_TRACE(cut);
        const auto err = parseError(b, cut);
        ASSERT_TRUE(err.has_value());
        EXPECT_EQ(err->kind(), ErrorKind::Truncated) << err->what();
        EXPECT_EQ(err->offset(), 0u) << err->what();
    }
    std::set<uint64_t> cuts = {22, 30, 64, 1000, b.size() / 3, b.size() / 2, l.cdOffset, l.cdOffset + 10, l.eocd64,
        l.locator, l.locator + 10, b.size() - 23, b.size() - 22, b.size() - 21, b.size() - 2, b.size() - 1};
    for (uint64_t cut = 0; cut < b.size(); cut += 97)
        cuts.insert(cut);
    for (uint64_t cut : cuts) {
        SCOPED_TRACE(cut);
        const auto err = parseError(b, cut);
        ASSERT_TRUE(err.has_value()) << "an archive cut at " << cut << " of " << b.size() << " bytes was accepted";
        EXPECT_TRUE(err->kind() == ErrorKind::Truncated || err->kind() == ErrorKind::Format) << err->what();
        EXPECT_TRUE(err->hasOffset()) << err->what();
        EXPECT_LE(err->offset(), cut) << err->what();
    }
}

TEST(ZipArchive, BadEndOfCentralDirectory)
{
    Bytes b = readFixture("adam_int.pt");
    const uint64_t eocd = b.size() - 22;
    b[eocd] = 'X';
    EXPECT_ZIP_ERROR(b, ErrorKind::Truncated, b.size(), "end-of-central-directory");

    // a comment length that does not end at the end of the file: no valid EOCD either
    Bytes c = readFixture("adam_int.pt");
    wr16(c, eocd + 20, 7);
    EXPECT_ZIP_ERROR(c, ErrorKind::Truncated, c.size(), "end-of-central-directory");

    // a ZIP64 locator pointing past the end, or at something that is not a ZIP64 record
    Bytes d = readFixture("adam_int.pt");
    const Layout l = layoutOf(d);
    wr64(d, l.locator + 8, d.size() + 1000);
    EXPECT_ZIP_ERROR(d, ErrorKind::Format, l.locator, "ZIP64");
    Bytes e = readFixture("adam_int.pt");
    wr64(e, l.locator + 8, l.eocd64 - 8);
    EXPECT_ZIP_ERROR(e, ErrorKind::Format, l.locator, "ZIP64");
    Bytes f = readFixture("adam_int.pt");
    wr64(f, l.locator + 8, ~uint64_t(0) - 10);
    EXPECT_ZIP_ERROR(f, ErrorKind::Format, l.locator, "ZIP64");
}

TEST(ZipArchive, CentralDirectoryOffsetPastTheEnd)
{
    const Bytes orig = readFixture("adam_int.pt");
    const Layout l = layoutOf(orig);
    Bytes b = orig;
    wr64(b, l.eocd64 + 48, b.size() + 100);
    EXPECT_ZIP_ERROR(b, ErrorKind::Format, l.eocd, "central directory");
    Bytes huge = orig;
    wr64(huge, l.eocd64 + 48, ~uint64_t(0) - 4);
    EXPECT_ZIP_ERROR(huge, ErrorKind::Format, l.eocd, "central directory");
    Bytes size = orig;
    wr64(size, l.eocd64 + 40, ~uint64_t(0));
    EXPECT_ZIP_ERROR(size, ErrorKind::Format, l.eocd, "central directory");
    // the same through the 32-bit EOCD, when there is no ZIP64 locator
    Bytes plain = orig;
    wr32(plain, l.locator, 0);
    wr32(plain, l.eocd + 16, static_cast<uint32_t>(plain.size() + 1));
    EXPECT_ZIP_ERROR(plain, ErrorKind::Format, l.eocd, "central directory");
    // the middle of the file cut out: the directory offset now points past the end
    Bytes cut(orig.begin(), orig.begin() + 1000);
    cut.insert(cut.end(), orig.begin() + 2000, orig.end());
    const auto err = parseError(cut);
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->kind(), ErrorKind::Format) << err->what();
}

TEST(ZipArchive, HugeOrZeroEntryCount)
{
    const Bytes orig = readFixture("adam_int.pt");
    const Layout l = layoutOf(orig);
    Bytes b = orig;
    wr64(b, l.eocd64 + 32, uint64_t(1) << 40); // nothing is reserved for 2^40 entries
    EXPECT_ZIP_ERROR(b, ErrorKind::Format, l.eocd, "entries cannot fit");
    Bytes z = orig;
    wr64(z, l.eocd64 + 32, 0);
    EXPECT_ZIP_ERROR(z, ErrorKind::Format, l.eocd, "no entries");
}

TEST(ZipArchive, CompressedOrEncryptedEntry)
{
    const Bytes orig = readFixture("adam_int.pt");
    const Layout l = layoutOf(orig);
    for (size_t i : {size_t(0), size_t(5), l.count - 1}) {
        SCOPED_TRACE(l.names[i]);
        Bytes b = orig;
        wr16(b, l.central[i] + 10, 8); // deflate
        EXPECT_ZIP_ERROR(b, ErrorKind::Unsupported, l.central[i], "compressed");
    }
    Bytes e = orig;
    wr16(e, l.central[3] + 8, rd16(e, l.central[3] + 8) | 1);
    EXPECT_ZIP_ERROR(e, ErrorKind::Unsupported, l.central[3], "encrypted");
}

TEST(ZipArchive, DuplicateNames)
{
    Bytes b = readFixture("adam_int.pt");
    const Layout l = layoutOf(b);
    const size_t i = l.indexOf("adam_int/data/1");
    ASSERT_LT(i, l.names.size());
    b[l.central[i] + 46 + 14] = '0'; // "adam_int/data/1" -> "adam_int/data/0"
    EXPECT_ZIP_ERROR(b, ErrorKind::Format, l.central[i], "duplicate entry 'adam_int/data/0'");
}

TEST(ZipArchive, EntryDataPastTheEnd)
{
    const Bytes orig = readFixture("adam_int.pt");
    const Layout l = layoutOf(orig);
    const size_t i = l.indexOf("adam_int/data/1");
    Bytes b = orig;
    wr32(b, l.central[i] + 20, 0x7fffffff);
    wr32(b, l.central[i] + 24, 0x7fffffff);
    EXPECT_ZIP_ERROR(b, ErrorKind::Truncated, l.local[i], "runs past the end");
    // the same with ZIP64 sizes: 0xFFFFFFFF in the record and 64-bit values in a ZIP64 extra field cannot be
    // patched in place, but a 0xFFFFFFFF size without the extra field is inconsistent
    Bytes z = orig;
    wr32(z, l.central[i] + 24, 0xffffffff);
    EXPECT_ZIP_ERROR(z, ErrorKind::Format, l.central[i], "different stored and uncompressed sizes");
    Bytes c = orig;
    wr32(c, l.central[i] + 20, 100);
    EXPECT_ZIP_ERROR(c, ErrorKind::Format, l.central[i], "different stored and uncompressed sizes");
}

TEST(ZipArchive, BadLocalHeader)
{
    const Bytes orig = readFixture("adam_int.pt");
    const Layout l = layoutOf(orig);
    const size_t i = l.indexOf("adam_int/data/3");
    Bytes past = orig;
    wr32(past, l.central[i] + 42, 0x7ffffff0);
    EXPECT_ZIP_ERROR(past, ErrorKind::Format, l.central[i], "no local header");
    Bytes end = orig;
    wr32(end, l.central[i] + 42, static_cast<uint32_t>(end.size() - 10)); // a header would run past the end
    EXPECT_ZIP_ERROR(end, ErrorKind::Format, l.central[i], "no local header");
    Bytes sig = orig;
    sig[l.local[i]] = 'X';
    EXPECT_ZIP_ERROR(sig, ErrorKind::Format, l.central[i], "no local header");
    // a local extra field length that moves the data past the end
    Bytes extra = orig;
    wr16(extra, l.local[l.count - 1] + 28, 0xffff);
    EXPECT_ZIP_ERROR(extra, ErrorKind::Truncated, l.local[l.count - 1], "runs past the end");
}

TEST(ZipArchive, BadCentralRecords)
{
    const Bytes orig = readFixture("adam_int.pt");
    const Layout l = layoutOf(orig);
    Bytes sig = orig;
    sig[l.central[4]] = 'X';
    EXPECT_ZIP_ERROR(sig, ErrorKind::Format, l.central[4], "bad central directory record 4");
    // the last record's name length running past the directory
    Bytes name = orig;
    wr16(name, l.central[l.count - 1] + 28, 0x4000);
    EXPECT_ZIP_ERROR(name, ErrorKind::Format, l.central[l.count - 1], "runs past the directory");
    // the tail of a name read as an extra field whose length runs past the record: "adam_int/" + extra "data.pkl"
    Bytes x = orig;
    wr16(x, l.central[0] + 28, 9);
    wr16(x, l.central[0] + 30, 8);
    EXPECT_ZIP_ERROR(x, ErrorKind::Format, l.central[0], "extra field");
    // a first entry without '/' has no archive prefix
    Bytes slash = orig;
    slash[l.central[0] + 46 + 8] = '_';
    EXPECT_ZIP_ERROR(slash, ErrorKind::Format, l.cdOffset, "has no '/'");
}

// torch.load refuses an archive holding a record outside the first record's folder ("file in archive is not in a
// subdirectory adam_int/: ../../etc/xyz/1", checked with PyTorch 2.6); one that only names ".." inside it loads
TEST(ZipArchive, ARecordOutsideTheArchivesFolderIsRefusedAsTorchLoadDoes)
{
    const Bytes orig = readFixture("adam_int.pt");
    const Layout l = layoutOf(orig);
    const size_t i = l.indexOf("adam_int/data/1");
    ASSERT_LT(i, l.names.size());
    auto renamed = [&](const std::string& to) {
        EXPECT_EQ(to.size(), l.names[i].size());
        Bytes b = orig;
        std::copy(to.begin(), to.end(), b.begin() + static_cast<std::ptrdiff_t>(l.central[i] + 46));
        return b;
    };
    EXPECT_ZIP_ERROR(renamed("../../etc/xyz/1"), ErrorKind::Format, l.central[i],
        "record '../../etc/xyz/1' is not in the archive's folder 'adam_int/' (torch.load refuses the file: \"file "
        "in archive is not in a subdirectory adam_int/: ../../etc/xyz/1\")");
    // the prefix's letters without its '/'
    EXPECT_ZIP_ERROR(renamed("adam_intxdata/1"), ErrorKind::Format, l.central[i], "is not in the archive's folder");
    const Bytes dotted = renamed("adam_int/../x/1");
    const ZipArchive inside = ZipArchive::parse(dotted.data(), dotted.size(), "t");
    EXPECT_NE(inside.find("adam_int/../x/1"), nullptr);
}

TEST(ZipArchive, RandomBytesAreRejected)
{
    std::mt19937 rng(1234);
    for (int round = 0; round < 50; ++round) {
        Bytes b(static_cast<size_t>(rng() % 5000));
        for (auto& x : b)
            x = static_cast<uint8_t>(rng());
        if (round % 2 && b.size() >= 4) {
            b[0] = 'P';
            b[1] = 'K';
            b[2] = 3;
            b[3] = 4;
        }
        SCOPED_TRACE(round);
        EXPECT_TRUE(parseError(b).has_value());
    }
}

} // namespace

namespace {

/// names of several lengths and sizes around the alignment, as a job's records of one archive are planned
struct PlannedRecord
{
    std::string name;
    std::string data;
};

std::vector<PlannedRecord> plannedRecords()
{
    std::vector<PlannedRecord> r;
    for (size_t k = 0; k < 12; ++k) {
        std::string data(k * 37 + (k % 3 == 0 ? 64 : 1), static_cast<char>('a' + k));
        r.push_back({"archive/" + std::string(k * 5 + 1, 'n') + std::to_string(k), std::move(data)});
    }
    return r;
}

WriteOptions noSync()
{
    WriteOptions o;
    o.fsync = false;
    return o;
}

std::string fileBytes(const std::string& path)
{
    auto f = MappedFile::open(path);
    return std::string(reinterpret_cast<const char*>(f->all()), f->size());
}

} // namespace

TEST(ZipWriter, RecordSpanSaysWhereEachRecordEnds)
{
    const std::string dir = ::testing::TempDir() + "zipwriter-span-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    OutputFile out(dir + "/a.zip", noSync());
    ZipWriter zip(out, 64, 0);
    uint64_t at = 0;
    for (const auto& r : plannedRecords()) {
        zip.addRecord(r.name, r.data.data(), r.data.size());
        at += ZipWriter::recordSpan(r.name, at, r.data.size());
        EXPECT_EQ(out.position(), at) << r.name;
    }
    // past 4 GiB (a sparse file): the data descriptor grows to 64-bit sizes, and the span says so
    const uint64_t far = (uint64_t(5) << 30) + 3;
    out.seek(far);
    zip.addRecord("archive/far", "xyz", 3);
    EXPECT_EQ(out.position(), far + ZipWriter::recordSpan("archive/far", far, 3));
    EXPECT_EQ(ZipWriter::recordSpan("archive/far", far, 3), ZipWriter::recordSpan("archive/far", 3, 3) + 8);
    std::filesystem::remove_all(dir);
}

TEST(ZipWriter, RecordsWrittenByTwoWritersAtPlannedOffsetsMakeTheOneWritersArchive)
{
    const std::string dir = ::testing::TempDir() + "zipwriter-two-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const auto records = plannedRecords();
    const WriteOptions options = noSync();
    {
        OutputFile out(dir + "/one.zip", options);
        ZipWriter zip(out, 64, 0);
        for (const auto& r : records)
            zip.addRecord(r.name, r.data.data(), r.data.size());
        zip.finish();
        out.commit();
    }
    // the odd records by a second writer on the first one's temporary, each at its planned offset
    std::vector<uint64_t> offsets {0};
    for (size_t i = 0; i < records.size(); ++i)
        offsets.push_back(offsets[i] + ZipWriter::recordSpan(records[i].name, offsets[i], records[i].data.size()));
    OutputFile first(dir + "/two.zip", options);
    {
        OutputFile second(dir + "/two.zip", first.tempPath(), options);
        ZipWriter theirs(second, 64, 0);
        for (size_t i = 1; i < records.size(); i += 2) {
            second.seek(offsets[i]);
            theirs.addRecord(records[i].name, records[i].data.data(), records[i].data.size());
        }
        second.commit(); // synced; the first writer renames
        ZipWriter mine(first, 64, 0);
        for (size_t i = 0; i < records.size(); i += 2) {
            first.seek(offsets[i]);
            mine.addRecord(records[i].name, records[i].data.data(), records[i].data.size());
        }
        mine.addWrittenRecords(theirs.records());
        first.seek(offsets.back());
        mine.finish();
    }
    EXPECT_TRUE(std::filesystem::exists(first.tempPath())); // the joined writer leaves it to its maker
    first.commit();
    EXPECT_EQ(fileBytes(dir + "/two.zip"), fileBytes(dir + "/one.zip"));
    std::filesystem::remove_all(dir);
}

// ---- archives zipped again with deflate (tests/data/deflated: adam_int.pt repacked by Python's zipfile) ----------

namespace {

/// TMPDIR pointed at a fresh folder for the test's life (the inflated copies go there)
struct ScopedTmpDir
{
    std::string dir;
    std::string saved;
    bool had = false;
    explicit ScopedTmpDir(const std::string& name)
        : dir((std::filesystem::temp_directory_path() / name).string())
    {
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
        if (const char* t = std::getenv("TMPDIR")) {
            had = true;
            saved = t;
        }
        ::setenv("TMPDIR", dir.c_str(), 1);
    }
    ~ScopedTmpDir()
    {
        if (had)
            ::setenv("TMPDIR", saved.c_str(), 1);
        else
            ::unsetenv("TMPDIR");
        std::filesystem::remove_all(dir);
    }
    bool empty() const { return std::filesystem::is_empty(dir); }
};

void writeBytes(const std::string& path, const Bytes& b)
{
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

} // namespace

TEST(ZipInflate, OnlyArchivesWithCompressedRecordsAreInflated)
{
    for (const char* name : {"deflated/adam_int.pt", "deflated/adam_int_mixed.pt"}) {
        const Bytes b = readFixture(name);
        EXPECT_TRUE(zipHasCompressedRecords(b.data(), b.size())) << name;
    }
    for (const char* name : {"adam_int.pt", "fsdp2_r2/__0_0.distcp", "fsdp2_r2/.metadata"}) {
        const Bytes b = readFixture(name);
        EXPECT_FALSE(zipHasCompressedRecords(b.data(), b.size())) << name;
        const auto file = MappedFile::open(kData + "/" + name);
        EXPECT_EQ(inflatedIfCompressed(file).get(), file.get()) << name; // the file itself, not a copy
    }
}

TEST(ZipInflate, CopyHoldsTheRecordsTorchSaveWrote)
{
    const ScopedTmpDir tmp("optscope-test-inflate");
    const Bytes stored = readFixture("adam_int.pt");
    const ZipArchive original = ZipArchive::parse(stored.data(), stored.size(), "adam_int.pt");
    for (const char* name : {"deflated/adam_int.pt", "deflated/adam_int_mixed.pt"}) {
        SCOPED_TRACE(name);
        const auto file = openByteSource(kData + "/" + name);
        EXPECT_EQ(file->path(), kData + "/" + name); // errors and change checks name the file, not the copy
        EXPECT_NE(file->readAs().find("inflated"), std::string::npos);
        EXPECT_GE(file->fd(), 0); // gather copies records from it in the kernel
        EXPECT_NO_THROW(file->checkUnchanged());
        const ZipArchive copy = ZipArchive::parse(file->all(), file->size(), name);
        ASSERT_EQ(copy.entries().size(), original.entries().size());
        for (size_t i = 0; i < copy.entries().size(); ++i) {
            const ZipEntry& a = original.entries()[i];
            const ZipEntry& b = copy.entries()[i];
            EXPECT_EQ(a.name, b.name);
            EXPECT_EQ(a.crc32, b.crc32);
            EXPECT_EQ(b.dataOffset % 64, 0u) << b.name; // aligned as torch.save aligns
            EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(stored.data() + a.dataOffset), a.size),
                std::string_view(reinterpret_cast<const char*>(file->all() + b.dataOffset), b.size))
                << b.name;
        }
        EXPECT_TRUE(tmp.empty()); // unlinked at once: nothing stays in TMPDIR
    }
}

TEST(ZipInflate, DamagedRecordIsRefusedNamingTheFile)
{
    const ScopedTmpDir tmp("optscope-test-inflate-damaged");
    const Bytes orig = readFixture("deflated/adam_int.pt");
    const ZipArchive z = ZipArchive::parse(orig.data(), orig.size(), "x", {}, true);
    const ZipEntry* pkl = z.findRecord("data.pkl");
    ASSERT_NE(pkl, nullptr);
    ASSERT_EQ(pkl->method, 8);
    const std::string path = tmp.dir + "/../optscope-test-damaged.pt";
    // a byte of the deflate stream changed (it inflates to other bytes or not at all), and the central directory's
    // CRC-32 of the record changed (the bytes inflate well, but are not what was zipped)
    const uint64_t crcAt = [&] {
        const std::string name(pkl->name);
        for (uint64_t p = orig.size() - 22; p-- > 0;)
            if (rd32(orig, p) == 0x02014b50u && p + 46 + name.size() <= orig.size()
                && std::equal(name.begin(), name.end(), orig.begin() + long(p) + 46))
                return p + 16;
        return uint64_t(0);
    }();
    ASSERT_NE(crcAt, 0u);
    for (uint64_t at : {pkl->dataOffset + pkl->storedSize / 2, crcAt}) {
        SCOPED_TRACE(at);
        Bytes b = orig;
        b[at] ^= 0x5a;
        writeBytes(path, b);
        try {
            (void)openByteSource(path);
            ADD_FAILURE() << "a damaged deflated record was read";
        } catch (const Error& e) {
            EXPECT_EQ(e.file(), path);
            EXPECT_EQ(e.kind(), ErrorKind::Format);
            EXPECT_NE(std::string(e.what()).find("data.pkl"), std::string::npos) << e.what();
        }
        EXPECT_TRUE(tmp.empty()); // the partial copy is removed
    }
    std::filesystem::remove(path);
}

TEST(ZipInflate, UnusableTemporaryFolderIsSaid)
{
    const ScopedTmpDir tmp("optscope-test-inflate-tmp");
    ::setenv("TMPDIR", (tmp.dir + "/not-there").c_str(), 1);
    try {
        (void)openByteSource(kData + "/deflated/adam_int.pt");
        ADD_FAILURE() << "read without a temporary folder";
    } catch (const Error& e) {
        EXPECT_EQ(e.file(), kData + "/deflated/adam_int.pt");
        EXPECT_NE(std::string(e.what()).find("TMPDIR"), std::string::npos) << e.what();
    }
}
