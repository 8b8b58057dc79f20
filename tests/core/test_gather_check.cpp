// SPDX-License-Identifier: GPL-3.0-or-later
// Chunk-set validation (ShardLayout, check), assembly and gather: on fixtures made by real PyTorch, on damaged
// copies of them (a missing .distcp, a chunk cut short), and gather round trips through our own reader.
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/diff_report.h"
#include "optscope/analysis/gather.h"
#include "optscope/analysis/inspect_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/unsafe_globals.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/sha256.h"
#include "optscope/model/shard_layout.h"
#include "optscope/tensor/chunk_reader.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_stats.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

const std::string kData = OPTSCOPE_TEST_DATA;

const nlohmann::json& manifest()
{
    static const nlohmann::json m = [] {
        std::ifstream in(kData + "/manifest.json");
        return nlohmann::json::parse(in);
    }();
    return m;
}

TensorEntry tensorOf(
    std::vector<int64_t> shape, std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> chunks)
{
    TensorEntry t;
    t.dtype = DType::Float32;
    t.shape = std::move(shape);
    int rank = 0;
    for (auto& [off, size] : chunks) {
        TensorChunk c;
        c.rank = rank++;
        c.offsets = off;
        c.sizes = size;
        t.chunks.push_back(c);
    }
    return t;
}

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

bool hasFinding(const CheckReport& r, const std::string& code, const std::string& key = {})
{
    for (const auto& f : r.findings)
        if (std::string(f.name()) == code && (key.empty() || f.key == key)) return true;
    return false;
}

std::map<std::string, nlohmann::ordered_json> hashedEntries(const Checkpoint& cp)
{
    InspectOptions o;
    o.hash = true;
    auto report = inspectCheckpoint(cp, o);
    EXPECT_TRUE(report.ok);
    std::map<std::string, nlohmann::ordered_json> m;
    for (const auto& e : report.json["entries"])
        m[e["key"].get<std::string>()] = e;
    return m;
}

// ------------------------------------------------------------------------------------------- ShardLayout geometry

TEST(ShardLayout, UnevenDim0WithEmptyTrailingChunkIsComplete)
{
    // torch.chunk of 4 rows over 3 ranks: [0,2) [2,4) and an empty chunk at offset 4
    const auto L = ShardLayout::of(tensorOf({4, 5}, {{{0, 0}, {2, 5}}, {{2, 0}, {2, 5}}, {{4, 0}, {0, 5}}}));
    EXPECT_TRUE(L.complete());
    EXPECT_EQ(L.coveredElements, 20);
    EXPECT_TRUE(L.outOfBounds.empty());
}

TEST(ShardLayout, GapIsLocated)
{
    const auto L = ShardLayout::of(tensorOf({10, 3}, {{{0, 0}, {4, 3}}, {{6, 0}, {4, 3}}}));
    ASSERT_EQ(L.gaps.size(), 1u);
    EXPECT_EQ(L.gaps[0].offsets, (std::vector<int64_t> {4, 0}));
    EXPECT_EQ(L.gaps[0].sizes, (std::vector<int64_t> {2, 3}));
    EXPECT_EQ(L.coveredElements, 24);
    EXPECT_FALSE(L.complete());
}

TEST(ShardLayout, OverlapIsLocated)
{
    const auto L = ShardLayout::of(tensorOf({10}, {{{0}, {6}}, {{5}, {5}}}));
    ASSERT_EQ(L.overlaps.size(), 1u);
    EXPECT_EQ(L.overlaps[0].region.offsets, (std::vector<int64_t> {5}));
    EXPECT_EQ(L.overlaps[0].region.sizes, (std::vector<int64_t> {1}));
    EXPECT_TRUE(L.gaps.empty());
}

TEST(ShardLayout, OutOfBoundsAndWrongRank)
{
    const auto L = ShardLayout::of(tensorOf({4, 4}, {{{0, 0}, {2, 4}}, {{2, 0}, {3, 4}}, {{0}, {4}}}));
    EXPECT_EQ(L.outOfBounds, (std::vector<size_t> {1, 2}));
    EXPECT_FALSE(L.complete());
}

TEST(ShardLayout, TwoDimensionalGridWithHole)
{
    // 2x2 grid of 3x3 blocks on a 6x6 tensor, the bottom-right block missing
    const auto L = ShardLayout::of(tensorOf({6, 6}, {{{0, 0}, {3, 3}}, {{0, 3}, {3, 3}}, {{3, 0}, {3, 3}}}));
    ASSERT_EQ(L.gaps.size(), 1u);
    EXPECT_EQ(L.gaps[0].offsets, (std::vector<int64_t> {3, 3}));
    EXPECT_EQ(L.gaps[0].sizes, (std::vector<int64_t> {3, 3}));
    EXPECT_TRUE(L.overlaps.empty());
}

TEST(ShardLayout, ScalarNeedsExactlyOneChunk)
{
    EXPECT_TRUE(ShardLayout::of(tensorOf({}, {{{}, {}}})).complete());
    EXPECT_FALSE(ShardLayout::of(tensorOf({}, {})).complete());
    EXPECT_FALSE(ShardLayout::of(tensorOf({}, {{{}, {}}, {{}, {}}})).complete());
}

// ------------------------------------------------------------------------------------------- check on fixtures

