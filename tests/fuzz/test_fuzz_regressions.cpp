// SPDX-License-Identifier: GPL-3.0-or-later
// Replays the fuzzers' findings (tests/fuzz/regressions/<harness>/, one file per crash, leak, hang or OOM that was
// fixed in the core) through the harness bodies under the normal build, so that every build (build-asan included)
// keeps them fixed without clang or libFuzzer. Also runs the real fixtures through the harnesses: a harness that
// rejected valid checkpoints would fuzz nothing but the error paths.
#include "fuzz_targets.h"
#include "optscope/base/error.h"
#include "optscope/io/block_map.h"
#include "optscope/io/remote_object.h"

#include "optscope/io/storage.h"
#include "optscope/io/zip_archive.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <iostream>
#include <random>
#include <string>
#include <vector>

using namespace optscope;
using namespace optscope::fuzz;
namespace fs = std::filesystem;

namespace {

const fs::path kData = OPTSCOPE_TEST_DATA;
const fs::path kRegressions = OPTSCOPE_FUZZ_REGRESSIONS;

std::string readFile(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const uint8_t* bytes(const std::string& s)
{
    return reinterpret_cast<const uint8_t*>(s.data());
}

using Harness = Outcome (*)(const uint8_t*, size_t);

/// Each committed input of one harness: no crash (an abort or a sanitizer report would end the test binary), no
/// exception but optscope::Error, and no hang: a generous bound that still fails a regression to exponential time.
void replay(const std::string& harness, Harness fn)
{
    const fs::path dir = kRegressions / harness;
    if (!fs::is_directory(dir)) GTEST_SKIP() << "no findings for this harness (" << dir << ")";
    size_t count = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (!e.is_regular_file() || e.path().filename().string().front() == '.' || e.path().extension() == ".md")
            continue;
        const std::string input = readFile(e.path());
        const auto start = std::chrono::steady_clock::now();
        const Outcome outcome = fn(bytes(input), input.size());
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_LT(seconds, 20.0) << e.path() << " took " << seconds << " s";
        std::cout << "  " << e.path().filename().string() << ": "
                  << (outcome == Outcome::Accepted ? "accepted" : "rejected") << " in " << seconds << " s\n";
        ++count;
    }
    EXPECT_GT(count, 0u) << "no regression inputs in " << dir;
}

bool isZipFile(const fs::path& p)
{
    const std::string head = readFile(p).substr(0, 4);
    return head == std::string("PK\x03\x04", 4);
}

/// torch.save files among the fixtures (tests/data, recursively)
std::vector<fs::path> torchSaveFixtures()
{
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(kData))
        if (e.is_regular_file() && e.path().extension() == ".pt") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

/// DCP folders among the fixtures
std::vector<fs::path> dcpFixtures()
{
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(kData))
        if (e.is_directory() && fs::is_regular_file(e.path() / ".metadata")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

std::string packDcp(const fs::path& dir, std::vector<std::string>& storage)
{
    std::vector<DcpFile> files;
    storage.push_back(readFile(dir / ".metadata"));
    std::vector<fs::path> data;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".distcp") data.push_back(e.path());
    std::sort(data.begin(), data.end());
    storage.reserve(data.size() + 1);
    for (const auto& p : data)
        storage.push_back(readFile(p));
    files.push_back({".metadata", storage[0]});
    for (size_t i = 0; i < data.size(); ++i)
        files.push_back({data[i].filename().string(), storage[i + 1]});
    return joinDcpInput(files);
}

} // namespace

TEST(FuzzRegressions, Pickle)
{
    replay("pickle", fuzzPickle);
}

TEST(FuzzRegressions, Zip)
{
    replay("zip", fuzzZip);
}

TEST(FuzzRegressions, TorchSave)
{
    replay("torch_save", fuzzTorchSave);
}

TEST(FuzzRegressions, Dcp)
{
    replay("dcp", fuzzDcp);
}

TEST(FuzzRegressions, Safetensors)
{
    replay("safetensors", fuzzSafetensors);
}

