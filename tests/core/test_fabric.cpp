// SPDX-License-Identifier: GPL-3.0-or-later
// Lightning Fabric's sharded FSDP checkpoint (tests/data/fabric/fsdp_sharded, make_fixtures.py fabric: a DCP folder of
// 2 ranks plus meta.pt, the user's state that is not a module or optimizer). meta.pt's keys are part of the
// checkpoint, at the top level after the DCP part's; gather writes them where Fabric's consolidation puts them
// (expected.json: PyTorch's flattening of _load_distributed_checkpoint's dict); reshard copies meta.pt byte for byte
// and keeps its keys out of the DCP part; verify stays identical.
#include "optscope/analysis/checkpoint_fix.h"
#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/gather.h"
#include "optscope/analysis/inspect_report.h"
#include "optscope/analysis/reshard.h"
#include "optscope/analysis/verify_report.h"
#include "optscope/formats/checkpoint_loader.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

const std::string kFabric = std::string(OPTSCOPE_TEST_DATA) + "/fabric";
const std::string kSource = kFabric + "/fsdp_sharded";

class TempDir
{
public:
    TempDir()
    {
        std::random_device rd;
        path = fs::temp_directory_path() / ("optscope-fabric-test-" + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
    fs::path path;
};

std::string fileBytes(const fs::path& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) return "<missing " + path.string() + ">";
    return std::string(std::istreambuf_iterator<char>(in), {});
}

nlohmann::ordered_json expected()
{
    std::ifstream in(kFabric + "/expected.json");
    return nlohmann::ordered_json::parse(in);
}

std::vector<std::string> keysOf(const Checkpoint& cp)
{
    std::vector<std::string> keys;
    for (const auto& e : cp.entries)
        keys.push_back(e.key);
    return keys;
}

} // namespace

TEST(Fabric, MetaPtKeysAreReadAtTheTopLevelAfterTheDcpPart)
{
    const auto cp = openCheckpoint(kSource);
    const auto want = expected();
    EXPECT_EQ(cp->format, CheckpointFormat::Dcp);
    EXPECT_NE(cp->formatDetail.find("Lightning Fabric meta.pt"), std::string::npos) << cp->formatDetail;
    for (const auto& w : cp->warnings)
        ADD_FAILURE() << readerCodeName(w.code) << ": " << w.message;
    ASSERT_EQ(cp->companionFiles.size(), 1u);
    EXPECT_EQ(cp->companionFiles[0].file, "meta.pt");
    EXPECT_EQ(cp->companionFiles[0].keys, want["meta_keys"].get<std::vector<std::string>>());

    // every key Fabric's consolidation holds, and the meta.pt ones after the DCP part's, in meta.pt's order
    std::vector<std::string> consolidated;
    for (const auto& e : want["consolidated"])
        consolidated.push_back(e["key"].get<std::string>());
    std::vector<std::string> got = keysOf(*cp);
    std::vector<std::string> sortedGot = got, sortedWant = consolidated;
    std::sort(sortedGot.begin(), sortedGot.end());
    std::sort(sortedWant.begin(), sortedWant.end());
    EXPECT_EQ(sortedGot, sortedWant);
    const auto firstMeta = std::find(got.begin(), got.end(), "scheduler.base_lrs");
    ASSERT_NE(firstMeta, got.end());
    EXPECT_EQ(std::vector<std::string>(firstMeta, got.end()),
        std::vector<std::string>(
            std::find(consolidated.begin(), consolidated.end(), "scheduler.base_lrs"), consolidated.end()));

    const Entry* it = cp->find("iteration");
    ASSERT_TRUE(it && !it->isTensor());
    EXPECT_EQ(it->value->kind, PyKind::Int);
    EXPECT_EQ(it->value->integer, 2);
    const Entry* best = cp->find("best_loss");
    ASSERT_TRUE(best && best->isTensor());
    EXPECT_EQ(best->tensor->shape, std::vector<int64_t>({2}));
    ASSERT_EQ(cp->companionOf(*best), &cp->companionFiles[0]);
    EXPECT_EQ(cp->companionOf(*cp->find("model.0.weight")), nullptr);
}