TEST(Check, RealCheckpointsAreClean)
{
    for (const char* name : {"fsdp2_r2", "fsdp2_r3", "fsdp1_r2", "adam_int.pt", "adam_int_legacy.pt", "dtypes.pt",
             "adamw_fqn.pt", "fsdp1_raw_r2/optim_rank1.pt"}) {
        const auto r = checkCheckpoint(*openCheckpoint(kData + "/" + name));
        EXPECT_TRUE(r.clean()) << name << ": " << r.toJson().dump();
        EXPECT_GT(r.tensorsChecked, 0u) << name;
    }
}

TEST(Check, MissingDistcpIsReportedAndGatherRefuses)
{
    TempDir tmp;
    fs::copy(kData + "/fsdp2_r3", tmp.path / "ck", fs::copy_options::recursive);
    fs::remove(tmp.path / "ck" / "__1_0.distcp");
    const auto cp = openCheckpoint((tmp.path / "ck").string()); // the metadata is still browsable
    const auto r = checkCheckpoint(*cp);
    EXPECT_TRUE(hasFinding(r, "missing-file"));
    EXPECT_THROW(gatherCheckpoint(*cp, (tmp.path / "out.pt").string(), {}), Error);
    EXPECT_FALSE(fs::exists(tmp.path / "out.pt"));
    // no temporary left behind either
    for (const auto& f : fs::directory_iterator(tmp.path))
        EXPECT_EQ(f.path().filename(), "ck");
}

TEST(Check, DtensorsPickledWholeSayWhyTheOtherRanksRowsAreMissing)
{
    // dcp.save with DefaultSavePlanner(flatten_state_dict=False) on 2 ranks (tests/data/diag/dcp_noflat): "model" and
    // "optim" are one pickled item each, written by one rank, so half of every DTensor is gone. The item-level finding
    // says why; each tensor's gap is there too, and gather refuses
    const auto cp = openCheckpoint(kData + "/diag/dcp_noflat");
    const auto r = checkCheckpoint(*cp);
    std::set<std::string> explained;
    size_t gaps = 0;
    for (const auto& f : r.findings) {
        if (f.code != FindingCode::ChunkGap) continue;
        if (f.message.find("flatten_state_dict=False") != std::string::npos)
            explained.insert(f.key);
        else
            ++gaps;
    }
    EXPECT_EQ(explained, (std::set<std::string> {"model", "optim"}));
    EXPECT_EQ(gaps, 12u); // 4 model tensors and 2 moments of each
    TempDir tmp;
    EXPECT_THROW(gatherCheckpoint(*cp, (tmp.path / "out.pt").string(), {}), Error);
}

TEST(Check, ChunkCutShortIsReported)
{
    TempDir tmp;
    fs::copy(kData + "/fsdp2_r3", tmp.path / "ck", fs::copy_options::recursive);
    const auto victim = tmp.path / "ck" / "__2_0.distcp";
    fs::resize_file(victim, fs::file_size(victim) / 2);
    const auto cp = openCheckpoint((tmp.path / "ck").string());
    EXPECT_TRUE(cp->hasErrors());
    const auto r = checkCheckpoint(*cp);
    EXPECT_TRUE(hasFinding(r, "chunk-truncated"));
    // each cut chunk once (the reader's range check, with the rank and offsets the read adds), not twice
    std::set<std::pair<std::string, int>> seen;
    for (const auto& f : r.findings) {
        if (std::string(f.name()) == "chunk-truncated") {
            EXPECT_FALSE(f.key.empty());
            ASSERT_EQ(f.ranks.size(), 1u) << f.key << ": " << f.message;
            EXPECT_EQ(f.ranks[0], 2) << f.key;
            EXPECT_EQ(f.offsets.size(), 1u) << f.key;
            EXPECT_TRUE(seen.insert({f.key, f.ranks[0]}).second) << f.key << " twice: " << f.message;
        }
    }
}

/// flips one bit of the byte at @p offset of @p path
static void flipBit(const fs::path& path, uint64_t offset)
{
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
}

TEST(Gather, ValuesAWeightsOnlyLoadReadsAreWrittenOrNamedWithWhy)
{
    // torch.load(weights_only=True) of PyTorch 2.6 reads a complex, a bytearray, a sparse and a quantized tensor:
    // check finds no unsafe global among them (the quantization scheme was one); gather writes all four, the two
    // tensors as torch's rebuild calls over their indices and values, or storage (it left them out before, and said
    // a weights-only load refuses all four before that)
    const auto cp = openCheckpoint(kData + "/weights_only_values/values.pt");
    const CheckReport report = checkCheckpoint(*cp);
    EXPECT_FALSE(hasFinding(report, "unsafe-global")) << report.toJson().dump(1);
    TempDir tmp;
    const std::string out = (tmp.path / "out.pt").string();
    const GatherResult r = gatherCheckpoint(*cp, out, {});
    EXPECT_TRUE(r.leftOut.empty()) << r.leftOut[0];
    const auto back = openCheckpoint(out);
    for (const auto& [key, call] : {std::pair<std::string, std::string> {"coo", "torch._utils._rebuild_sparse_tensor"},
             {"q", "torch._utils._rebuild_qtensor"}}) {
        const Entry* e = back->find(key);
        ASSERT_NE(e, nullptr) << key;
        ASSERT_EQ(e->value->kind, PyKind::Object) << key;
        EXPECT_EQ(e->value->className(), call);
    }
    // as saved: the sparse tensor's layout, indices and values, the quantized one's scheme and storage (diff compares
    // the tensors and storages inside by their bytes)
    const DiffReport d = diffCheckpoints(*cp, *back, {});
    for (const auto& e : d.entries) {
        if (e.keyA == "coo" || e.keyA == "q") {
            EXPECT_EQ(e.status, DiffStatus::Equal) << e.keyA << ": " << e.reason;
        }
    }
    const Entry* c = back->find("cplx");
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(c->value->kind, PyKind::Complex);
    EXPECT_EQ(c->value->real, 1.5);
    EXPECT_EQ(c->value->imag, -2.0);
    const Entry* b = back->find("ba");
    ASSERT_NE(b, nullptr);
    ASSERT_EQ(b->value->kind, PyKind::ByteArray);
    EXPECT_EQ(b->value->text,
        std::string_view("a\xff"
                         "b",
            3));
    EXPECT_NE(back->find("dense"), nullptr);
}