TEST(FuzzRegressions, S3Listing)
{
    replay("s3_listing", fuzzS3Listing);
}

TEST(FuzzRegressions, BlockMap)
{
    replay("block_map", fuzzBlockMap);
}

// A RemoteObject's block bookkeeping under many random operation sequences (the fuzzer explores further): every
// claim, settle and give-back agrees with the harness's model. Seeded: the same sequences every run.
TEST(FuzzHarnesses, BlockMapAgreesWithItsModel)
{
    std::mt19937 g(31);
    for (int i = 0; i < 3000; ++i) {
        std::vector<uint8_t> input(4 + g() % 400);
        for (auto& b : input)
            b = static_cast<uint8_t>(g());
        input[0] = 0; // objects up to 64 KiB: many blocks of every size
        ASSERT_EQ(fuzzBlockMap(input.data(), input.size()), Outcome::Accepted) << i;
    }
}

using Runs = std::vector<std::pair<uint64_t, uint64_t>>;

/// BlockMap runs as (begin, end) pairs, for EXPECT_EQ
static Runs blockRuns(const std::vector<BlockMap::Run>& runs)
{
    Runs out;
    for (const auto& x : runs)
        out.emplace_back(x.begin, x.end);
    return out;
}

// A DCP file of many small items (torch.save per chunk, ~1.3 KB each) shares every block among several: a block goes
// back when its last item is done, not never (a remote check of 1,024 such files kept all 2.8 GB); a block fetched
// again is kept until its bytes are all done again.
TEST(FuzzHarnesses, BlockMapGivesBackABlockSharedBySmallItemsWhenTheLastIsDone)
{
    const auto given = blockRuns;
    BlockMap map(40, 16, 64); // blocks [0,16) [16,32) [32,40)
    map.settle(map.claim(map.blocksOf(0, 40), {}).runs, true);
    EXPECT_EQ(given(map.giveBack(0, 10)), Runs {}) << "block 0 has bytes not done";
    EXPECT_EQ(given(map.giveBack(10, 12)), (Runs {{0, 1}})) << "[10,22): block 0 all done, block 1 not";
    EXPECT_EQ(map.state(1), BlockMap::Present);
    EXPECT_EQ(given(map.giveBack(30, 5)), Runs {}) << "[22,30) of block 1 is not done";
    EXPECT_EQ(given(map.giveBack(22, 8)), (Runs {{1, 2}})) << "block 2 has [35,40) to go";
    EXPECT_EQ(map.state(2), BlockMap::Present);
    EXPECT_EQ(given(map.giveBack(35, 5)), (Runs {{2, 3}})) << "the object's last, short block";
    // block 1 read again: fetched, and no longer done until all its bytes are again
    map.settle(map.claim(map.blocksOf(20, 1), {}).runs, true);
    EXPECT_EQ(map.state(1), BlockMap::Present);
    EXPECT_EQ(given(map.giveBack(16, 8)), Runs {});
    EXPECT_EQ(given(map.giveBack(24, 8)), (Runs {{1, 2}}));
    // a second reader pointing into bytes done before: their block stays until they are done again
    map.settle(map.claim(map.blocksOf(0, 40), {}).runs, true);
    EXPECT_EQ(given(map.giveBack(0, 10)), Runs {});
    map.reading(2, 3);
    EXPECT_EQ(given(map.giveBack(10, 6)), Runs {}) << "[2,5) is being read";
    EXPECT_EQ(given(map.giveBack(2, 3)), (Runs {{0, 1}}));
    // a block being fetched keeps its memory (what arrived would be lost), even when all its bytes are done
    const BlockMap::Claim inFlight = map.claim(map.blocksOf(0, 16), {});
    EXPECT_EQ(given(map.giveBack(0, 16)), Runs {});
    EXPECT_EQ(map.state(0), BlockMap::InFlight);
    map.settle(inFlight.runs, true);
}

