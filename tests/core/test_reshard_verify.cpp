// SPDX-License-Identifier: GPL-3.0-or-later
// Flatten/unflatten of raw FSDP1 optimizer state against PyTorch's own files, reshard round trips N -> M -> N, and
// verify-by-load: that it passes on good data and names the key and rank when a resharded copy is damaged.
#include "optscope/analysis/diff_report.h"
#include "optscope/analysis/inspect_report.h"
#include "optscope/analysis/reshard.h"
#include "optscope/analysis/verify_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/dcp/dcp_reader.h"
#include "optscope/formats/dcp/dcp_writer.h"
#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/gpu/gpu_devices.h"
#include "optscope/optim/fsdp1_optim.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

const std::string kData = OPTSCOPE_TEST_DATA;

class TempDir
{
public:
    TempDir()
    {
        std::random_device rd;
        path = fs::temp_directory_path() / ("optscope-test-" + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
    fs::path path;
};

std::map<std::string, nlohmann::ordered_json> hashed(const Checkpoint& cp)
{
    InspectOptions o;
    o.hash = true;
    const InspectReport report = inspectCheckpoint(cp, o); // kept alive: the loop below iterates into it
    std::map<std::string, nlohmann::ordered_json> m;
    for (const auto& e : report.json["entries"])
        m[e["key"].get<std::string>()] = e;
    return m;
}

std::vector<CheckpointPtr> rawRanks()
{
    return {
        openCheckpoint(kData + "/fsdp1_raw_r2/optim_rank0.pt"), openCheckpoint(kData + "/fsdp1_raw_r2/optim_rank1.pt")};
}

// ------------------------------------------------------------------------------------------- FSDP1 raw state

/// every entry of @p got equals @p want's: same paths, tensor bytes and values
static void expectSameEntries(
    const std::map<std::string, nlohmann::ordered_json>& want, const std::map<std::string, nlohmann::ordered_json>& got)
{
    ASSERT_EQ(want.size(), got.size());
    for (const auto& [key, e] : want) {
        SCOPED_TRACE(key);
        ASSERT_TRUE(got.count(key));
        EXPECT_EQ(e["path"], got.at(key)["path"]);
        if (e["type"] == "tensor") {
            EXPECT_EQ(e["sha256"], got.at(key)["sha256"]);
            EXPECT_EQ(e["shape"], got.at(key)["shape"]);
        } else {
            EXPECT_EQ(e["value"], got.at(key)["value"]);
        }
    }
}

TEST(Fsdp1Optim, ModelUnitsInFlatParameterOrder)
{
    const auto model = Fsdp1Model::fromCheckpoint(*openCheckpoint(kData + "/fsdp1_r2"), {"blocks.1", "blocks.0"});
    ASSERT_EQ(model.units.size(), 3u);
    EXPECT_EQ(model.units[0].prefix, ""); // the root's flat parameter comes first
    EXPECT_EQ(model.units[1].prefix, "blocks.0");
    EXPECT_EQ(model.units[2].prefix, "blocks.1");
    EXPECT_EQ(model.units[0].params.size(), 2u); // out.weight, out.bias
    EXPECT_EQ(model.units[1].params.front().first, "blocks.0.qkv.weight");
}

TEST(Fsdp1Optim, UnflattenEqualsPyTorchFullStateDict)
{
    TempDir tmp;
    const auto ranks = rawRanks();
    const auto model = Fsdp1Model::fromCheckpoint(*openCheckpoint(kData + "/fsdp1_r2"), {"blocks.0", "blocks.1"});
    const UnflattenResult r = unflattenFsdp1(ranks, model);
    EXPECT_EQ(r.params, 16u);
    EXPECT_EQ(r.flatParams, 3u);
    const std::string out = (tmp.path / "full.pt").string();
    TorchSaveWriter::write(r.tree, out);
    // get_state_dict(model, optim, full_state_dict=True) on the same run, saved by PyTorch
    expectSameEntries(hashed(*openCheckpoint(kData + "/fsdp1_raw_r2/full_optim.pt")), hashed(*openCheckpoint(out)));
}

TEST(Fsdp1Optim, FlattenEqualsPyTorchRankFiles)
{
    // the inverse: PyTorch's full state split for 2 ranks must be exactly what each rank saved
    const auto full = openCheckpoint(kData + "/fsdp1_raw_r2/full_optim.pt");
    const auto model = Fsdp1Model::fromCheckpoint(*openCheckpoint(kData + "/fsdp1_r2"), {"blocks.0", "blocks.1"});
    const FlattenResult f = flattenFsdp1(*full, model, 2);
    ASSERT_EQ(f.ranks.size(), 2u);
    TempDir tmp;
    const auto ranks = rawRanks();
    for (int r = 0; r < 2; ++r) {
        const std::string out = (tmp.path / ("rank" + std::to_string(r) + ".pt")).string();
        TorchSaveWriter::write(f.ranks[r], out);
        const auto want = hashed(*ranks[r]);
        const auto got = hashed(*openCheckpoint(out));
        ASSERT_EQ(want.size(), got.size()) << "rank " << r;
        for (const auto& [key, e] : want) {
            SCOPED_TRACE("rank " + std::to_string(r) + " " + key);
            ASSERT_TRUE(got.count(key));
            if (e["type"] == "tensor")
                EXPECT_EQ(e["sha256"], got.at(key)["sha256"]);
            else
                EXPECT_EQ(e["value"], got.at(key)["value"]);
        }
    }
}

TEST(Fsdp1Optim, WrongUnitsOrWorldSizeAreClearErrors)
{
    const auto ranks = rawRanks();
    const auto cp = openCheckpoint(kData + "/fsdp1_r2");
    try {
        unflattenFsdp1(ranks, Fsdp1Model::fromCheckpoint(*cp, {}));
        FAIL() << "one unit cannot explain three flat parameters";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--units"), std::string::npos) << e.what();
    }
    try {
        unflattenFsdp1({ranks[0]}, Fsdp1Model::fromCheckpoint(*cp, {"blocks.0", "blocks.1"}));
        FAIL() << "one rank file cannot hold shards made for two";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("shard to ["), std::string::npos) << e.what();
    }
    EXPECT_THROW(Fsdp1Model::fromCheckpoint(*cp, {"no.such.module"}), Error);
}

static std::vector<CheckpointPtr> origRanks()
{
    return {openCheckpoint(kData + "/fsdp1_orig_raw_r2/optim_rank0.pt"),
        openCheckpoint(kData + "/fsdp1_orig_raw_r2/optim_rank1.pt")};
}

TEST(Fsdp1Optim, UseOrigParamsFilesUnflattenToPyTorchsFullStateDict)
{
    // use_orig_params=True (real FSDP1, 2 ranks): one id per parameter, each rank's state its slice of the flat
    // shard (parameters split across both ranks, and ones only one rank holds); --units do not matter
    // MODEL: PyTorch's full model state dict, or the FSDP1 DCP checkpoint of a use_orig_params=False run of the same
    // model, whose optimizer lists the parameters in flat-parameter order (root unit first), not the model's
    for (const std::string source : {"fsdp1_orig_raw_r2/model.pt", "fsdp1_r2"})
        for (const std::vector<std::string>& units : {std::vector<std::string> {}, {"blocks.0", "blocks.1"}}) {
            SCOPED_TRACE(source + " " + std::to_string(units.size()));
            const auto model = Fsdp1Model::fromCheckpoint(*openCheckpoint(kData + "/" + source), units);
            const auto ranks = origRanks(); // the result streams from them
            const UnflattenResult r = unflattenFsdp1(ranks, model);
            EXPECT_TRUE(r.origParams);
            EXPECT_EQ(r.params, 16u);
            EXPECT_EQ(r.flatParams, 0u);
            TempDir tmp;
            const std::string out = (tmp.path / "full.pt").string();
            TorchSaveWriter::write(r.tree, out);
            // get_state_dict(model, optim, full_state_dict=True) on the same run, saved by PyTorch
            expectSameEntries(
                hashed(*openCheckpoint(kData + "/fsdp1_orig_raw_r2/full_optim.pt")), hashed(*openCheckpoint(out)));
        }
}

TEST(Fsdp1Optim, UseOrigParamsFilesOfAnotherOrderOrMissingRanksAreClearErrors)
{
    const auto model = Fsdp1Model::fromCheckpoint(*openCheckpoint(kData + "/fsdp1_orig_raw_r2/model.pt"), {});
    // one rank file of two: its slices do not add up to the parameters
    try {
        unflattenFsdp1({origRanks()[0]}, model);
        FAIL() << "one rank of two unflattened";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("elements over the 1 rank files"), std::string::npos) << e.what();
    }
    // the model's parameters in another order than the optimizer's ids
    Fsdp1Model reversed = model;
    std::reverse(reversed.ordered.begin(), reversed.ordered.end());
    try {
        unflattenFsdp1(origRanks(), reversed);
        FAIL() << "ids paired with the wrong parameters";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model's order"), std::string::npos) << e.what();
    }
}