/// gather of @p cp refused as Unsupported with @p why in its message, and nothing written; returns the message
std::string expectGatherRefused(const Checkpoint& cp, const std::string& why)
{
    TempDir tmp;
    const std::string out = (tmp.path / "out.pt").string();
    std::string message;
    try {
        gatherCheckpoint(cp, out, {});
        ADD_FAILURE() << "gathered";
    } catch (const Error& e) {
        message = e.what();
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
        EXPECT_NE(message.find(why), std::string::npos) << message;
    }
    EXPECT_FALSE(fs::exists(out));
    return message;
}

TEST(Gather, ALazyConjOrNegBitIsAppliedAsTorchLoadApplyIt)
{
    // torch.load applies a conj() or _neg_view bit to the stored bytes; every read here must see those values (it
    // read the unresolved bytes, then refused them). resolved.pt is PyTorch's own resolve_conj().resolve_neg() of
    // each tensor of more.pt: every dtype a bit applies to, both bits, a view sharing the plain tensor's storage,
    // strided and offset views; torch.save (the bit in its pickle) and DCP (in each item's own pickle)
    const auto resolved = openCheckpoint(kData + "/lazy_bits/resolved.pt");
    for (const std::string name : {"lazy_bits/more.pt", "lazy_bits/dcp_more"}) {
        SCOPED_TRACE(name);
        const auto cp = openCheckpoint(kData + "/" + name);
        const DiffReport d = diffCheckpoints(*cp, *resolved); // bit-identical: signed zeros and NaN signs too
        size_t compared = 0;
        for (const DiffEntry& e : d.entries) {
            if (e.status == DiffStatus::OnlyB) continue; // dcp_more leaves out the plain tensor
            EXPECT_EQ(e.status, DiffStatus::Equal) << e.keyA;
            ++compared;
        }
        EXPECT_GE(compared, 13u);
        // what gather writes holds the values resolved, without the bit
        TempDir tmp;
        const std::string out = (tmp.path / "out.pt").string();
        gatherCheckpoint(*cp, out, {});
        const auto back = openCheckpoint(out);
        for (const Entry& e : back->entries)
            if (e.isTensor()) {
                EXPECT_EQ(e.tensor->lazyBits, 0) << e.key;
            }
        const DiffReport written = diffCheckpoints(*back, *resolved);
        for (const DiffEntry& e : written.entries)
            if (e.status != DiffStatus::OnlyB) {
                EXPECT_EQ(e.status, DiffStatus::Equal) << e.keyA;
            }
    }
    // the first fixture's DCP and torch.save of the same views read alike
    EXPECT_TRUE(
        diffCheckpoints(*openCheckpoint(kData + "/lazy_bits/views.pt"), *openCheckpoint(kData + "/lazy_bits/dcp"))
            .equal);
    // a neg bit PyTorch itself cannot resolve (float8: "neg_cpu" not implemented) is refused, nothing written
    expectGatherRefused(*openCheckpoint(kData + "/lazy_bits/unreadable.pt"), "its values are not read");
}

TEST(Gather, AMetaTensorIsRefusedAsWhatItIs)
{
    // a meta-device tensor stores no bytes: gather said "no chunk covers [0:3, 0:4]", as of a checkpoint with a gap
    const auto cp = openCheckpoint(kData + "/partial/meta.pt");
    const std::string why = expectGatherRefused(*cp, "was saved without data");
    EXPECT_EQ(why.find("no chunk covers"), std::string::npos) << why;
}

TEST(Check, ALazyConjOrNegBitIsAnInfoPerTensor)
{
    // one lazy-bit finding per tensor with the bit (a DCP item's bit is in its own pickle, found as check reads it:
    // with its rank); an info, as every read applies it
    for (const std::string name : {"lazy_bits/views.pt", "lazy_bits/dcp"}) {
        SCOPED_TRACE(name);
        const auto cp = openCheckpoint(kData + "/" + name);
        const CheckReport r = checkCheckpoint(*cp);
        std::set<std::string> keys;
        for (const Finding& f : r.findings)
            if (f.code == FindingCode::LazyBit) {
                EXPECT_TRUE(keys.insert(f.key).second) << f.key; // once per tensor
                EXPECT_EQ(f.severity, Severity::Info);
                if (name == "lazy_bits/dcp") {
                    EXPECT_EQ(f.ranks, std::vector<int> {0});
                }
            }
        EXPECT_EQ(keys, (std::set<std::string> {"zc", "neg"})) << r.toJson().dump(1);
    }
}

