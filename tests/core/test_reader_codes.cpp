// SPDX-License-Identifier: GPL-3.0-or-later
// Every warning code a reader can emit (CheckpointBuilder::warn/error, CheckpointWarning::code) is known to the
// check: a finding's name or an entry of its table of the readers' other codes. Before, a code nobody mapped became
// bad-metadata without a word; now adding one without its mapping fails here.
#include "optscope/analysis/checkpoint_check.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <regex>
#include <set>
#include <sstream>

using namespace optscope;
namespace fs = std::filesystem;

TEST(ReaderCodes, EveryCodeAReaderEmitsIsKnown)
{
    const std::regex emitted(R"re((?:\bwarn|\berror)\(\s*"([a-z0-9-]+)"|\.code\s*=\s*"([a-z0-9-]+)")re");
    std::set<std::string> codes;
    for (const auto& f : fs::recursive_directory_iterator(fs::path(OPTSCOPE_SOURCE_DIR) / "core" / "src")) {
        if (f.path().extension() != ".cpp") continue;
        std::ifstream in(f.path());
        std::stringstream text;
        text << in.rdbuf();
        const std::string s = text.str();
        for (std::sregex_iterator m(s.begin(), s.end(), emitted), end; m != end; ++m)
            codes.insert((*m)[1].matched ? (*m)[1].str() : (*m)[2].str());
    }
    EXPECT_GT(codes.size(), 30u) << "the scan finds the readers' codes";
    for (const auto& code : codes)
        EXPECT_TRUE(readerWarningFinding(code).has_value()) << "reader code '" << code << "' maps to no finding";
    EXPECT_EQ(readerWarningFinding("chunk-out-of-range"), FindingCode::ChunkTruncated);
    EXPECT_EQ(readerWarningFinding("missing-file"), FindingCode::MissingFile);
    EXPECT_FALSE(readerWarningFinding("no-such-code").has_value());
}
