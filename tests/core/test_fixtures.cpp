// SPDX-License-Identifier: GPL-3.0-or-later
// Golden tests: every fixture made by real PyTorch (tests/fixtures/make_fixtures.py) is read and compared with the
// manifest torch computed for it: keys, paths, dtypes, shapes, SHA-256 of full tensors, plain values, DCP chunks.
#include "optscope/analysis/inspect_report.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/pickle/value_json.h"

#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace optscope;
using json = nlohmann::json;

namespace {

const json& manifest()
{
    static const json m = [] {
        std::ifstream in(std::string(OPTSCOPE_TEST_DATA) + "/manifest.json");
        return json::parse(in);
    }();
    return m;
}

std::vector<std::string> fixtureNames()
{
    std::vector<std::string> names;
    for (auto it = manifest().begin(); it != manifest().end(); ++it)
        if (it.key() != "torch_version") names.push_back(it.key());
    return names;
}

class FixtureTest : public ::testing::TestWithParam<std::string>
{ };

TEST_P(FixtureTest, MatchesTorchManifest)
{
    const std::string name = GetParam();
    const json& fx = manifest()[name];
    CheckpointPtr cp = openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/" + name);
    EXPECT_EQ(fx["format"].get<std::string>(), checkpointFormatName(cp->format));

    InspectOptions opt;
    opt.hash = true;
    const InspectReport report = inspectCheckpoint(*cp, opt);
    EXPECT_TRUE(report.ok) << report.json["warnings"].dump();
    // a value entry carries no tensor description (104 of 192 bytes, a million times over in a file of values), not
    // even after reading and inspecting it
    for (const Entry& e : cp->entries) {
        if (!e.isTensor()) {
            EXPECT_FALSE(e.tensor.allocated()) << name << ": " << e.key;
        }
    }
    std::map<std::string, json> got;
    for (const auto& e : report.json["entries"])
        got[e["key"].get<std::string>()] = json::parse(e.dump()); // ordered_json -> json

    size_t expectedCount = 0;
    for (const auto& e : fx["entries"]) {
        ++expectedCount;
        const std::string key = e["key"];
        SCOPED_TRACE(name + ": " + key);
        ASSERT_TRUE(got.count(key)) << "missing key";
        const json& g = got[key];
        EXPECT_EQ(e["path"], g["path"]);
        ASSERT_EQ(e["type"], g["type"]);
        if (e["type"] == "tensor") {
            EXPECT_EQ(e["dtype"], g["dtype"]);
            EXPECT_EQ(e["shape"], g["shape"]);
            EXPECT_EQ(e["sha256"], g["sha256"]);
            if (e.contains("chunks")) {
                ASSERT_EQ(e["chunks"].size(), g["chunks"].size());
                for (size_t i = 0; i < e["chunks"].size(); ++i) {
                    EXPECT_EQ(e["chunks"][i]["offsets"], g["chunks"][i]["offsets"]);
                    EXPECT_EQ(e["chunks"][i]["sizes"], g["chunks"][i]["sizes"]);
                    EXPECT_FALSE(g["chunks"][i]["rank"].is_null());
                }
            }
        } else {
            EXPECT_EQ(e["value"], g["value"]);
        }
    }
    if (!fx.contains("unsafe_global")) {
        // the manifest is DCP's flatten_state_dict, which drops empty dicts; optscope keeps them (a file that holds one
        // needs it back), so those are the only keys it may have in addition
        size_t emptyDicts = 0;
        for (const auto& [key, g] : got)
            if (g["type"] == "value" && g["value"].is_object() && g["value"].empty()) ++emptyDicts;
        EXPECT_EQ(expectedCount + emptyDicts, got.size()) << "optscope has keys torch does not";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Torch26, FixtureTest, ::testing::ValuesIn(fixtureNames()), [](const ::testing::TestParamInfo<std::string>& info) {
        std::string n = info.param;
        for (auto& c : n)
            if (!isalnum(static_cast<unsigned char>(c))) c = '_';
        return n;
    });

TEST(Fixtures, DangerousGlobalIsInertAndReported)
{
    CheckpointPtr cp = openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/dangerous.pt");
    bool found = false;
    for (const auto& w : cp->warnings)
        if (w.code == ReaderCode::UnsafeGlobal && w.key == "evil"
            && w.message.find("posix.system") != std::string::npos)
            found = true;
    EXPECT_TRUE(found);
    const Entry* evil = cp->find("evil");
    ASSERT_NE(evil, nullptr);
    ASSERT_FALSE(evil->isTensor());
    // the REDUCE became an inert record: callable posix.system, args ("echo ...",)
    ASSERT_EQ(evil->value->kind, PyKind::Object);
    EXPECT_EQ(evil->value->className(), "posix.system");
    EXPECT_EQ(valueToJson(evil->value)["args"][0], "echo pwned-by-optscope-fixture");
    // the tensor next to it is still read
    const Entry* w = cp->find("weights");
    ASSERT_NE(w, nullptr);
    EXPECT_TRUE(w->isTensor());
}

TEST(Fixtures, KnownClassesRaiseNoWarnings)
{
    for (const char* name : {"adam_int.pt", "adam_int_proto4.pt", "adam_int_legacy.pt", "dtypes.pt", "fsdp2_r3",
             "fsdp1_r2", "fsdp1_raw_r2/optim_rank0.pt"}) {
        CheckpointPtr cp = openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/" + name);
        EXPECT_TRUE(cp->warnings.empty())
            << name << ": " << readerCodeName(cp->warnings.front().code) << " " << cp->warnings.front().message;
    }
}

TEST(Fixtures, DcpRanksComeFromFileNames)
{
    CheckpointPtr cp = openCheckpoint(std::string(OPTSCOPE_TEST_DATA) + "/fsdp2_r3");
    const Entry* e = cp->find("model.blocks.0.head.weight"); // 4 rows on 3 ranks: 2, 2, 0
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->tensor->chunks.size(), 3u);
    EXPECT_EQ(e->tensor->chunks[0].rank, 0);
    EXPECT_EQ(e->tensor->chunks[1].rank, 1);
    EXPECT_EQ(e->tensor->chunks[2].rank, 2);
    EXPECT_EQ(e->tensor->chunks[2].sizes[0], 0);
    EXPECT_EQ(e->tensor->chunks[2].offsets[0], 4);
    // FQNs with dots are single path elements
    const Entry* s = cp->find("optim.state.blocks.0.qkv.weight.exp_avg");
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->path.size(), 4u);
    EXPECT_EQ(s->path[2].key, "blocks.0.qkv.weight");
}

} // namespace