TEST(Check, FilesSavedWithoutCrcsAreNotCorrupt)
{
    // torch.serialization.set_crc32_options(False) stores CRC-32 0 in every record; PyTorch reads such files as any
    // other, so check must not call every record changed (it did: a crc-mismatch error per record)
    for (const std::string name : {"no_crc/adam.pt", "no_crc/dcp"}) {
        SCOPED_TRACE(name);
        const auto cp = openCheckpoint(kData + "/" + name);
        const CheckReport r = checkCheckpoint(*cp);
        EXPECT_FALSE(hasFinding(r, "crc-mismatch")) << r.toJson().dump(1);
        EXPECT_FALSE(cp->entries.empty());
    }
}

TEST(Check, AFlippedBitInTensorBytesIsACrcMismatch)
{
    // torch.load reads such a file without a word (checked with PyTorch 2.6); only the CRC-32 the writer stored
    // in the zip directory tells. A torch.save file, and a DCP item (an archive inside a .distcp file)
    for (const std::string name : {"adam_fp32.pt", "fsdp2_r3"}) {
        SCOPED_TRACE(name);
        TempDir tmp;
        const fs::path src
            = name == "fsdp2_r3" ? fs::path(kData + "/fsdp2_r3") : fs::path(kData + "/dtype_targets/" + name);
        fs::copy(src, tmp.path / "ck", fs::copy_options::recursive);
        EXPECT_FALSE(hasFinding(checkCheckpoint(*openCheckpoint((tmp.path / "ck").string())), "crc-mismatch"));
        std::string key, file;
        uint64_t at = 0;
        {
            const auto cp = openCheckpoint((tmp.path / "ck").string());
            for (const auto& e : cp->entries) {
                if (!e.isTensor() || e.tensor->numel() < 4) continue;
                const TensorChunk c = e.tensor->chunks[0];
                const ChunkData d = ChunkReader::resolveAsStored(*cp, e, c);
                key = e.key;
                file = d.file->path();
                at = d.file->offsetOf(d.storage) + 2;
                break;
            }
        }
        ASSERT_FALSE(key.empty());
        flipBit(file, at);
        const auto r = checkCheckpoint(*openCheckpoint((tmp.path / "ck").string()));
        ASSERT_TRUE(hasFinding(r, "crc-mismatch", key)) << r.toJson().dump(1);
        CheckOptions quick;
        quick.checksums = false;
        EXPECT_FALSE(hasFinding(checkCheckpoint(*openCheckpoint((tmp.path / "ck").string()), quick), "crc-mismatch"));
    }
}

TEST(Gather, ADamagedDcpItemNamesItsTensor)
{
    // a DCP item that is no archive (the .metadata of another save, offsets shifted): the error says which tensor
    // the item holds, not only the file and byte range
    TempDir tmp;
    fs::copy(kData + "/fsdp2_r3", tmp.path / "ck", fs::copy_options::recursive);
    std::string key, file;
    uint64_t at = 0;
    {
        const auto cp = openCheckpoint((tmp.path / "ck").string());
        for (const auto& e : cp->entries)
            if (e.isTensor() && !e.tensor->chunks.empty()) {
                key = e.key;
                file = cp->files->absolute(e.tensor->chunks.fileOf(0));
                at = e.tensor->chunks.byteOffsetOf(0);
                break;
            }
    }
    ASSERT_FALSE(key.empty());
    flipBit(file, at); // "PK\3\4" no more
    try {
        gatherCheckpoint(*openCheckpoint((tmp.path / "ck").string()), (tmp.path / "out.pt").string(), {});
        FAIL() << "gathered a damaged item";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(tmp.path / "out.pt"));
}

TEST(Check, StepDifferingBetweenParametersIsReported)
{
    // real Adam state where parameter 3 had no gradient on the second step
    const auto r = checkCheckpoint(*openCheckpoint(kData + "/adam_step_mismatch.pt"));
    ASSERT_TRUE(hasFinding(r, "step-inconsistent", "optim"));
    for (const auto& f : r.findings) {
        if (std::string(f.name()) == "step-inconsistent") {
            EXPECT_NE(f.message.find("step 1: 1 (3)"), std::string::npos) << f.message;
            EXPECT_NE(f.message.find("step 2: 3 (0, ...)"), std::string::npos) << f.message;
        }
    }
}

TEST(Check, EmptyOptimizerStateIsReported)
{
    const auto r = checkCheckpoint(*openCheckpoint(kData + "/adam_empty_state.pt"));
    EXPECT_TRUE(hasFinding(r, "empty-state", "optim"));
}

TEST(Check, MetadataOnlyModeReadsNoChunks)
{
    CheckOptions o;
    o.readChunks = false;
    const auto r = checkCheckpoint(*openCheckpoint(kData + "/fsdp2_r3"), o);
    EXPECT_TRUE(r.clean());
    EXPECT_EQ(r.chunksChecked, 0u);
}

// ---------------------------------------------------------------------------- real checkpoints, round 3 (issue 27)

nlohmann::json fixtureJson(const std::string& rel)
{
    std::ifstream in(kData + "/" + rel);
    return nlohmann::json::parse(in);
}