TEST(Fsdp1Optim, FlattenRefusesDifferingStep)
{
    // real FQN-keyed Adam state where one parameter's step lags: FSDP1 cannot put them in one flat parameter
    const auto cp = openCheckpoint(kData + "/adam_fqn_step_mismatch.pt");
    try {
        flattenFsdp1(*cp, Fsdp1Model::fromCheckpoint(*cp, {}), 2);
        FAIL() << "differing steps flattened";
    } catch (const Error& e) {
        // PyTorch's own wording (_optim_utils._flatten_zero_dim_tensor_optim_state)
        EXPECT_NE(std::string(e.what()).find("All unflattened parameters comprising a single flat parameter must have "
                                             "scalar state with the same value and dtype"),
            std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("for state step"), std::string::npos) << e.what();
    }
    // with module "2" in a unit of its own, every flat parameter agrees on its step
    EXPECT_NO_THROW(flattenFsdp1(*cp, Fsdp1Model::fromCheckpoint(*cp, {"2"}), 2));
}

// ------------------------------------------------------------------------------------------- reshard

TEST(Reshard, RoundTripsKeepLayoutAndBytes)
{
    const auto src = openCheckpoint(kData + "/fsdp2_r3");
    const auto srcHashes = hashed(*src);
    for (int m : {1, 2, 4, 5, 7}) {
        SCOPED_TRACE("3 -> " + std::to_string(m) + " -> 3");
        TempDir tmp;
        ReshardOptions to;
        to.worldSize = m;
        reshardCheckpoint(*src, (tmp.path / "m").string(), to);
        const auto mid = openCheckpoint((tmp.path / "m").string());
        ReshardOptions back;
        back.worldSize = 3;
        reshardCheckpoint(*mid, (tmp.path / "n").string(), back);
        const auto again = openCheckpoint((tmp.path / "n").string());
        const auto h = hashed(*again);
        ASSERT_EQ(h.size(), srcHashes.size());
        for (const auto& [key, e] : srcHashes) {
            ASSERT_TRUE(h.count(key)) << key;
            EXPECT_EQ(e.value("sha256", ""), h.at(key).value("sha256", "")) << key;
            EXPECT_EQ(e.value("value", nlohmann::ordered_json()), h.at(key).value("value", nlohmann::ordered_json()))
                << key;
        }
        // back at 3 ranks, FSDP2 chunking gives the original chunk offsets
        for (const auto& e : src->entries) {
            if (!e.isTensor()) continue;
            const Entry* b = again->find(e.key);
            ASSERT_NE(b, nullptr);
            ASSERT_EQ(b->tensor->chunks.size(), e.tensor->chunks.size()) << e.key;
            for (size_t i = 0; i < e.tensor->chunks.size(); ++i) {
                EXPECT_EQ(b->tensor->chunks[i].offsets, e.tensor->chunks[i].offsets) << e.key;
                EXPECT_EQ(b->tensor->chunks[i].sizes, e.tensor->chunks[i].sizes) << e.key;
            }
        }
    }
}