TEST(Fabric, GatherWritesMetaPtKeysWhereFabricsConsolidationPutsThem)
{
    const auto cp = openCheckpoint(kSource);
    TempDir tmp;
    const std::string out = (tmp.path / "consolidated.pt").string();
    const GatherResult r = gatherCheckpoint(*cp, out, {});
    EXPECT_TRUE(r.leftOut.empty());
    InspectOptions o;
    o.hash = true;
    const InspectReport report = inspectCheckpoint(*openCheckpoint(out), o);
    const auto want = expected()["consolidated"];
    const auto& got = report.json["entries"];
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        SCOPED_TRACE(want[i]["key"].get<std::string>());
        EXPECT_EQ(got[i]["key"], want[i]["key"]); // the same order: DCP part, then meta.pt's keys
        EXPECT_EQ(got[i]["type"], want[i]["type"]);
        if (want[i]["type"] == "tensor") {
            EXPECT_EQ(got[i]["dtype"], want[i]["dtype"]);
            EXPECT_EQ(got[i]["shape"], want[i]["shape"]);
            EXPECT_EQ(got[i]["sha256"], want[i]["sha256"]);
        } else {
            EXPECT_EQ(got[i]["value"], want[i]["value"]);
        }
    }
}

TEST(Fabric, ReshardCopiesMetaPtAndKeepsItsKeysOutOfTheDcpPart)
{
    const auto src = openCheckpoint(kSource);
    const std::string before = fileBytes(fs::path(kSource) / "meta.pt");
    for (const auto layout : {ShardingStyle::Fsdp2, ShardingStyle::Fsdp1}) {
        TempDir tmp;
        const fs::path out = tmp.path / "rs3";
        ReshardOptions o;
        o.worldSize = 3;
        o.layout = layout;
        const DcpWriteStats s = reshardCheckpoint(*src, out.string(), o);
        EXPECT_EQ(s.copied, std::vector<std::string>({"meta.pt"}));
        EXPECT_EQ(fileBytes(out / "meta.pt"), before);
        const auto back = openCheckpoint(out.string());
        EXPECT_EQ(keysOf(*back), keysOf(*src));
        for (const auto& w : back->warnings)
            ADD_FAILURE() << readerCodeName(w.code) << ": "
                          << w.message; // a key in both parts would be a duplicate-key
        // the DCP part alone holds no key of meta.pt
        fs::remove(out / "meta.pt");
        const auto dcpOnly = openCheckpoint(out.string());
        EXPECT_TRUE(dcpOnly->companionFiles.empty());
        EXPECT_EQ(dcpOnly->find("iteration"), nullptr);
        EXPECT_EQ(dcpOnly->find("scheduler.last_epoch"), nullptr);
        EXPECT_NE(dcpOnly->find("model.0.weight"), nullptr);
    }
    EXPECT_EQ(fileBytes(fs::path(kSource) / "meta.pt"), before); // the input is never modified
}

TEST(Fabric, DryRunSaysMetaPtIsCopied)
{
    ReshardOptions o;
    o.worldSize = 2;
    const ReshardSummary s = summarizeReshard(*openCheckpoint(kSource), o);
    EXPECT_EQ(s.copied, std::vector<std::string>({"meta.pt"}));
}

TEST(Fabric, VerifyByLoadIsIdentical)
{
    const auto src = openCheckpoint(kSource);
    for (int m : {1, 3}) {
        VerifyOptions o;
        o.worldSize = m;
        const VerifyReport r = verifyByLoad(*src, o);
        EXPECT_TRUE(r.identical()) << "M=" << m << ": " << r.toJson().dump().substr(0, 2000);
        EXPECT_EQ(r.entries.size(), src->entries.size());
    }
}

TEST(Fabric, FixCopiesMetaPtAsReshardDoes)
{
    const auto src = openCheckpoint(kSource);
    TempDir tmp;
    const fs::path out = tmp.path / "fixed";
    applyFixes(
        *src, diagnoseCheckpoint(*src, nullptr), out.string(), {}, {}, {UserRename::parse("0.weight=first.weight")});
    EXPECT_EQ(fileBytes(out / "meta.pt"), fileBytes(fs::path(kSource) / "meta.pt"));
    const auto fixed = openCheckpoint(out.string());
    for (const auto& w : fixed->warnings)
        ADD_FAILURE() << readerCodeName(w.code) << ": " << w.message;
    EXPECT_NE(fixed->find("model.first.weight"), nullptr);
    EXPECT_NE(fixed->find("iteration"), nullptr);
    fs::remove(out / "meta.pt");
    EXPECT_EQ(openCheckpoint(out.string())->find("iteration"), nullptr); // not in the DCP part
}