TEST(Check, BytesIOValuesOfADcpCheckpointAreInformation)
{
    // torchtitan's TrainState keeps its losses as torch.save'd bytes in io.BytesIO values (tests/data/torchtitan,
    // real dcp.save): DCP saves each with torch.save, and dcp.load reads it back with torch.load(weights_only=False)
    // (the generator recorded PyTorch restoring them): information, not an unsafe global
    const auto expected = fixtureJson("torchtitan/expected.json");
    EXPECT_EQ(expected["dcp_load_train_state"]["global_avg_losses"], nlohmann::json({2.5, 2.25}));
    const auto cp = openCheckpoint(kData + "/torchtitan/dcp");
    const CheckReport r = checkCheckpoint(*cp);
    EXPECT_TRUE(r.clean()) << r.toJson().dump(1);
    std::set<std::string> keys;
    for (const auto& f : r.findings) {
        EXPECT_NE(f.code, FindingCode::UnsafeGlobal) << f.message;
        if (f.code != FindingCode::DcpDataGlobal) continue;
        keys.insert(f.key);
        EXPECT_EQ(f.severity, Severity::Info);
        EXPECT_NE(f.message.find("'_io.BytesIO'"), std::string::npos) << f.message;
        EXPECT_NE(f.message.find("weights_only=False"), std::string::npos) << f.message;
        EXPECT_NE(f.message.find("add_safe_globals([io.BytesIO])"), std::string::npos) << f.message;
    }
    EXPECT_EQ(keys,
        (std::set<std::string> {
            "train_state.global_avg_losses", "train_state.global_max_losses", "train_state.log_steps"}));
    // the views keep them apart from the unsafe globals (no red banner, no marked rows)
    const UnsafeGlobals u = findUnsafeGlobals(*cp);
    EXPECT_TRUE(u.classPaths.empty());
    EXPECT_TRUE(u.byKey.empty());
    EXPECT_EQ(u.dataClassPaths, std::vector<std::string> {"_io.BytesIO"});
    // the rest of it is as saved: the scheduler's state, the RNG state, the train state's step
    for (const char* key : {"lr_scheduler.last_epoch", "rng", "train_state.step", "optimizer.state.weight.exp_avg"})
        EXPECT_NE(cp->find(key), nullptr) << key;
    // diagnose reports the structure as check does: nothing to act on
    EXPECT_FALSE(diagnoseCheckpoint(*cp, nullptr).hasProblems());
}

TEST(Check, BytesIOInATorchSaveFileStaysAWarningWithPyTorchsRefusal)
{
    // the same state dict in one torch.save file: torch.load(weights_only=True), PyTorch's default, refuses it
    // (the generator recorded PyTorch's error), so it is a warning, which says so
    const auto expected = fixtureJson("torchtitan/expected.json")["torchtitan.pt"];
    ASSERT_EQ(expected["weights_only_true"], "UnpicklingError");
    const std::string refusal = expected["error"];
    const CheckReport r = checkCheckpoint(*openCheckpoint(kData + "/torchtitan/torchtitan.pt"));
    EXPECT_FALSE(r.clean());
    size_t unsafe = 0;
    for (const auto& f : r.findings) {
        EXPECT_NE(f.code, FindingCode::DcpDataGlobal);
        if (f.code != FindingCode::UnsafeGlobal) continue;
        ++unsafe;
        EXPECT_EQ(f.severity, Severity::Warning);
        EXPECT_NE(f.message.find("pure data"), std::string::npos) << f.message;
        EXPECT_NE(f.message.find("weights_only=True"), std::string::npos) << f.message;
        EXPECT_NE(f.pytorchError.find(refusal), std::string::npos) << f.pytorchError << "\n vs " << refusal;
        EXPECT_NE(f.fix.find("safe_globals([io.BytesIO])"), std::string::npos) << f.fix;
    }
    EXPECT_EQ(unsafe, 3u);
    // and a global that would run code stays a plain unsafe-global warning in a DCP checkpoint too
    EXPECT_FALSE(isLoaderDataClass(CheckpointFormat::Dcp, "posix.system"));
    EXPECT_FALSE(isLoaderDataClass(CheckpointFormat::TorchSave, "_io.BytesIO"));
    EXPECT_TRUE(isLoaderDataClass(CheckpointFormat::Dcp, "_io.BytesIO"));
}

TEST(Check, NonFiniteValuesAreCountedPerKeyAsPyTorchCountsThem)
{
    // NaN and +-inf set in float16 and bfloat16 weights and in AdamW's moments after two steps
    // (tests/data/nonfinite: one torch.save and a 2-rank FSDP2 DCP of the same run); expected.json holds
    // torch.isnan / isposinf / isneginf's sums per key
    const auto expected = fixtureJson("nonfinite/expected.json");
    for (const char* name : {"nonfinite.pt", "nonfinite_dcp_r2"}) {
        SCOPED_TRACE(name);
        const auto cp = openCheckpoint(kData + "/nonfinite/" + name);
        const CheckReport r = checkCheckpoint(*cp);
        std::map<std::string, const Finding*> found;
        for (const auto& f : r.findings)
            if (f.code == FindingCode::NonFinite) {
                EXPECT_EQ(f.severity, Severity::Warning);
                EXPECT_TRUE(found.emplace(f.key, &f).second) << "two findings for " << f.key;
            }
        const auto& want = expected[name];
        ASSERT_EQ(found.size(), want.size()) << r.toJson().dump(1);
        for (const auto& [key, c] : want.items()) {
            SCOPED_TRACE(key);
            ASSERT_TRUE(found.count(key));
            const Finding& f = *found.at(key);
            const auto j = f.toJson()["counts"];
            for (const char* n : {"numel", "nan", "posinf", "neginf"})
                EXPECT_EQ(j[n].get<int64_t>(), c[n].get<int64_t>()) << n;
            if (c["nan"].get<int64_t>() > 0) {
                EXPECT_NE(f.message.find(std::to_string(c["nan"].get<int64_t>()) + " NaN"), std::string::npos)
                    << f.message;
            }
            EXPECT_NE(f.message.find(c["dtype"].get<std::string>()), std::string::npos) << f.message;
            // the statistics count them by the same rule
            const TensorStats s = computeTensorStats(*cp, *cp->find(key), 0);
            EXPECT_EQ(s.nanCount, c["nan"].get<int64_t>());
            EXPECT_EQ(s.posInfCount, c["posinf"].get<int64_t>());
            EXPECT_EQ(s.negInfCount, c["neginf"].get<int64_t>());
            EXPECT_EQ(s.infCount, c["posinf"].get<int64_t>() + c["neginf"].get<int64_t>());
        }
        // the sharded copy: each finding names the ranks whose chunks hold them
        if (std::string(name) == "nonfinite_dcp_r2") {
            EXPECT_EQ(found.at("model.1.bias")->ranks, std::vector<int> {1}); // bias [2] on 2 ranks: index 1
            EXPECT_EQ(found.at("model.0.weight")->ranks, (std::vector<int> {0, 1}));
        }
        // metadata only: nothing read, nothing counted
        CheckOptions noData;
        noData.readChunks = false;
        EXPECT_FALSE(hasFinding(checkCheckpoint(*cp, noData), "non-finite"));
    }
    // finite checkpoints stay clean
    EXPECT_FALSE(hasFinding(checkCheckpoint(*openCheckpoint(kData + "/fsdp2_r3")), "non-finite"));
}