// DCP's traversal never descends a tuple, and a list only for a tensor, a mapping or such a list among its elements:
// what a reader flattened further goes back into the one item dcp.save makes (the interop test loads them in PyTorch)
TEST(Reshard, KeepsTheItemsDcpSaveMakes)
{
    PyArena arena;
    const auto key = [](const char* k) { return KeyPathElem::fromKey(k); };
    const auto index = [](int64_t i, bool inTuple) {
        KeyPathElem e = KeyPathElem::fromIndex(i);
        e.inTuple = inTuple;
        return e;
    };
    DcpPlan plan;
    const auto tensor = [&](KeyPath path) {
        DcpPlan::Tensor t;
        t.path = std::move(path);
        t.shape = {2};
        t.addChunk(0, {0}, {1});
        t.addChunk(1, {1}, {1});
        t.produce = [](const std::vector<int64_t>&, const std::vector<int64_t>& sizes, const ByteSink& sink) {
            const std::vector<uint8_t> bytes(static_cast<size_t>(sizes[0]) * 4, 7);
            sink(bytes.data(), bytes.size());
        };
        plan.order.push_back({true, plan.tensors.size()});
        plan.tensors.push_back(std::move(t));
    };
    const auto value = [&](KeyPath path) {
        plan.order.push_back({false, plan.values.size()});
        plan.values.push_back({std::move(path), arena.makeInt(5), 0, {}, {}});
    };
    tensor({key("model"), key("w")});
    tensor({key("tup"), index(0, true)}); // (tensor, 5)
    value({key("tup"), index(1, true)});
    tensor({key("lot"), index(0, false), index(0, true)}); // [(tensor, 5)]
    value({key("lot"), index(0, false), index(1, true)});
    tensor({key("mixed"), index(0, false)}); // [tensor, (tensor, {"k": tensor})]
    tensor({key("mixed"), index(1, false), index(0, true)});
    tensor({key("mixed"), index(1, false), index(1, true), key("k")});
    value({key("groups"), index(0, false), key("lr")}); // [{"lr": 5}]
    tensor({key("lst"), index(0, false)}); // [tensor, tensor]
    tensor({key("lst"), index(1, false)});

    keepDcpItemsWhole(plan);
    std::vector<std::string> items;
    for (const auto& [isTensor, i] : plan.order) {
        const auto& path = isTensor ? plan.tensors[i].path : plan.values[i].path;
        items.push_back(joinKeyPath(path) + (isTensor ? "" : "=" + std::to_string(plan.values[i].parts.size())));
    }
    EXPECT_EQ(items,
        (std::vector<std::string> {
            "model.w", "tup=2", "lot=2", "mixed.0", "mixed.1=2", "groups.0.lr=0", "lst.0", "lst.1"}));
    const auto& tup = plan.values[0];
    ASSERT_EQ(tup.parts.size(), 2u);
    EXPECT_TRUE(tup.parts[0].path.front().inTuple);
    EXPECT_EQ(tup.parts[0].value, nullptr);
    std::string whole;
    tup.parts[0].tensor.produce([&](const uint8_t* d, size_t n) { whole.append(reinterpret_cast<const char*>(d), n); });
    EXPECT_EQ(whole.size(), 8u); // the whole tensor, where the plan had it in two ranks' chunks
    EXPECT_NE(tup.parts[1].value, nullptr);
    EXPECT_EQ(plan.tensors.size(), 4u);

    const size_t before = plan.order.size();
    keepDcpItemsWhole(plan); // already whole: unchanged
    EXPECT_EQ(plan.order.size(), before);
}

