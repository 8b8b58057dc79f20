// SPDX-License-Identifier: GPL-3.0-or-later
// `inspect --json` streams its entries (writeInspectJson): byte for byte the document inspectCheckpoint builds whole,
// on fixtures of every kind, with and without hashes and chunk lists, and for an empty checkpoint.
#include "optscope/analysis/inspect_report.h"
#include "optscope/formats/checkpoint_loader.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace optscope;

TEST(InspectJson, StreamedDocumentIsTheWholeOneByteForByte)
{
    const std::string data = OPTSCOPE_TEST_DATA;
    for (const char* fixture : {"fsdp2_r3", "dtypes.pt", "adamw_fqn.pt", "hf/checkpoint-3", "fsdp1_r2",
             "gpu/fsdp2_bf16mp_fused_adamw/ckpt", "adam_empty_state.pt", "multi_optim/lit_gan_a.ckpt",
             "frozen/lbfgs.pt", "hostile/evil_keys.pt", "hostile/shared_strings.pt"}) {
        SCOPED_TRACE(fixture);
        const auto cp = openCheckpoint(data + "/" + fixture);
        for (const bool hash : {false, true}) {
            for (const bool chunks : {false, true}) {
                InspectOptions whole;
                whole.hash = hash;
                whole.listChunks = chunks;
                InspectOptions streamed = whole;
                streamed.entriesJson = false;
                const InspectReport a = inspectCheckpoint(*cp, whole);
                const InspectReport b = inspectCheckpoint(*cp, streamed);
                EXPECT_FALSE(b.json.contains("entries"));
                std::ostringstream out;
                writeInspectJson(out, *cp, b, streamed);
                EXPECT_EQ(out.str(), a.json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
            }
        }
    }
}
