// SPDX-License-Identifier: GPL-3.0-or-later
// A corrupt-input matrix made from the real fixtures (tests/data) through the public entry points: openCheckpoint
// and inspectCheckpoint with hashing, and the CLI's exit codes. Damaged copies are written to a temporary folder.
//
// The contract: never a crash, a hang or an exception that is not an optscope::Error. openCheckpoint either throws
// an Error whose message names the path, or returns; inspectCheckpoint then throws an Error or returns a report.
// Where the data is definitely damaged (truncated files, missing or cut .distcp files, shortened records, offsets
// and lengths past the end), the damage must be reported: an Error, or a report with ok == false.
#include "optscope/analysis/gather.h"
#include "optscope/analysis/inspect_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/format_registry.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/zip_archive.h"
#include "optscope/model/finding.h"
#include "optscope/pickle/pickle_machine.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

const std::string kData = OPTSCOPE_TEST_DATA;

using Bytes = std::vector<uint8_t>;

Bytes readBytes(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void writeBytes(const fs::path& p, const Bytes& b)
{
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    ASSERT_TRUE(out.good()) << "cannot write " << p;
}

void writeText(const fs::path& p, const std::string& s)
{
    writeBytes(p, Bytes(s.begin(), s.end()));
}

/// A fresh folder under the system temp dir, removed with everything in it at the end of the test.
class TempDir
{
public:
    TempDir()
    {
        static int counter = 0;
        std::random_device rd;
        m_path = fs::temp_directory_path()
            / ("optscope-corrupt-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-"
                + std::to_string(rd() % 1000000));
        fs::create_directories(m_path);
    }
    ~TempDir()
    {
        std::error_code ec;
        fs::remove_all(m_path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const fs::path& path() const { return m_path; }
    fs::path operator/(const std::string& name) const { return m_path / name; }

    /// a copy of a fixture folder (a DCP checkpoint) inside this folder, named @p as (default: as the fixture)
    fs::path copyFixtureDir(const std::string& name, const std::string& as = {}) const
    {
        const fs::path dst = m_path / (as.empty() ? name : as);
        fs::copy(kData + "/" + name, dst, fs::copy_options::recursive);
        return dst;
    }

private:
    fs::path m_path;
};

enum class Damage {
    Maybe, ///< the change may leave a readable checkpoint (a flipped tensor byte): only the contract is checked
    Definite, ///< the data is damaged: an Error or a report with ok == false
};

struct Outcome
{
    bool opened = false;
    bool inspected = false;
    bool ok = false;
    std::string error; ///< what() of the Error thrown, if any
};

/// the process's peak resident memory so far
long peakMemoryKiB()
{
    struct rusage usage
    { };
    ::getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss; // KiB on Linux
}

/// Opens and inspects (with hashes) @p path, checking the contract; @p what describes the case for failures.
Outcome checkContract(const std::string& path, Damage damage, const std::string& what)
{
    SCOPED_TRACE(what);
    Outcome o;
    const auto start = std::chrono::steady_clock::now();
    const long peakBefore = peakMemoryKiB();
    CheckpointPtr cp;
    try {
        cp = openCheckpoint(path);
        o.opened = true;
    } catch (const Error& e) {
        o.error = e.what();
        EXPECT_NE(o.error.find(path), std::string::npos) << "the error does not name " << path << ": " << e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "openCheckpoint threw a non-optscope exception: " << e.what();
    } catch (...) {
        ADD_FAILURE() << "openCheckpoint threw something that is not a std::exception";
    }
    if (cp) {
        try {
            InspectOptions options;
            options.hash = true;
            const InspectReport report = inspectCheckpoint(*cp, options);
            o.inspected = true;
            o.ok = report.ok;
            // the report must be printable as the CLI prints it
            EXPECT_FALSE(report.json.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).empty());
            // hashing turns any exception into an entry error; ones that are not optscope::Error are core bugs
            for (const auto& e : report.json["entries"]) {
                if (e.contains("error")) {
                    const std::string msg = e["error"].get<std::string>();
                    EXPECT_EQ(msg.rfind("cannot hash:", 0), std::string::npos) << "non-optscope exception: " << msg;
                }
            }
        } catch (const Error& e) {
            o.error = e.what();
        } catch (const std::exception& e) {
            ADD_FAILURE() << "inspectCheckpoint threw a non-optscope exception: " << e.what();
        } catch (...) {
            ADD_FAILURE() << "inspectCheckpoint threw something that is not a std::exception";
        }
    }
    if (damage == Damage::Definite) {
        EXPECT_TRUE(!o.opened || !o.inspected || !o.ok) << "damaged input was read as a good checkpoint";
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 30.0) << "reading took " << seconds << " s (a hang?)";
    // the inputs are a few hundred KiB: nothing may allocate (and touch) gigabytes because a field says so
    EXPECT_LT(peakMemoryKiB() - peakBefore, 1L << 20) << "peak memory grew by more than 1 GiB";
    return o;
}

/// Cut points: every 1/37 of the file, and the last 1..64 bytes cut off.
std::set<uint64_t> cutPoints(uint64_t size)
{
    std::set<uint64_t> cuts;
    for (uint64_t k = 0; k < 37; ++k)
        cuts.insert(size * k / 37);
    for (uint64_t n = 1; n <= 64 && n <= size; ++n)
        cuts.insert(size - n);
    return cuts;
}

Bytes truncated(const Bytes& b, uint64_t size)
{
    return Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(size));
}

uint16_t rd16(const Bytes& b, uint64_t p)
{
    return static_cast<uint16_t>(b.at(p) | (b.at(p + 1) << 8));
}
uint32_t rd32(const Bytes& b, uint64_t p)
{
    return static_cast<uint32_t>(rd16(b, p)) | (static_cast<uint32_t>(rd16(b, p + 2)) << 16);
}
void wr32(Bytes& b, uint64_t p, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        b.at(p + static_cast<uint64_t>(i)) = static_cast<uint8_t>(v >> (8 * i));
}
void wr64(Bytes& b, uint64_t p, uint64_t v)
{
    for (int i = 0; i < 8; ++i)
        b.at(p + static_cast<uint64_t>(i)) = static_cast<uint8_t>(v >> (8 * i));
}

/// offset of the central directory record of each entry of a torch.save zip, by full name
std::vector<std::pair<std::string, uint64_t>> centralRecords(const Bytes& b)
{
    // ZIP64 locator (20 bytes before the 22-byte EOCD) -> ZIP64 EOCD -> central directory offset and count
    const uint64_t locator = b.size() - 22 - 20;
    EXPECT_EQ(rd32(b, locator), 0x07064b50u);
    uint64_t eocd64 = 0;
    for (int i = 7; i >= 0; --i)
        eocd64 = (eocd64 << 8) | b.at(locator + 8 + static_cast<uint64_t>(i));
    uint64_t count = 0, pos = 0;
    for (int i = 7; i >= 0; --i) {
        count = (count << 8) | b.at(eocd64 + 32 + static_cast<uint64_t>(i));
        pos = (pos << 8) | b.at(eocd64 + 48 + static_cast<uint64_t>(i));
    }
    std::vector<std::pair<std::string, uint64_t>> out;
    for (uint64_t i = 0; i < count; ++i) {
        EXPECT_EQ(rd32(b, pos), 0x02014b50u);
        const uint16_t n = rd16(b, pos + 28);
        out.emplace_back(std::string(reinterpret_cast<const char*>(b.data() + pos + 46), n), pos);
        pos += 46 + n + rd16(b, pos + 30) + rd16(b, pos + 32);
    }
    return out;
}

/// position of the first occurrence of @p needle in @p b
uint64_t find(const Bytes& b, const std::string& needle)
{
    const Bytes n(needle.begin(), needle.end());
    const auto it = std::search(b.begin(), b.end(), n.begin(), n.end());
    EXPECT_NE(it, b.end()) << "pattern not found";
    return static_cast<uint64_t>(it - b.begin());
}

Bytes replaced(const Bytes& b, uint64_t pos, size_t length, const std::string& with)
{
    Bytes out(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(pos));
    out.insert(out.end(), with.begin(), with.end());
    out.insert(out.end(), b.begin() + static_cast<std::ptrdiff_t>(pos + length), b.end());
    return out;
}

// --- truncation -----------------------------------------------------------------------------------------------

TEST(CorruptInputs, TorchSaveTruncated)
{
    TempDir tmp;
    for (const std::string name : {"adam_int.pt", "adam_int_legacy.pt", "dtypes.pt"}) {
        const Bytes orig = readBytes(kData + "/" + name);
        for (uint64_t cut : cutPoints(orig.size())) {
            const fs::path p = tmp / ("cut-" + std::to_string(cut) + "-" + name);
            writeBytes(p, truncated(orig, cut));
            checkContract(p.string(), Damage::Definite,
                name + " cut to " + std::to_string(cut) + " of " + std::to_string(orig.size()) + " bytes");
            fs::remove(p);
        }
    }
}

TEST(CorruptInputs, TorchSaveDataRecordsShortened)
{
    // a storage record shorter than the pickle says (central directory sizes reduced): never read past it
    TempDir tmp;
    const Bytes orig = readBytes(kData + "/adam_int.pt");
    const fs::path p = tmp / "short.pt";
    size_t records = 0;
    for (const auto& [name, central] : centralRecords(orig)) {
        if (name.rfind("adam_int/data/", 0) != 0) continue;
        ++records;
        const uint32_t size = rd32(orig, central + 24);
        for (uint32_t newSize : {size - 1, size / 2, 0u}) {
            Bytes b = orig;
            wr32(b, central + 20, newSize);
            wr32(b, central + 24, newSize);
            writeBytes(p, b);
            const Outcome o = checkContract(p.string(), Damage::Definite,
                name + " shortened from " + std::to_string(size) + " to " + std::to_string(newSize) + " bytes");
            EXPECT_NE(o.error.find("holds " + std::to_string(newSize) + " bytes"), std::string::npos) << o.error;
        }
    }
    EXPECT_EQ(records, 12u);
}

TEST(CorruptInputs, DcpMetadataTruncated)
{
    TempDir tmp;
    const fs::path dir = tmp.copyFixtureDir("fsdp2_r3");
    const Bytes orig = readBytes(dir / ".metadata");
    for (uint64_t cut : cutPoints(orig.size())) {
        writeBytes(dir / ".metadata", truncated(orig, cut));
        const Outcome o = checkContract(dir.string(), Damage::Definite,
            ".metadata cut to " + std::to_string(cut) + " of " + std::to_string(orig.size()) + " bytes");
        EXPECT_FALSE(o.opened); // without a complete .metadata there is no checkpoint
    }
}

// a data file of a DCP save whose .metadata is not there yet (DCP writes it last): said so, not the zip error of its
// first item ("ZIP64 end-of-central-directory record missing")
TEST(CorruptInputs, DistcpWithoutItsMetadataSaysSo)
{
    TempDir tmp;
    const fs::path dir = tmp.copyFixtureDir("fsdp2_r3");
    fs::remove(dir / ".metadata");
    try {
        openCheckpoint((dir / "__1_0.distcp").string());
        ADD_FAILURE() << "a .distcp without .metadata opened";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Format);
        EXPECT_NE(std::string(e.what()).find("is a torch.distributed.checkpoint data file with no .metadata beside it"),
            std::string::npos)
            << e.what();
    }
}