// The remote block cache's clock (BlockCache, OPTSCOPE_REMOTE_CACHE_MB): a block fetched or read lately survives one
// visit, one no reader points into goes on the next; a block a reader points into (bytes()) is never evicted until
// that range is given back. Without the bound a remote check of 1,024 rank files of small items held 1.56 GB.
TEST(FuzzHarnesses, BlockMapEvictsBlocksNotUsedLatelyAndNeverPinnedOnes)
{
    const auto runs = blockRuns;
    BlockMap map(64, 16, 64); // blocks 0..3
    map.settle(map.claim(map.blocksOf(0, 64), {}).runs, true);
    uint64_t cleared = 0;
    EXPECT_EQ(runs(map.evict(4, 8, cleared)), Runs {}) << "fetched, not read yet (a read-ahead): kept";
    map.used(map.blocksOf(0, 64)); // all copied out of, none finished
    EXPECT_EQ(runs(map.evict(4, 4, cleared)), Runs {}) << "used lately: one round takes the marks";
    EXPECT_EQ(cleared, 4u);
    map.used(map.blocksOf(16, 1)); // block 1 read again
    map.reading(40, 4); // a reader points into block 2
    cleared = 0;
    EXPECT_EQ(runs(map.evict(4, 4, cleared)), (Runs {{0, 1}, {3, 4}}));
    EXPECT_EQ(cleared, 1u) << "block 1's mark";
    EXPECT_TRUE(map.pinned(2));
    EXPECT_EQ(map.state(0), BlockMap::Absent) << "evicted: a read fetches it again";
    EXPECT_EQ(runs(map.evict(4, 8, cleared)), (Runs {{1, 2}})) << "block 2 stays while pointed into";
    EXPECT_EQ(map.state(2), BlockMap::Present);
    map.giveBack(40, 4);
    EXPECT_FALSE(map.pinned(2));
    EXPECT_EQ(runs(map.evict(4, 8, cleared)), (Runs {{2, 3}}));
    // a read-ahead not read is evicted only when nothing else is left; the clock goes on from where it stopped
    map.settle(map.claim(map.blocksOf(0, 64), {}).runs, true);
    EXPECT_EQ(runs(map.evict(1, 4, cleared, true)), (Runs {{0, 1}}));
    EXPECT_EQ(runs(map.evict(2, 4, cleared, true)), (Runs {{1, 3}})) << "on from block 1";
    // a block evicted is fetched again by a read, even one that fetched it before (its skip list)
    const BlockMap::Claim again = map.claim(map.blocksOf(0, 16), {{0, 1}});
    EXPECT_EQ(again.runs.size(), 1u);
    map.settle(again.runs, true);
    // two threads read one item: the first to finish gives back none of the bytes the other points into
    map.settle(map.claim(map.blocksOf(0, 64), {}).runs, true);
    map.reading(0, 16, 1);
    map.reading(4, 8, 2);
    EXPECT_EQ(runs(map.giveBack(0, 16, 1)), Runs {}) << "reader 2 still points into block 0";
    EXPECT_TRUE(map.pinned(0));
    EXPECT_EQ(runs(map.giveBack(4, 8, 2)), (Runs {{0, 1}}));
}