TEST(Check, NonFiniteCountsFollowTheDtypesBitPatterns)
{
    // one rule for every reader of values: the IEEE patterns of float16 / bfloat16 / float32 / float64, float8's own
    const uint16_t half[] = {0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x3c00, 0x0000, 0x7bff};
    NonFiniteCounts c = countNonFinite(reinterpret_cast<const uint8_t*>(half), 7, DType::Float16);
    EXPECT_EQ(std::make_tuple(c.numel, c.nan, c.posInf, c.negInf),
        std::make_tuple(int64_t(7), int64_t(2), int64_t(1), int64_t(1)));
    const uint16_t bf16[] = {0x7f80, 0xff80, 0x7fc0, 0x3f80};
    c = countNonFinite(reinterpret_cast<const uint8_t*>(bf16), 4, DType::BFloat16);
    EXPECT_EQ(std::make_tuple(c.nan, c.posInf, c.negInf), std::make_tuple(int64_t(1), int64_t(1), int64_t(1)));
    const float f32[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(), 1e38f};
    c = countNonFinite(reinterpret_cast<const uint8_t*>(f32), 3, DType::Float32);
    EXPECT_EQ(std::make_tuple(c.nan, c.posInf, c.negInf), std::make_tuple(int64_t(1), int64_t(0), int64_t(1)));
    const double f64[] = {std::numeric_limits<double>::infinity(), -0.0};
    c = countNonFinite(reinterpret_cast<const uint8_t*>(f64), 2, DType::Float64);
    EXPECT_EQ(std::make_tuple(c.nan, c.posInf, c.negInf), std::make_tuple(int64_t(0), int64_t(1), int64_t(0)));
    // float8_e4m3fn has no inf: 0x7f and 0xff are NaN, 0x7e is 448
    const uint8_t e4m3[] = {0x7f, 0xff, 0x7e};
    c = countNonFinite(e4m3, 3, DType::Float8_e4m3fn);
    EXPECT_EQ(std::make_tuple(c.nan, c.posInf, c.negInf), std::make_tuple(int64_t(2), int64_t(0), int64_t(0)));
    // integers hold none
    const int32_t ints[] = {-1, 0x7f800000};
    EXPECT_FALSE(countNonFinite(reinterpret_cast<const uint8_t*>(ints), 2, DType::Int32).any());
}

TEST(Check, Fsdp1ShardedRankFilesWithARankWithoutRows)
{
    // FSDP1 SHARDED_STATE_DICT of a Linear(3, 4) on 3 ranks (tests/data/fsdp1_sharded_r3, one torch.save per rank
    // of ShardedTensors): 4 rows are chunked 2 + 2 + 0, so rank 2's file holds no local shard, and its metadata
    // lists ranks 0 and 1 as holding them. Together the files are the whole state, not six tensors without data.
    const auto cp = openCheckpoint(kData + "/fsdp1_sharded_r3");
    EXPECT_EQ(cp->format, CheckpointFormat::TorchSaveRanks);
    for (const auto& w : cp->warnings)
        EXPECT_NE(w.code, ReaderCode::TensorWithoutData) << w.key << ": " << w.message;
    const CheckReport r = checkCheckpoint(*cp);
    EXPECT_TRUE(r.clean()) << r.toJson().dump(1);
    const Entry* weight = cp->find("model.weight");
    ASSERT_NE(weight, nullptr);
    EXPECT_EQ(weight->tensor->shape, (std::vector<int64_t> {4, 3}));
    EXPECT_EQ(weight->tensor->ranks(), (std::vector<int> {0, 1}));
    EXPECT_FALSE(weight->tensor->shardsElsewhere);

    // gather writes PyTorch's FULL_STATE_DICT of the same run (fsdp1_sharded_r3_full.pt), value for value (the
    // interop test loads it in PyTorch too)
    TempDir tmp;
    const std::string out = (tmp.path / "full.pt").string();
    gatherCheckpoint(*cp, out, {});
    const DiffReport d = diffCheckpoints(*openCheckpoint(out), *openCheckpoint(kData + "/fsdp1_sharded_r3_full.pt"));
    EXPECT_TRUE(d.equal) << d.toJson().dump(1);
    EXPECT_EQ(d.count(DiffStatus::Equal), d.entries.size());

    // rank 2's file on its own holds none of each tensor: said as the gap it is, naming where the data is
    const auto rank2 = openCheckpoint(kData + "/fsdp1_sharded_r3/rank2.pt");
    for (const auto& w : rank2->warnings)
        EXPECT_NE(w.code, ReaderCode::TensorWithoutData) << w.key;
    ASSERT_TRUE(rank2->find("model.weight"));
    EXPECT_TRUE(rank2->find("model.weight")->tensor->shardsElsewhere);
    const CheckReport alone = checkCheckpoint(*rank2);
    EXPECT_FALSE(hasFinding(alone, "tensor-without-data")) << alone.toJson().dump(1);
    EXPECT_TRUE(hasFinding(alone, "chunk-gap", "model.weight"));
    // a meta-device tensor still is one without data
    EXPECT_TRUE(hasFinding(checkCheckpoint(*openCheckpoint(kData + "/partial/meta.pt")), "tensor-without-data"));
}