TEST(CorruptInputs, DistcpTruncated)
{
    TempDir tmp;
    const fs::path dir = tmp.copyFixtureDir("fsdp2_r3");
    const Bytes orig = readBytes(dir / "__1_0.distcp");
    for (uint64_t cut : cutPoints(orig.size())) {
        writeBytes(dir / "__1_0.distcp", truncated(orig, cut));
        checkContract(dir.string(), Damage::Definite,
            "__1_0.distcp cut to " + std::to_string(cut) + " of " + std::to_string(orig.size()) + " bytes");
    }
}

// --- missing and wrong files ----------------------------------------------------------------------------------

TEST(CorruptInputs, MissingDistcpFile)
{
    TempDir tmp;
    const fs::path dir = tmp.copyFixtureDir("fsdp2_r3");
    ASSERT_TRUE(fs::remove(dir / "__1_0.distcp"));
    const Outcome o = checkContract(dir.string(), Damage::Definite, "__1_0.distcp deleted");
    // the rest stays browsable: the checkpoint opens, and the missing file is an error-severity warning
    ASSERT_TRUE(o.opened) << o.error;
    CheckpointPtr cp = openCheckpoint(dir.string());
    bool missing = false;
    for (const auto& w : cp->warnings)
        if (w.code == ReaderCode::MissingFile && w.isError && w.message.find("__1_0.distcp") != std::string::npos)
            missing = true;
    EXPECT_TRUE(missing);
    EXPECT_TRUE(cp->hasErrors());
    InspectOptions options;
    options.hash = true;
    EXPECT_FALSE(inspectCheckpoint(*cp, options).ok);
    // gather names the file, as check does (it used to say "the value's bytes are not available"), before it writes
    try {
        gatherCheckpoint(*cp, (tmp.path() / "out.pt").string(), {});
        ADD_FAILURE() << "gather of a checkpoint with a missing file succeeded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'__1_0.distcp'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("is missing"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(tmp.path() / "out.pt"));
}

TEST(CorruptInputs, DirectoryWithoutMetadata)
{
    TempDir tmp;
    const fs::path dir = tmp.copyFixtureDir("fsdp2_r3");
    ASSERT_TRUE(fs::remove(dir / ".metadata"));
    Outcome o = checkContract(dir.string(), Damage::Definite, "folder without .metadata");
    EXPECT_FALSE(o.opened);
    EXPECT_NE(o.error.find(".metadata"), std::string::npos) << o.error;

    fs::create_directories(tmp / "empty");
    o = checkContract((tmp / "empty").string(), Damage::Definite, "empty folder");
    EXPECT_FALSE(o.opened);

    o = checkContract((tmp / "does-not-exist").string(), Damage::Definite, "missing path");
    EXPECT_FALSE(o.opened);
}

TEST(CorruptInputs, NotCheckpoints)
{
    TempDir tmp;
    struct Case
    {
        std::string name;
        Bytes bytes;
    };
    std::vector<Case> cases;
    cases.push_back({"empty.pt", {}});
    const std::string text = "this is a text file, not a checkpoint\n";
    cases.push_back({"text.pt", Bytes(text.begin(), text.end())});
    cases.push_back({"one-byte.pt", Bytes {0x80}});
    cases.push_back({"zip-header-only.pt", Bytes {'P', 'K', 3, 4}});
    std::mt19937 rng(42);
    Bytes noise(5000);
    for (auto& x : noise)
        x = static_cast<uint8_t>(rng());
    cases.push_back({"noise.pt", noise});
    noise[0] = 'P', noise[1] = 'K', noise[2] = 3, noise[3] = 4;
    cases.push_back({"zip-noise.pt", noise});
    // the legacy magic header followed by noise
    const Bytes legacy = readBytes(kData + "/adam_int_legacy.pt");
    Bytes legacyNoise(legacy.begin(), legacy.begin() + 16);
    legacyNoise.insert(legacyNoise.end(), noise.begin(), noise.end());
    cases.push_back({"legacy-noise.pt", legacyNoise});
    for (const auto& c : cases) {
        const fs::path p = tmp / c.name;
        writeBytes(p, c.bytes);
        const Outcome o = checkContract(p.string(), Damage::Definite, c.name);
        EXPECT_FALSE(o.opened);
    }

    // a DCP folder whose .metadata is text, or a valid pickle of something else
    const fs::path dir = tmp.copyFixtureDir("fsdp2_r3");
    writeText(dir / ".metadata", text);
    EXPECT_FALSE(checkContract(dir.string(), Damage::Definite, ".metadata is text").opened);
    writeBytes(dir / ".metadata", Bytes {0x80, 0x04, 'N', '.'});
    const Outcome none = checkContract(dir.string(), Damage::Definite, ".metadata is a pickle of None");
    EXPECT_FALSE(none.opened);
    EXPECT_NE(none.error.find("Metadata"), std::string::npos) << none.error;
    writeBytes(dir / ".metadata", {});
    EXPECT_FALSE(checkContract(dir.string(), Damage::Definite, ".metadata is empty").opened);
    // the .metadata file itself given as the path
    writeText(dir / ".metadata", text);
    EXPECT_FALSE(checkContract((dir / ".metadata").string(), Damage::Definite, ".metadata path, text").opened);
}

// --- offsets and lengths past the end -------------------------------------------------------------------------

TEST(CorruptInputs, ZipOffsetsAndLengthsPastTheEnd)
{
    TempDir tmp;
    const Bytes orig = readBytes(kData + "/adam_int.pt");
    const fs::path p = tmp / "patched.pt";
    const auto records = centralRecords(orig);
    for (const auto& [name, central] : records) {
        for (int variant = 0; variant < 3; ++variant) {
            Bytes b = orig;
            std::string what;
            if (variant == 0) {
                wr32(b, central + 42, static_cast<uint32_t>(orig.size() + 64)); // local header past the end
                what = "local header offset past the end";
            } else if (variant == 1) {
                wr32(b, central + 20, 0x7fffffff); // sizes past the end
                wr32(b, central + 24, 0x7fffffff);
                what = "record size 2^31-1";
            } else {
                wr32(b, central + 42, 0xfffffff0);
                what = "local header offset 2^32-16";
            }
            writeBytes(p, b);
            const Outcome o = checkContract(p.string(), Damage::Definite, name + ": " + what);
            EXPECT_FALSE(o.opened);
        }
    }
    // the central directory offset (ZIP64 end record) past the end
    const uint64_t locator = orig.size() - 42;
    uint64_t eocd64 = 0;
    for (int i = 7; i >= 0; --i)
        eocd64 = (eocd64 << 8) | orig[locator + 8 + static_cast<uint64_t>(i)];
    Bytes b = orig;
    wr64(b, eocd64 + 48, orig.size() * 4);
    writeBytes(p, b);
    EXPECT_FALSE(checkContract(p.string(), Damage::Definite, "central directory past the end").opened);
    b = orig;
    wr64(b, locator + 8, ~uint64_t(0) - 100);
    writeBytes(p, b);
    EXPECT_FALSE(checkContract(p.string(), Damage::Definite, "ZIP64 record offset 2^64-101").opened);
}

TEST(CorruptInputs, PickleLengthFieldsPastTheEnd)
{
    // data.pkl of adam_int.pt starts PROTO 2, EMPTY_DICT, BINPUT 0, MARK, BINUNICODE 'state' (length at +7)
    TempDir tmp;
    const Bytes orig = readBytes(kData + "/adam_int.pt");
    const ZipArchive zip = ZipArchive::parse(orig.data(), orig.size(), "adam_int.pt");
    const uint64_t pkl = zip.findRecord("data.pkl")->dataOffset;
    ASSERT_EQ(orig[pkl + 6], 'X');
    ASSERT_EQ(rd32(orig, pkl + 7), 5u);
    const fs::path p = tmp / "patched.pt";
    for (uint32_t length : {0xfffffff0u, 0x7fffffffu, 1030u, 1024u}) {
        Bytes b = orig;
        wr32(b, pkl + 7, length);
        writeBytes(p, b);
        const Outcome o = checkContract(p.string(), Damage::Definite, "BINUNICODE length " + std::to_string(length));
        EXPECT_FALSE(o.opened);
        EXPECT_NE(o.error.find("data.pkl"), std::string::npos) << o.error;
    }
}

TEST(CorruptInputs, DcpStorageOffsetsAndLengthsPastTheEnd)
{
    // the first _StorageInfo in fsdp2_r3/.metadata: {'relative_path': '__0_0.distcp', 'offset': K 0,
    // 'length': M 1244}. .metadata is a plain pickle, so values can be re-encoded with other lengths.
    TempDir tmp;
    const fs::path dir = tmp.copyFixtureDir("fsdp2_r3");
    const Bytes orig = readBytes(dir / ".metadata");
    const uint64_t len = find(orig, "\x8c\x06length\x94") + 9;
    ASSERT_EQ(orig.at(len), 'M');
    ASSERT_EQ(orig.at(len - 11), 'K'); // offset 0
    ASSERT_EQ(orig.at(len - 10), 0);
    const std::string int64Max("\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f", 10);
    const std::string pow62("\x8a\x08\0\0\0\0\0\0\0\x40", 10);
    const std::string minus1("\x8a\x01\xff", 3);
    struct Case
    {
        std::string what;
        Bytes bytes;
    };
    const std::vector<Case> cases = {
        {"offset 2^31-1", replaced(orig, len - 11, 2, std::string("J\xff\xff\xff\x7f", 5))},
        {"offset 2^63-1", replaced(orig, len - 11, 2, int64Max)},
        {"length 65535", replaced(orig, len, 3, "M\xff\xff")},
        {"length 2^62", replaced(orig, len, 3, pow62)},
        {"length 2^63-1", replaced(orig, len, 3, int64Max)},
        {"offset 2^63-1 and length 2^63-1", replaced(replaced(orig, len, 3, int64Max), len - 11, 2, int64Max)},
        {"length -1", replaced(orig, len, 3, minus1)},
        {"offset -1", replaced(orig, len - 11, 2, minus1)},
    };
    for (const auto& c : cases) {
        writeBytes(dir / ".metadata", c.bytes);
        checkContract(dir.string(), Damage::Definite, c.what);
    }
}

TEST(CorruptInputs, DcpHugeTensorShapes)
{
    // the first TensorStorageMetadata in fsdp2_r3/.metadata: size torch.Size((7, 6)) as K 7, K 6, TUPLE2, and its
    // first chunk's offsets (0, 0) as K 0, K 0, TUPLE2. Huge values must neither overflow size arithmetic nor
    // become huge allocations while hashing.
    TempDir tmp;
    const fs::path dir = tmp.copyFixtureDir("fsdp2_r3");
    const Bytes orig = readBytes(dir / ".metadata");
    const uint64_t size = find(orig, "\x8c\x04Size\x94\x93\x94") + 9;
    ASSERT_EQ(std::string(orig.begin() + static_cast<std::ptrdiff_t>(size),
                  orig.begin() + static_cast<std::ptrdiff_t>(size + 5)),
        "K\x07K\x06\x86");
    const uint64_t offsets = find(orig, "\x8c\x07offsets\x94") + 10;
    ASSERT_EQ(orig.at(offsets), 'h'); // BINGET torch.Size
    ASSERT_EQ(std::string(orig.begin() + static_cast<std::ptrdiff_t>(offsets + 2),
                  orig.begin() + static_cast<std::ptrdiff_t>(offsets + 7)),
        std::string("K\0K\0\x86", 5));
    const std::string int31("J\xff\xff\xff\x7f", 5);
    const std::string int63("\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f", 10);
    struct Case
    {
        std::string what;
        Bytes bytes;
    };
    const std::vector<Case> cases = {
        {"size (7, 2^31-1)", replaced(orig, size, 5, "K\x07" + int31 + "\x86")},
        {"size (2^31-1, 6)", replaced(orig, size, 5, int31 + "K\x06\x86")},
        {"size (2^31-1, 2^31-1, 2^31-1)", replaced(orig, size, 5, int31 + int31 + int31 + "\x87")},
        {"size (2^63-1, 2^63-1)", replaced(orig, size, 5, int63 + int63 + "\x86")},
        {"size (7, -1)", replaced(orig, size, 5, std::string("K\x07\x8a\x01\xff\x86", 6))},
        {"chunk offsets (2^63-1, 0)", replaced(orig, offsets + 2, 5, int63 + std::string("K\0\x86", 3))},
        {"chunk offsets (0, 2^63-1)", replaced(orig, offsets + 2, 5, std::string("K\0", 2) + int63 + "\x86")},
    };
    for (const auto& c : cases) {
        writeBytes(dir / ".metadata", c.bytes);
        const Outcome o = checkContract(dir.string(), Damage::Definite, c.what);
        EXPECT_TRUE(o.opened) << c.what << ": " << o.error; // the rest of the checkpoint stays browsable
        if (!o.opened) continue;
        // whatever the shape, the sizes reported are not the result of an overflow
        CheckpointPtr cp = openCheckpoint(dir.string());
        for (const auto& e : cp->entries) {
            if (!e.isTensor()) continue;
            EXPECT_GE(e.tensor->numel(), 0) << c.what << ": " << e.key;
            for (auto s : e.tensor->shape)
                EXPECT_GE(s, 0) << c.what << ": " << e.key;
        }
    }
}

TEST(CorruptInputs, LegacyStorageLengthsPastTheEnd)
{
    // legacy format: five pickles, then per storage an int64 element count and the bytes
    TempDir tmp;
    const Bytes orig = readBytes(kData + "/adam_int_legacy.pt");
    uint64_t pos = 0;
    for (int i = 0; i < 5; ++i) {
        PyArena arena;
        PickleOptions opt;
        opt.persistentLoad = [](PyArena& a, PyValue*, uint64_t) { return a.makeNone(); };
        pos += unpickle(orig.data() + pos, orig.size() - pos, arena, opt).bytesConsumed;
    }
    ASSERT_LT(pos + 8, orig.size());
    const fs::path p = tmp / "legacy.pt";
    for (uint64_t numel : {uint64_t(1) << 62, ~uint64_t(0), uint64_t(1) << 40, uint64_t(orig.size())}) {
        Bytes b = orig;
        wr64(b, pos, numel);
        writeBytes(p, b);
        const Outcome o = checkContract(p.string(), Damage::Definite, "legacy storage numel " + std::to_string(numel));
        EXPECT_FALSE(o.opened);
    }
}

TEST(CorruptInputs, TensorViewExtentOverflowIsRejected)
{
    // a view whose extent wraps around 2^64 must not pass as lying inside a 4-byte storage
    PyTensorInfo t;
    t.dtype = DType::Float32;
    t.sizes = {3, 3};
    t.strides = {int64_t(1) << 62, int64_t(1) << 62}; // 2 * 2^62 + 2 * 2^62 = 2^64 == 0 (mod 2^64)
    EXPECT_THROW(checkTorchSaveTensorExtent(t, 4, "t"), Error);
    t.sizes = {5};
    t.strides = {INT64_MAX / 2};
    EXPECT_THROW(checkTorchSaveTensorExtent(t, 4, "t"), Error);
    t.sizes = {2, 2};
    t.strides = {INT64_MAX, INT64_MAX};
    EXPECT_THROW(checkTorchSaveTensorExtent(t, 1u << 20, "t"), Error);
    t.storageOffset = INT64_MAX;
    t.sizes = {1};
    t.strides = {1};
    EXPECT_THROW(checkTorchSaveTensorExtent(t, 1u << 20, "t"), Error);
    // views that fit are accepted, including empty ones and broadcast (stride 0) dims
    t.storageOffset = 1;
    t.sizes = {2, 3};
    t.strides = {3, 1};
    EXPECT_NO_THROW(checkTorchSaveTensorExtent(t, 7 * 4, "t"));
    EXPECT_THROW(checkTorchSaveTensorExtent(t, 7 * 4 - 1, "t"), Error);
    t.sizes = {0, 3};
    t.strides = {INT64_MAX, INT64_MAX};
    EXPECT_NO_THROW(checkTorchSaveTensorExtent(t, 0, "t"));
    t.storageOffset = 0;
    t.sizes = {1000, 4};
    t.strides = {0, 1};
    EXPECT_NO_THROW(checkTorchSaveTensorExtent(t, 16, "t"));
}

// --- random damage --------------------------------------------------------------------------------------------

struct Target
{
    std::string fixture; ///< a file, or a folder for DCP
    std::string file; ///< the file damaged inside the folder; empty for a plain file
    int flips;
};

const std::vector<Target>& randomTargets()
{
    static const std::vector<Target> targets = {
        {"adam_int.pt", "", 300},
        {"adam_int_proto4.pt", "", 150},
        {"adam_int_legacy.pt", "", 150},
        {"dtypes.pt", "", 100},
        {"fsdp2_r3", ".metadata", 150},
        {"fsdp2_r3", "__1_0.distcp", 150},
        {"fsdp1_r2", "__0_0.distcp", 60},
    };
    return targets;
}

constexpr uint32_t kSeed = 20240611;

TEST(CorruptInputs, SeededBitFlips)
{
    std::mt19937 rng(kSeed);
    TempDir tmp;
    for (const auto& target : randomTargets()) {
        const bool dcp = !target.file.empty();
        const fs::path dir = dcp ? tmp.copyFixtureDir(target.fixture, target.fixture + "-" + target.file) : tmp.path();
        const fs::path file = dcp ? dir / target.file : tmp / target.fixture;
        const Bytes orig
            = readBytes(dcp ? kData + "/" + target.fixture + "/" + target.file : kData + "/" + target.fixture);
        for (int i = 0; i < target.flips; ++i) {
            const uint64_t offset = rng() % orig.size();
            const int bit = static_cast<int>(rng() % 8);
            Bytes b = orig;
            b[offset] ^= static_cast<uint8_t>(1u << bit);
            writeBytes(file, b);
            std::ostringstream what;
            what << "seed " << kSeed << ", " << target.fixture << (dcp ? "/" + target.file : "") << ": bit " << bit
                 << " of byte " << offset << " flipped (flip #" << i << ")";
            checkContract((dcp ? dir : file).string(), Damage::Maybe, what.str());
        }
        if (dcp) writeBytes(file, orig);
    }
}

TEST(CorruptInputs, SeededByteRuns)
{
    // runs of 1-16 random bytes overwritten: hits length fields and opcodes together
    std::mt19937 rng(kSeed + 1);
    TempDir tmp;
    for (const auto& target : randomTargets()) {
        const bool dcp = !target.file.empty();
        const fs::path dir = dcp ? tmp.copyFixtureDir(target.fixture, target.fixture + "-" + target.file) : tmp.path();
        const fs::path file = dcp ? dir / target.file : tmp / target.fixture;
        const Bytes orig
            = readBytes(dcp ? kData + "/" + target.fixture + "/" + target.file : kData + "/" + target.fixture);
        for (int i = 0; i < target.flips / 3; ++i) {
            const uint64_t offset = rng() % orig.size();
            const uint64_t length = 1 + rng() % 16;
            Bytes b = orig;
            for (uint64_t k = offset; k < offset + length && k < b.size(); ++k)
                b[k] = static_cast<uint8_t>(rng());
            writeBytes(file, b);
            std::ostringstream what;
            what << "seed " << kSeed + 1 << ", " << target.fixture << (dcp ? "/" + target.file : "") << ": " << length
                 << " random bytes at " << offset << " (run #" << i << ")";
            checkContract((dcp ? dir : file).string(), Damage::Maybe, what.str());
        }
    }
}

// --- the CLI --------------------------------------------------------------------------------------------------

struct CliResult
{
    int exitCode = -1;
    std::string out;
    std::string err;
};

CliResult runCli(const TempDir& tmp, const std::string& args)
{
    const fs::path out = tmp / "cli.out";
    const fs::path err = tmp / "cli.err";
    const std::string cmd = std::string("'") + OPTSCOPE_CLI + "' " + args + " > '" + out.string() + "' 2> '"
        + err.string() + "' < /dev/null";
    const int status = std::system(cmd.c_str());
    CliResult r;
    if (status != -1 && WIFEXITED(status)) r.exitCode = WEXITSTATUS(status);
    const Bytes o = readBytes(out), e = readBytes(err);
    r.out.assign(o.begin(), o.end());
    r.err.assign(e.begin(), e.end());
    return r;
}

TEST(CorruptInputs, CliExitCodes)
{
    TempDir tmp;
    const std::string good = kData + "/adam_int.pt";
    CliResult r = runCli(tmp, "inspect '" + good + "'");
    EXPECT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.out.find("state.0.exp_avg"), std::string::npos) << r.out;

    r = runCli(tmp, "inspect --json --hash '" + kData + "/fsdp2_r3'");
    EXPECT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.out.find("\"sha256\""), std::string::npos);

    // garbage: exit 2, and stderr names the file
    const fs::path garbage = tmp / "garbage.pt";
    writeText(garbage, "definitely not a checkpoint\n");
    r = runCli(tmp, "inspect '" + garbage.string() + "'");
    EXPECT_EQ(r.exitCode, 2);
    EXPECT_NE(r.err.find(garbage.string()), std::string::npos) << r.err;

    const fs::path cut = tmp / "cut.pt";
    const Bytes orig = readBytes(good);
    writeBytes(cut, truncated(orig, orig.size() / 2));
    r = runCli(tmp, "inspect --hash '" + cut.string() + "'");
    EXPECT_EQ(r.exitCode, 2);
    EXPECT_NE(r.err.find(cut.string()), std::string::npos) << r.err;

    // a DCP folder with a missing .distcp: opens, but --hash cannot read everything
    const fs::path dir = tmp.copyFixtureDir("fsdp2_r3");
    ASSERT_TRUE(fs::remove(dir / "__1_0.distcp"));
    r = runCli(tmp, "inspect --hash '" + dir.string() + "'");
    EXPECT_EQ(r.exitCode, 2);
    EXPECT_NE(r.err.find("__1_0.distcp"), std::string::npos) << r.err;

    // bad usage
    r = runCli(tmp, "inspect --no-such-option '" + good + "'");
    EXPECT_EQ(r.exitCode, 2);
    EXPECT_NE(r.err.find("--no-such-option"), std::string::npos) << r.err;
    r = runCli(tmp, "inspect");
    EXPECT_EQ(r.exitCode, 2);
    EXPECT_FALSE(r.err.empty());
    r = runCli(tmp, "inspect '" + good + "' '" + good + "'");
    EXPECT_EQ(r.exitCode, 2);
    r = runCli(tmp, "no-such-command");
    EXPECT_EQ(r.exitCode, 2);
    r = runCli(tmp, "");
    EXPECT_EQ(r.exitCode, 2);
}

} // namespace