TEST(FuzzHarnesses, S3ListingIsReadAndBrokenOnesRejected)
{
    // a page as S3 sends it: objects and a common prefix below the prefix, one key outside it, more pages to come
    const std::string page = "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>"
                             "<Contents><Key>ckpt/step_1/.metadata</Key><ETag>&quot;ab&quot;</ETag><Size>517"
                             "</Size></Contents><Contents><Key>ckpt/other</Key><Size>1</Size></Contents>"
                             "<CommonPrefixes><Prefix>ckpt/step_1/run/</Prefix></CommonPrefixes>"
                             "<NextContinuationToken>t0k</NextContinuationToken></ListBucketResult>";
    EXPECT_EQ(fuzzS3Listing(bytes(page), page.size()), Outcome::Accepted);
    const ListingPage p = parseListingPage(page, std::string(kListingPrefix), "s3://bucket/ckpt/step_1");
    ASSERT_EQ(p.items.size(), 2u);
    EXPECT_EQ(p.items[0].name, ".metadata");
    EXPECT_EQ(p.items[0].size, 517u);
    EXPECT_EQ(p.items[0].etag, "\"ab\"");
    EXPECT_EQ(p.items[1].name, "run");
    EXPECT_TRUE(p.items[1].folder);
    EXPECT_TRUE(p.truncated);
    EXPECT_EQ(p.continuation, "t0k");
    // cut anywhere, it is not XML any more: an error naming the listing, never a crash
    for (size_t cut : {size_t(0), size_t(10), page.size() / 2, page.size() - 3})
        EXPECT_EQ(fuzzS3Listing(bytes(page), cut), Outcome::Rejected) << cut;
    EXPECT_EQ(s3ErrorCode("<Error><Code>SlowDown</Code></Error>"), "SlowDown");
}

TEST(FuzzHarnesses, S3UploadsPageIsReadAndBrokenOnesRejected)
{
    // a ListMultipartUploads page as S3 sends it: two uploads below the prefix (one key twice: a killed process's
    // and a later run's), one outside it, one without its id, more pages to come
    const std::string page
        = "<?xml version=\"1.0\"?><ListMultipartUploadsResult><Bucket>bucket</Bucket>"
          "<NextKeyMarker>ckpt/step_1/g.pt</NextKeyMarker><NextUploadIdMarker>u2</NextUploadIdMarker>"
          "<IsTruncated>true</IsTruncated>"
          "<Upload><Key>ckpt/step_1/g.pt</Key><UploadId>u1</UploadId></Upload>"
          "<Upload><Key>ckpt/step_1/g.pt</Key><UploadId>u2</UploadId></Upload>"
          "<Upload><Key>ckpt/other</Key><UploadId>u3</UploadId></Upload>"
          "<Upload><Key>ckpt/step_1/x</Key></Upload></ListMultipartUploadsResult>";
    EXPECT_EQ(fuzzS3Listing(bytes(page), page.size()), Outcome::Accepted);
    const UploadsPage p = parseUploadsPage(page, std::string(kListingPrefix), "s3://bucket/ckpt/step_1");
    ASSERT_EQ(p.uploads.size(), 2u);
    EXPECT_EQ(p.uploads[0].key, "ckpt/step_1/g.pt");
    EXPECT_EQ(p.uploads[0].id, "u1");
    EXPECT_EQ(p.uploads[1].id, "u2");
    EXPECT_TRUE(p.truncated);
    EXPECT_EQ(p.nextKeyMarker, "ckpt/step_1/g.pt");
    EXPECT_EQ(p.nextUploadIdMarker, "u2");
    for (size_t cut : {size_t(0), size_t(10), page.size() / 2, page.size() - 3})
        EXPECT_THROW(parseUploadsPage(page.substr(0, cut), std::string(kListingPrefix), "s3://b/k"), Error) << cut;
}

TEST(FuzzHarnesses, SafetensorsFixturesAreAcceptedAndCutsRejected)
{
    size_t count = 0;
    for (const auto& e : fs::recursive_directory_iterator(kData / "hf")) {
        if (e.path().extension() != ".safetensors") continue;
        const std::string input = readFile(e.path());
        EXPECT_EQ(fuzzSafetensors(bytes(input), input.size()), Outcome::Accepted) << e.path();
        EXPECT_EQ(fuzzSafetensors(bytes(input), 12), Outcome::Rejected) << e.path();
        ++count;
    }
    EXPECT_GE(count, 3u);
    // a short deterministic mutation run over the header (bytes flipped, digits and brackets swapped in): every
    // outcome is an Error or a checkpoint, never another exception or a crash
    const std::string seed = readFile(kData / "hf" / "single" / "model.safetensors");
    std::mt19937 rng(17);
    const std::string alphabet = "0123456789[]{},:\"-e. ";
    for (int i = 0; i < 3000; ++i) {
        std::string m = seed;
        const size_t header = std::min<size_t>(m.size(), 8 + 1000);
        for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) {
            const size_t at = rng() % header;
            m[at] = rng() % 2 ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
        }
        if (rng() % 4 == 0) m.resize(rng() % m.size());
        fuzzSafetensors(bytes(m), m.size());
    }
}