// ------------------------------------------------------------------------------------------- assembly and gather

TEST(Assembler, DcpTensorsMatchTorchHashes)
{
    // the 3-rank FSDP2 checkpoint has an empty trailing chunk (head.weight: 4 rows on 3 ranks)
    const auto cp = openCheckpoint(kData + "/fsdp2_r3");
    const Entry* e = cp->find("model.blocks.0.head.weight");
    ASSERT_NE(e, nullptr);
    std::vector<uint8_t> bytes;
    TensorAssembler(*cp, *e, 24).stream([&](const uint8_t* p, size_t n) { bytes.insert(bytes.end(), p, p + n); });
    EXPECT_EQ(bytes.size(), 4u * 5u * 4u);
    EXPECT_EQ(hashTensor(*cp, *e), Sha256::hex(bytes.data(), bytes.size()));
    // a tiny block size forces many blocks; the bytes must not depend on it
    std::vector<uint8_t> again;
    TensorAssembler(*cp, *e, 1).stream([&](const uint8_t* p, size_t n) { again.insert(again.end(), p, p + n); });
    EXPECT_EQ(again, bytes);
}

TEST(Assembler, ElementRangesAreTheirBoxesInOrder)
{
    // every range of a few shapes: the boxes, read one after the other, are exactly the range's elements in row-major
    // order, and never more than 2 x dims - 1 of them
    for (const std::vector<int64_t>& shape :
        std::vector<std::vector<int64_t>> {{7}, {4, 5}, {3, 4, 5}, {2, 1, 3, 4}, {2, 3, 0, 2}}) {
        int64_t numel = 1;
        for (auto s : shape)
            numel *= s;
        for (int64_t first = 0; first <= numel; ++first)
            for (int64_t count = 0; first + count <= numel; ++count) {
                std::vector<int64_t> got;
                size_t boxes = 0;
                elementRangeBoxes(shape, first, count, [&](const auto& offsets, const auto& sizes) {
                    ++boxes;
                    // the box's elements in row-major order, as flat indices of the tensor
                    std::vector<int64_t> at(offsets);
                    int64_t n = 1;
                    for (auto s : sizes)
                        n *= s;
                    for (int64_t i = 0; i < n; ++i) {
                        int64_t flat = 0;
                        for (size_t d = 0; d < shape.size(); ++d)
                            flat = flat * shape[d] + at[d];
                        got.push_back(flat);
                        for (size_t d = shape.size(); d-- > 0;) {
                            if (++at[d] < offsets[d] + sizes[d]) break;
                            at[d] = offsets[d];
                        }
                    }
                });
                std::vector<int64_t> want(static_cast<size_t>(count));
                std::iota(want.begin(), want.end(), first);
                ASSERT_EQ(got, want) << shapeText(shape) << " " << first << "+" << count;
                EXPECT_LE(boxes, 2 * shape.size() - 1);
            }
    }
    // read from a file: a page of a permuted 3-D tensor is the same bytes as that part of the whole
    const auto cp = openCheckpoint(kData + "/dtypes.pt");
    const Entry* e = cp->find("layouts.permuted3d");
    ASSERT_NE(e, nullptr);
    std::vector<uint8_t> whole, page;
    TensorAssembler(*cp, *e).stream([&](const uint8_t* p, size_t n) { whole.insert(whole.end(), p, p + n); });
    const size_t elem = dtypeSize(e->tensor->dtype);
    TensorAssembler(*cp, *e).streamElements(
        7, 41, [&](const uint8_t* p, size_t n) { page.insert(page.end(), p, p + n); });
    EXPECT_EQ(page, std::vector<uint8_t>(whole.begin() + 7 * elem, whole.begin() + 48 * elem));
    EXPECT_THROW(TensorAssembler(*cp, *e).streamElements(50, 11, [](const uint8_t*, size_t) {}), Error);
}