TEST(CorruptInputs, CliCodesTableKeepsColumnsApart)
{
    // every code, then at least two spaces, then its severity: the longest code once ran into it
    TempDir tmp;
    const CliResult r = runCli(tmp, "codes");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    std::istringstream lines(r.out);
    std::string line;
    size_t n = 0;
    while (std::getline(lines, line)) {
        const FindingInfo& f = findingRegistry()[n++];
        ASSERT_EQ(line.compare(0, std::strlen(f.name), f.name), 0) << line;
        const std::string rest = line.substr(std::strlen(f.name));
        EXPECT_EQ(rest.compare(0, 2, "  "), 0) << line;
        EXPECT_EQ(rest.find_first_not_of(' '), rest.find(severityName(f.severity))) << line;
    }
    EXPECT_EQ(n, findingRegistry().size());
}

TEST(FormatRegistry, ProbesPickTheFormatThatContainsAnother)
{
    // a Megatron torch_dist folder is also a DCP folder, a Trainer folder also holds safetensors: the probe with the
    // higher score wins, whatever the table's order
    std::set<int> scores;
    for (const auto& f : formatRegistry())
        EXPECT_TRUE(scores.insert(f.score).second) << f.looksFor << ": two formats of one score";
    for (size_t i = 1; i < formatsByScore().size(); ++i)
        EXPECT_GT(formatsByScore()[i - 1]->score, formatsByScore()[i]->score);
    EXPECT_EQ(openCheckpoint(kData + "/megatron/synthetic_tp2_dp2")->format, CheckpointFormat::MegatronDist);
    EXPECT_EQ(openCheckpoint(kData + "/fsdp2_r2")->format, CheckpointFormat::Dcp);
    EXPECT_EQ(openCheckpoint(kData + "/adam_fp16.pt")->format, CheckpointFormat::TorchSave);
    // a folder of none: the error names what every format's folder holds, from the table
    const auto dir = std::filesystem::temp_directory_path() / ("optscope_empty_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    try {
        openCheckpoint(dir.string());
        ADD_FAILURE() << "an empty folder opened";
    } catch (const Error& e) {
        for (const auto& f : formatRegistry()) {
            if (f.format == CheckpointFormat::TorchSave) continue;
            EXPECT_NE(std::string(e.what()).find(f.looksFor), std::string::npos) << f.looksFor;
        }
    }
    std::filesystem::remove_all(dir);
}

