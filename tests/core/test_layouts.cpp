// SPDX-License-Identifier: GPL-3.0-or-later
// The layout engine against PyTorch's own results (tests/data/fsdp_layouts.json, recorded from real FSDP1
// FlatParameters and FSDP2 DTensors on 2-4 ranks with and without use_orig_params and bf16 mixed precision).
#include "optscope/model/flat_param_layout.h"

#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace optscope;
using json = nlohmann::json;

namespace {

const json& layouts()
{
    static const json j = [] {
        std::ifstream in(std::string(OPTSCOPE_TEST_DATA) + "/fsdp_layouts.json");
        return json::parse(in);
    }();
    return j;
}

TEST(FlatParamLayout, MatchesPyTorchFsdp1)
{
    size_t units = 0;
    for (const auto& config : layouts()["fsdp1"]) {
        const int world = config["world_size"];
        const bool orig = config["use_orig_params"];
        const int64_t aligned
            = orig ? FlatParamLayout::alignedNumelFor(config["param_dtype"] == "bfloat16" ? 2 : 4) : 0;
        const auto& rank0 = config["ranks"][0];
        for (size_t u = 0; u < rank0.size(); ++u) {
            SCOPED_TRACE("world " + std::to_string(world) + (orig ? " use_orig_params " : " ")
                + config["param_dtype"].get<std::string>() + " unit '" + rank0[u]["unit"].get<std::string>() + "'");
            std::vector<std::pair<std::string, std::vector<int64_t>>> params;
            for (size_t i = 0; i < rank0[u]["fqns"].size(); ++i)
                params.emplace_back(rank0[u]["fqns"][i], rank0[u]["shapes"][i].get<std::vector<int64_t>>());
            const FlatParamLayout L = FlatParamLayout::compute(params, world, aligned);
            std::vector<int64_t> numels;
            std::vector<bool> padding;
            for (const auto& s : L.segments) {
                numels.push_back(s.numel);
                padding.push_back(s.padding);
            }
            EXPECT_EQ(numels, rank0[u]["numels_with_padding"].get<std::vector<int64_t>>());
            EXPECT_EQ(padding, rank0[u]["is_padding_mask"].get<std::vector<bool>>());
            EXPECT_EQ(L.unpaddedNumel, rank0[u]["unpadded_unsharded_numel"].get<int64_t>());
            for (int r = 0; r < world; ++r) {
                const auto& ru = config["ranks"][r][u];
                EXPECT_EQ(L.shardNumel, ru["sharded_numel"].get<int64_t>()) << "rank " << r;
                EXPECT_EQ(L.rankPadding(r), ru["shard_numel_padded"].get<int64_t>()) << "rank " << r;
                const auto infos = L.shardParamInfos(r);
                ASSERT_EQ(infos.size(), ru["shard_param_infos"].size());
                for (size_t i = 0; i < infos.size(); ++i) {
                    const auto& want = ru["shard_param_infos"][i];
                    ASSERT_EQ(infos[i].inShard, want[0].get<bool>()) << "rank " << r << " param " << i;
                    if (!infos[i].inShard) continue;
                    EXPECT_EQ(infos[i].offsetInShard, want[1].get<int64_t>()) << "rank " << r << " param " << i;
                    EXPECT_EQ(infos[i].numelInShard, want[2].get<int64_t>()) << "rank " << r << " param " << i;
                    EXPECT_EQ(infos[i].intraStart, want[3].get<int64_t>()) << "rank " << r << " param " << i;
                    EXPECT_EQ(infos[i].intraEnd, want[4].get<int64_t>()) << "rank " << r << " param " << i;
                }
            }
            ++units;
        }
    }
    EXPECT_EQ(units, 27u); // 3 world sizes x 3 configurations x 3 units
}

TEST(Dim0Sharding, MatchesPyTorchFsdp2DTensors)
{
    size_t checked = 0;
    for (const auto& config : layouts()["fsdp2"]) {
        const int world = config["world_size"];
        for (int r = 0; r < world; ++r) {
            for (const auto& [name, p] : config["ranks"][r].items()) {
                SCOPED_TRACE(name + " world " + std::to_string(world) + " rank " + std::to_string(r));
                const auto global = p["global"].get<std::vector<int64_t>>();
                const Dim0Chunk c = chunkDim0(global[0], world, r, ShardingStyle::Fsdp2);
                EXPECT_EQ(c.size, p["local"][0].get<int64_t>());
                EXPECT_EQ(c.offset, p["offset"][0].get<int64_t>());
                ++checked;
            }
        }
    }
    EXPECT_GT(checked, 100u);
}

TEST(Dim0Sharding, Fsdp1StyleHasNoEmptyChunks)
{
    // 5 rows on 4 ranks: torch.chunk gives 2, 2, 1 and nothing for rank 3
    EXPECT_EQ(chunkDim0(5, 4, 2, ShardingStyle::Fsdp1).size, 1);
    EXPECT_FALSE(chunkDim0(5, 4, 3, ShardingStyle::Fsdp1).exists);
    const Dim0Chunk f2 = chunkDim0(5, 4, 3, ShardingStyle::Fsdp2);
    EXPECT_TRUE(f2.exists);
    EXPECT_EQ(f2.size, 0);
    EXPECT_EQ(f2.offset, 5);
}

} // namespace