TEST(FuzzHarnesses, TorchSaveFixturesAreAccepted)
{
    const auto files = torchSaveFixtures();
    ASSERT_GE(files.size(), 10u);
    for (const auto& p : files) {
        const std::string input = readFile(p);
        EXPECT_EQ(fuzzTorchSave(bytes(input), input.size()), Outcome::Accepted) << p;
        if (isZipFile(p)) {
            EXPECT_EQ(fuzzZip(bytes(input), input.size()), Outcome::Accepted) << p;
        }
    }
}

TEST(FuzzHarnesses, PicklesOfTheFixturesAreAccepted)
{
    size_t count = 0;
    for (const auto& p : torchSaveFixtures()) {
        if (!isZipFile(p)) continue;
        const auto file = openByteSource(p.string()); // a deflated archive's inflated copy
        const ZipArchive zip = ZipArchive::parse(file->all(), file->size(), p.string());
        const std::string_view pkl = zip.recordBytes("data.pkl");
        EXPECT_EQ(fuzzPickle(reinterpret_cast<const uint8_t*>(pkl.data()), pkl.size()), Outcome::Accepted) << p;
        ++count;
    }
    for (const auto& dir : dcpFixtures()) {
        const std::string meta = readFile(dir / ".metadata");
        EXPECT_EQ(fuzzPickle(bytes(meta), meta.size()), Outcome::Accepted) << dir;
        ++count;
    }
    EXPECT_GE(count, 10u);
}

TEST(FuzzHarnesses, DcpFixturesAreAccepted)
{
    const auto dirs = dcpFixtures();
    ASSERT_GE(dirs.size(), 3u);
    for (const auto& dir : dirs) {
        // hostile/too_many_dims is refused by design (a chunk of 300 dimensions: tests/safety)
        if (dir.filename() == "too_many_dims") continue;
        std::vector<std::string> storage;
        const std::string input = packDcp(dir, storage);
        // the packed form splits back into the same files
        const auto files = splitDcpInput(input);
        ASSERT_EQ(files.size(), storage.size()) << dir;
        EXPECT_EQ(files[0].name, ".metadata");
        for (size_t i = 0; i < files.size(); ++i)
            EXPECT_EQ(files[i].bytes, storage[i]) << dir << " file " << i;
        EXPECT_EQ(fuzzDcp(bytes(input), input.size()), Outcome::Accepted) << dir;
    }
}

TEST(FuzzHarnesses, DcpInputNamesAreSanitized)
{
    const std::string input = std::string("META") + "\n==> ../escape\nA" + "\n==> .metadata\nB" + "\n==> ok_1.distcp\nC"
        + "\n==> ok_1.distcp\nD" + "\n==> a/b\nE";
    const auto files = splitDcpInput(input);
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(files[0].name, ".metadata");
    EXPECT_EQ(files[0].bytes, "META");
    EXPECT_EQ(files[1].name, "ok_1.distcp");
    EXPECT_EQ(files[1].bytes, "C");
}

TEST(FuzzHarnesses, GarbageIsRejected)
{
    const std::string empty;
    const std::string garbage = "not a checkpoint at all";
    for (const std::string* s : {&empty, &garbage}) {
        EXPECT_EQ(fuzzPickle(bytes(*s), s->size()), Outcome::Rejected);
        EXPECT_EQ(fuzzZip(bytes(*s), s->size()), Outcome::Rejected);
        EXPECT_EQ(fuzzTorchSave(bytes(*s), s->size()), Outcome::Rejected);
        EXPECT_EQ(fuzzDcp(bytes(*s), s->size()), Outcome::Rejected);
    }
}
