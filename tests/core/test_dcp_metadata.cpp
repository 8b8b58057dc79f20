// SPDX-License-Identifier: GPL-3.0-or-later
// The streaming DCP .metadata reader against the general unpickler: the same index on every DCP fixture, and
// never a crash or a wrong index on cut or damaged input (it gives up, and the general reader judges).
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/dcp/dcp_metadata_reader.h"
#include "optscope/formats/dcp/dcp_reader.h"
#include "optscope/io/mapped_file.h"
#include "optscope/pickle/pickle_machine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace optscope;

namespace {

std::vector<std::string> metadataFiles()
{
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(OPTSCOPE_TEST_DATA))
        if (e.path().filename() == ".metadata") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

DcpMetadata viaGraph(const std::string& path, PyArena& arena)
{
    auto file = MappedFile::open(path);
    PickleOptions opt;
    opt.sourceName = path;
    PickleResult r = unpickle(file->all(), file->size(), arena, opt);
    arena.keepAlive(file);
    return DcpMetadataReader::fromGraph(r.root, path, r.protocol);
}

/// the index as comparable text: items in order, storage entries sorted (their order in the file is not kept)
std::string describe(const DcpMetadata& m)
{
    std::string s = "protocol " + std::to_string(m.protocol) + " version " + m.version + "\n";
    auto ints = [&](uint64_t at, uint32_t n) { return shapeText({m.dims.begin() + at, m.dims.begin() + at + n}); };
    for (const auto& it : m.items) {
        s += it.fqn + " kind " + std::to_string(static_cast<int>(it.kind)) + " path " + joinKeyPath(it.path);
        for (const auto& p : it.path)
            s += p.isIndex() ? "#" : "'";
        if (it.dtype) s += " dtype " + std::string(dtypeName(*it.dtype));
        s += " shape " + (it.shapeOk ? shapeText(it.shape) : "?") + "\n";
        for (uint64_t k = it.firstChunk; k < it.firstChunk + it.chunkCount; ++k) {
            const auto& c = m.chunks[k];
            s += "  chunk " + (c.ok ? ints(c.dimsAt, c.ndim) + " " + ints(c.dimsAt + c.ndim, c.ndim) : "bad") + "\n";
        }
    }
    std::vector<std::string> storage;
    for (const auto& st : m.storage)
        storage.push_back(m.storageFqns[st.fqn] + " " + (st.hasOffset ? ints(st.offsetsAt, st.ndim) : "-") + " -> "
            + m.files->name(st.file) + " " + std::to_string(st.offset) + "+" + std::to_string(st.length)
            + (st.hasTransforms ? " T" : ""));
    std::sort(storage.begin(), storage.end());
    for (const auto& x : storage)
        s += x + "\n";
    s += "storage data " + std::to_string(m.hasStorageData) + ", " + std::to_string(m.storageErrors.size())
        + " errors\n";
    return s;
}

} // namespace

TEST(DcpMetadataReader, SameIndexAsTheGeneralUnpicklerOnEveryFixture)
{
    size_t fast = 0;
    for (const auto& path : metadataFiles()) {
        SCOPED_TRACE(path);
        auto file = MappedFile::open(path);
        auto index = DcpMetadataReader::read(*file);
        PyArena arena;
        std::optional<DcpMetadata> general;
        try {
            general = viaGraph(path, arena);
        } catch (const Error&) {
            // not a Metadata at all (corrupt fixtures): the fast reader must not have made one up
            EXPECT_FALSE(index.has_value());
            continue;
        }
        if (!index) continue; // odd files go to the general reader; the fixtures PyTorch wrote are counted below
        ++fast;
        EXPECT_EQ(describe(*index), describe(*general));
    }
    EXPECT_GE(fast, 8u); // fsdp1/fsdp2 fixtures, the diag cases, the 16-rank scale index, ...
}

TEST(DcpMetadataReader, ReadsWhatPyTorchWrites)
{
    for (const char* rel : {"fsdp2_r2", "fsdp2_r3", "fsdp1_r2", "scale/r16_l1", "diag/dcp_gap", "fuzz/tiny_dcp"}) {
        SCOPED_TRACE(rel);
        auto file = MappedFile::open(std::string(OPTSCOPE_TEST_DATA) + "/" + rel + "/.metadata");
        auto index = DcpMetadataReader::read(*file);
        ASSERT_TRUE(index.has_value()) << "the fast reader gave up on a file PyTorch wrote";
        EXPECT_FALSE(index->items.empty());
    }
    // 16 ranks: every parameter and its two moments in 16 chunks, one per rank file
    auto file = MappedFile::open(std::string(OPTSCOPE_TEST_DATA) + "/scale/r16_l1/.metadata");
    auto index = DcpMetadataReader::read(*file);
    ASSERT_TRUE(index);
    EXPECT_EQ(index->chunks.size(), 588u);
    EXPECT_EQ(index->storage.size(), 588u);
    EXPECT_EQ(index->files->size(), 16u);
}