TEST(Reshard, ATensorInsideAValueIsWrittenOnlyWhenItsViewLiesInItsStorage)
{
    // a namedtuple's tensor field is written over its storage's record (compare_nested in the interop tests loads it
    // in PyTorch); one that looks outside its storage, which torch.load refuses, is left out, never read past it
    PyArena arena;
    PyValue* storage = arena.make(PyKind::Storage);
    storage->storage = arena.makeStorageInfo();
    storage->storage->located = true;
    storage->storage->recordLength = 16; // 4 float32
    const auto view = [&](int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
        PyValue* t = arena.make(PyKind::Tensor);
        t->tensor = arena.makeTensorInfo();
        t->tensor->storage = storage;
        t->tensor->dtype = DType::Float32;
        t->tensor->storageOffset = offset;
        t->tensor->sizes = std::move(sizes);
        t->tensor->strides = std::move(strides);
        return TorchSaveWriter::nestedTensorUnwritable(t);
    };
    EXPECT_EQ(view(0, {2, 2}, {2, 1}), "");
    EXPECT_EQ(view(2, {2}, {1}), "");
    EXPECT_EQ(view(0, {0, 9}, {1, 1}), ""); // no elements
    EXPECT_EQ(view(0, {1 << 20}, {0}), ""); // a broadcast view of one element
    const std::string outside = "a tensor inside a value laid out outside its storage";
    EXPECT_EQ(view(1, {2, 2}, {2, 1}), outside);
    EXPECT_EQ(view(0, {5}, {1}), outside);
    EXPECT_EQ(view(-1, {1}, {1}), outside);
    EXPECT_EQ(view(0, {2, 2}, {1}), outside);
    EXPECT_EQ(view(0, {INT64_MAX}, {INT64_MAX}), outside); // (overflows: refused, not wrapped into range)
    storage->storage->recordLength = 15;
    EXPECT_EQ(view(0, {1}, {1}), "a tensor inside a value whose storage is not a whole number of its elements");
    storage->storage->located = false;
    EXPECT_EQ(view(0, {1}, {1}), "a tensor inside a value whose bytes the file does not hold");
}