TEST(Assembler, RowsLargerThanABlockAreCutIntoBoxes)
{
    // non-contiguous tensors (transposed, stride-0 expanded, permuted in three dims) are assembled through a buffer;
    // with blocks smaller than one row, a row is cut into boxes (one dim-1 run or one index of the middle dims at a
    // time) and the bytes must still be exactly torch's (the manifest hashes), with no buffer larger than a block
    const auto cp = openCheckpoint(kData + "/dtypes.pt");
    const nlohmann::json& m = manifest()["dtypes.pt"];
    size_t checked = 0;
    for (const auto& me : m["entries"]) {
        const std::string key = me["key"];
        if (key.rfind("layouts.", 0) != 0 || me["type"] != "tensor") continue;
        const Entry* e = cp->find(key);
        ASSERT_NE(e, nullptr) << key;
        for (size_t block : {size_t(1), size_t(4), size_t(7), size_t(12), size_t(20), size_t(64) << 20}) {
            Sha256 h;
            size_t largest = 0;
            TensorAssembler(*cp, *e, block).stream([&](const uint8_t* p, size_t n) {
                h.update(p, n);
                largest = std::max(largest, n);
            });
            EXPECT_EQ(h.hexDigest(), me["sha256"].get<std::string>()) << key << " with blocks of " << block;
            const bool contiguous = ChunkReader::resolve(*cp, *e, e->tensor->chunks[0]).isContiguous();
            if (!contiguous) { // the zero-copy path hands out stored rows as they are
                EXPECT_LE(largest, std::max<size_t>(block, dtypeSize(e->tensor->dtype)))
                    << key << " with blocks of " << block;
            }
        }
        ++checked;
    }
    EXPECT_GE(checked, 5u);
}

class GatherRoundTrip : public ::testing::TestWithParam<std::string>
{ };

TEST_P(GatherRoundTrip, OutputReadsBackWithIdenticalContent)
{
    TempDir tmp;
    const auto src = openCheckpoint(kData + "/" + GetParam());
    const std::string out = (tmp.path / "gathered.pt").string();
    const GatherResult r = gatherCheckpoint(*src, out, {});
    EXPECT_EQ(r.device, "cpu");
    const auto back = openCheckpoint(out);
    EXPECT_EQ(back->format, CheckpointFormat::TorchSave);
    const auto a = hashedEntries(*src);
    const auto b = hashedEntries(*back);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [key, e] : a) {
        SCOPED_TRACE(key);
        ASSERT_TRUE(b.count(key));
        const auto& g = b.at(key);
        EXPECT_EQ(e["path"], g["path"]);
        EXPECT_EQ(e["type"], g["type"]);
        if (e["type"] == "tensor") {
            EXPECT_EQ(e["dtype"], g["dtype"]);
            EXPECT_EQ(e["shape"], g["shape"]);
            EXPECT_EQ(e["sha256"], g["sha256"]);
        } else {
            EXPECT_EQ(e["value"], g["value"]);
        }
    }
    // the gathered file has the same findings as its input (frozen parameters stay frozen), and no error
    auto codes = [](const CheckReport& r) {
        std::set<std::string> c;
        for (const auto& f : r.findings)
            c.insert(f.name());
        return c;
    };
    const CheckReport again = checkCheckpoint(*back);
    for (const auto& f : again.findings)
        EXPECT_NE(f.severity, Severity::Error) << f.name() << ": " << f.message;
    EXPECT_EQ(codes(again), codes(checkCheckpoint(*src)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GatherRoundTrip,
    ::testing::Values("fsdp2_r2", "fsdp2_r3", "fsdp1_r2", "adam_int.pt", "adam_int_legacy.pt", "adam_bf16.pt",
        "adamw_fqn.pt", "compiled.pt", "dtypes.pt", "sgd_momentum.pt"),
    [](const ::testing::TestParamInfo<std::string>& info) {
        std::string n = info.param;
        for (auto& c : n)
            if (!isalnum(static_cast<unsigned char>(c))) c = '_';
        return n;
    });

TEST(Gather, OnlyPrefixSelectsAWholeSubtree)
{
    TempDir tmp;
    const auto src = openCheckpoint(kData + "/fsdp2_r3");
    GatherOptions o;
    o.onlyPrefix = "optim.state.blocks.0.qkv.weight";
    const std::string out = (tmp.path / "part.pt").string();
    gatherCheckpoint(*src, out, o);
    const auto back = openCheckpoint(out);
    ASSERT_EQ(back->entries.size(), 3u); // exp_avg, exp_avg_sq, step
    for (const auto& e : back->entries)
        EXPECT_EQ(e.key.rfind("optim.state.blocks.0.qkv.weight.", 0), 0u) << e.key;
    o.onlyPrefix = "optim.state.blocks.0.qkv.weigh"; // not a key boundary
    EXPECT_THROW(gatherCheckpoint(*src, out, o), Error);
}

TEST(Gather, IdKeyedOptimizerKeepsIntegerKeys)
{
    // a torch.save source keeps its key types: state ids stay ints (optimizer.load_state_dict needs them)
    TempDir tmp;
    const std::string out = (tmp.path / "ids.pt").string();
    gatherCheckpoint(*openCheckpoint(kData + "/adam_int.pt"), out, {});
    const auto back = openCheckpoint(out);
    const PyValue* state = back->root->get("state");
    ASSERT_NE(state, nullptr);
    ASSERT_GT(state->size(), 0u);
    EXPECT_EQ(state->dictKey(0)->kind, PyKind::Int);
}

TEST(Gather, CudaWithoutGpuIsAClearError)
{
    TempDir tmp;
    GatherOptions o;
    o.device = ComputeDevice::Cuda;
    const auto src = openCheckpoint(kData + "/adam_int.pt");
    try {
        gatherCheckpoint(*src, (tmp.path / "x.pt").string(), o);
        SUCCEED() << "a GPU is present";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
        EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
    }
}

} // namespace