TEST(FormatRegistry, AFileOfADcpCheckpointOpensItsFolder)
{
    // a user who picks __0_0.distcp (or .metadata) means the checkpoint: the CLI opens the folder (a .distcp's bytes
    // alone are no zip: before, "ZIP64 end-of-central-directory record missing"), and the GUI's open and drop ask
    // checkpointPathFor for the folder to show and remember
    const std::string dir = kData + "/fsdp2_r3";
    for (const std::string file : {"/__0_0.distcp", "/__2_0.distcp", "/.metadata"}) {
        EXPECT_EQ(checkpointPathFor(dir + file), dir) << file;
        const auto cp = openCheckpoint(dir + file);
        EXPECT_EQ(cp->format, CheckpointFormat::Dcp) << file;
        EXPECT_EQ(cp->entries.size(), openCheckpoint(dir)->entries.size()) << file;
    }
    EXPECT_EQ(checkpointPathFor(dir), dir);
    EXPECT_EQ(checkpointPathFor(kData + "/adam_fp16.pt"), kData + "/adam_fp16.pt");
    // a .distcp with no .metadata beside it is no checkpoint's: left as it is
    const auto lone = std::filesystem::temp_directory_path() / ("optscope_lone_" + std::to_string(::getpid()));
    std::filesystem::create_directories(lone);
    std::filesystem::copy_file(dir + "/__0_0.distcp", lone / "__0_0.distcp");
    EXPECT_EQ(checkpointPathFor((lone / "__0_0.distcp").string()), (lone / "__0_0.distcp").string());
    EXPECT_THROW(openCheckpoint((lone / "__0_0.distcp").string()), Error);
    std::filesystem::remove_all(lone);
}