TEST(Reshard, Fsdp1LayoutHasNoEmptyChunks)
{
    TempDir tmp;
    ReshardOptions o;
    o.worldSize = 3;
    o.layout = ShardingStyle::Fsdp1;
    reshardCheckpoint(*openCheckpoint(kData + "/fsdp2_r2"), (tmp.path / "f1").string(), o);
    const auto cp = openCheckpoint((tmp.path / "f1").string());
    const Entry* e = cp->find("model.blocks.0.head.weight"); // 4 rows on 3 ranks: 2 + 2, nothing for rank 2
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->tensor->chunks.size(), 2u);
    EXPECT_EQ(e->tensor->chunks[1].rank, 1);
}

TEST(Reshard, OneEmptyChunkPerTensorLikeDcpDedup)
{
    // model.out.weight has 3 rows: on 5 ranks, ranks 3 and 4 both hold the empty chunk at offset 3. PyTorch's
    // dedup_save_plans keeps one write item per (fqn, offsets): one chunk and one storage entry, rank 3's.
    TempDir tmp;
    ReshardOptions o;
    o.worldSize = 5;
    reshardCheckpoint(*openCheckpoint(kData + "/fsdp2_r3"), (tmp.path / "r5").string(), o);
    const auto cp = openCheckpoint((tmp.path / "r5").string());
    for (const Entry& e : cp->entries) {
        if (!e.isTensor()) continue;
        std::set<std::vector<int64_t>> offsets;
        for (const auto& c : e.tensor->chunks)
            EXPECT_TRUE(offsets.insert(c.offsets).second) << e.key << ": two chunks at " << shapeText(c.offsets);
    }
    const Entry* e = cp->find("model.out.weight");
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->tensor->chunks.size(), 4u);
    EXPECT_EQ(e->tensor->chunks[3].rank, 3);
    EXPECT_EQ(e->tensor->chunks[3].sizes[0], 0);
}

TEST(Reshard, RefusesAnExistingOutputAndLeavesNoTemporary)
{
    TempDir tmp;
    fs::create_directories(tmp.path / "busy");
    std::ofstream(tmp.path / "busy" / "x") << "keep me";
    ReshardOptions o;
    o.worldSize = 2;
    EXPECT_THROW(reshardCheckpoint(*openCheckpoint(kData + "/adam_int.pt"), (tmp.path / "busy").string(), o), Error);
    EXPECT_TRUE(fs::exists(tmp.path / "busy" / "x"));
    size_t n = 0;
    for (const auto& f : fs::directory_iterator(tmp.path)) {
        (void)f;
        ++n;
    }
    EXPECT_EQ(n, 1u);
}

// "-o out/" names the folder out, new or empty, as without the slash (before: "cannot create a temporary folder next
// to it", and for an empty one "cannot rename the finished temporary folder into place"; found by a hunt)
TEST(Reshard, AnOutputFolderNamedWithATrailingSlashIsThatFolder)
{
    TempDir tmp;
    fs::create_directories(tmp.path / "empty");
    ReshardOptions o;
    o.worldSize = 2;
    const auto cp = openCheckpoint(kData + "/fsdp2_r2");
    for (const std::string& out : {(tmp.path / "new").string() + "/", (tmp.path / "empty").string() + "//"}) {
        reshardCheckpoint(*cp, out, o);
        EXPECT_TRUE(diffCheckpoints(*cp, *openCheckpoint(out)).equal) << out;
    }
    std::set<std::string> names;
    for (const auto& f : fs::directory_iterator(tmp.path))
        names.insert(f.path().filename().string());
    EXPECT_EQ(names, (std::set<std::string> {"empty", "new"})); // no temporary left beside them
}

TEST(Reshard, CudaWithoutGpuIsAClearErrorAndWritesNothing)
{
    const GpuInfo info = queryGpus();
    if (info.compiledWithCuda && !info.devices.empty()) GTEST_SKIP() << "a GPU is present: tests/gpu covers it";
    TempDir tmp;
    ReshardOptions o;
    o.worldSize = 2;
    o.device = ComputeDevice::Cuda;
    const auto src = openCheckpoint(kData + "/fsdp2_r2");
    VerifyOptions v;
    v.worldSize = 3;
    v.device = ComputeDevice::Cuda;
    try {
        reshardCheckpoint(*src, (tmp.path / "out").string(), o);
        ADD_FAILURE() << "reshard --device cuda ran without a GPU";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
        EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::is_empty(tmp.path)); // no output folder, no temporary
    try {
        verifyByLoad(*src, v);
        ADD_FAILURE() << "verify --device cuda ran without a GPU";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    }
}