TEST(DcpMetadataReader, CutOrDamagedInputGivesUpOrAgrees)
{
    // every prefix and a sweep of single-byte changes of a real .metadata: the reader returns nothing or an index the
    // general unpickler agrees with (under ASan in CI: never a read out of bounds)
    const std::string src = std::string(OPTSCOPE_TEST_DATA) + "/fuzz/tiny_dcp/.metadata";
    std::ifstream in(src, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 100u);
    const std::string tmp = (fs::temp_directory_path() / ("optscope_md_" + std::to_string(::getpid()))).string();
    size_t agreed = 0, gaveUp = 0;
    auto tryBytes = [&](const std::string& data) {
        {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            out << data;
        }
        auto file = MappedFile::open(tmp);
        auto index = DcpMetadataReader::read(*file);
        if (!index) {
            ++gaveUp;
            return;
        }
        PyArena arena;
        try {
            EXPECT_EQ(describe(*index), describe(viaGraph(tmp, arena)));
            ++agreed;
        } catch (const Error& e) {
            ADD_FAILURE() << "fast reader accepted what the general one rejects: " << e.what();
        }
    };
    for (size_t n = 0; n < bytes.size(); ++n)
        tryBytes(bytes.substr(0, n));
    for (size_t i = 0; i < bytes.size(); i += 5)
        for (unsigned char x : {0x00, 0x01, 0x7f, 0xff}) {
            std::string d = bytes;
            d[i] = static_cast<char>(static_cast<unsigned char>(d[i]) ^ x);
            tryBytes(d);
        }
    std::remove(tmp.c_str());
    EXPECT_GT(gaveUp, bytes.size()); // all cut files at least
    EXPECT_GT(agreed, 0u); // changed digits of an offset, say, still read (and agree)
}

TEST(DcpMetadataReader, CheckpointFromTheFastIndexHasNoObjectGraph)
{
    auto cp = openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/scale/r16_l1");
    EXPECT_EQ(cp->root, nullptr); // the Metadata object was never built
    const Entry* e = cp->find("model.model.layers.0.self_attn.q_proj.weight");
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->tensor->chunks.size(), 16u);
    EXPECT_EQ(e->tensor->chunks.rank(5), 5);
    EXPECT_EQ(e->tensor->chunks.offsetsOf(5)[0], 5 * 512);
    EXPECT_EQ(e->tensor->chunks.sizesOf(5)[0], 512);
    EXPECT_EQ(e->tensor->chunks.fileOf(5), "__5_0.distcp");
    // the rows of an entry share one file table with every other entry
    const Entry* m = cp->find("optim.state.model.layers.0.self_attn.q_proj.weight.exp_avg");
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->tensor->chunks.fileTable(), e->tensor->chunks.fileTable());
}

TEST(DcpMetadataReader, HandsOverEntriesAsItFindsThem)
{
    // Progress::entriesFound: every tensor key with its dtype and shape, before the open returns (a view fills its
    // tree from them while the chunk index is read); the finished checkpoint agrees with each
    std::vector<Entry> found;
    size_t batches = 0;
    Progress progress;
    progress.entriesFound = [&](std::vector<Entry>&& batch) {
        ++batches;
        for (auto& e : batch)
            found.push_back(std::move(e));
    };
    auto cp = openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/scale/r16_l1", progress);
    EXPECT_GE(batches, 1u);
    ASSERT_EQ(found.size(), cp->tensorCount());
    for (const Entry& e : found) {
        SCOPED_TRACE(e.key);
        ASSERT_EQ(e.path.size(), 1u);
        EXPECT_EQ(e.path[0].key, e.key);
        EXPECT_TRUE(e.tensor->chunks.size() == 0);
        const Entry* final = cp->find(e.key);
        ASSERT_NE(final, nullptr);
        EXPECT_EQ(e.tensor->dtype, final->tensor->dtype);
        EXPECT_EQ(e.tensor->shape, final->tensor->shape);
    }
    // and the ranks holding chunks, counted without a set per chunk
    std::vector<int> ranks(16);
    for (int r = 0; r < 16; ++r)
        ranks[static_cast<size_t>(r)] = r;
    EXPECT_EQ(cp->ranks(), ranks);
}