// ------------------------------------------------------------------------------------------- verify

TEST(Verify, ByLoadIsIdenticalForEveryWorldSize)
{
    const auto src = openCheckpoint(kData + "/fsdp1_r2");
    for (int m : {1, 2, 3, 4, 6}) {
        VerifyOptions o;
        o.worldSize = m;
        const VerifyReport r = verifyByLoad(*src, o);
        EXPECT_TRUE(r.identical()) << "M=" << m << ": " << r.toJson().dump().substr(0, 2000);
        EXPECT_EQ(r.worldSize, m);
        EXPECT_GT(r.bytesCompared, 0u);
        // every tensor was loaded by every rank of its layout
        for (const auto& e : r.entries) {
            if (e.type == "tensor" && !e.shape.empty()) {
                EXPECT_EQ(e.ranks.size(), static_cast<size_t>(m)) << e.key;
            }
        }
    }
}

TEST(Verify, AgainstNamesTheDamagedKeyAndRank)
{
    TempDir tmp;
    const auto src = openCheckpoint(kData + "/fsdp2_r3");
    ReshardOptions o;
    o.worldSize = 2;
    const std::string copy = (tmp.path / "copy").string();
    reshardCheckpoint(*src, copy, o);
    // damage one element of one chunk on rank 1: find where its bytes are and flip them
    const auto rs = DcpReader::open(copy);
    const Entry* victim = rs->find("optim.state.blocks.1.proj.weight.exp_avg");
    ASSERT_NE(victim, nullptr);
    const TensorChunk& chunk = victim->tensor->chunks.at(1);
    ASSERT_EQ(chunk.rank, 1);
    {
        // the storage record is the last thing before the zip's closing records: flip a byte of the data near its
        // end, found through our own reader
        InspectOptions io;
        (void)io;
        std::fstream f(fs::path(copy) / chunk.source.file, std::ios::in | std::ios::out | std::ios::binary);
        // the item's data record starts at a 64-byte boundary after its pickle: read the item and locate it
        std::vector<char> item(chunk.source.length);
        f.seekg(static_cast<std::streamoff>(chunk.source.offset));
        f.read(item.data(), static_cast<std::streamsize>(item.size()));
        const std::string marker = "archive/data/0";
        size_t at = std::string(item.data(), item.size()).find(marker);
        ASSERT_NE(at, std::string::npos);
        // local header: the data begins after the name and its 'FB' padding, at the next multiple of 64
        size_t data = ((at + marker.size()) / 64 + 1) * 64;
        f.seekp(static_cast<std::streamoff>(chunk.source.offset + data + 4)); // second float32 of the chunk
        char b = item[data + 4];
        b = static_cast<char>(b ^ 0x40);
        f.write(&b, 1);
    }
    const auto damaged = openCheckpoint(copy);
    const VerifyReport r = verifyAgainst(*src, *damaged);
    EXPECT_FALSE(r.identical());
    size_t different = 0;
    for (const auto& e : r.entries) {
        if (e.status == VerifyStatus::Identical) continue;
        ++different;
        EXPECT_EQ(e.key, "optim.state.blocks.1.proj.weight.exp_avg");
        EXPECT_EQ(e.status, VerifyStatus::Different);
        EXPECT_EQ(e.differing, 1);
        // the second element of rank 1's chunk (a dim-0 shard: its rows are whole), as a row-major index
        const TensorEntry& t = *victim->tensor;
        const int64_t firstDiff = chunk.offsets[0] * (t.numel() / t.shape[0]) + 1;
        for (const auto& rr : e.ranks) {
            EXPECT_EQ(rr.differing, rr.rank == 1 ? 1 : 0);
            EXPECT_EQ(rr.firstDiff, rr.rank == 1 ? firstDiff : -1);
        }
    }
    EXPECT_EQ(different, 1u);
}

TEST(Verify, AgainstReportsMissingAndUnexpectedKeys)
{
    const auto a = openCheckpoint(kData + "/adam_int.pt");
    const auto b = openCheckpoint(kData + "/sgd_momentum.pt");
    const VerifyReport r = verifyAgainst(*a, *b);
    EXPECT_FALSE(r.identical());
    EXPECT_GT(r.count(VerifyStatus::Missing), 0u); // exp_avg of Adam
    EXPECT_GT(r.count(VerifyStatus::Unexpected), 0u); // momentum_buffer of SGD
}

} // namespace
