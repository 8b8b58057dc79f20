// SPDX-License-Identifier: GPL-3.0-or-later
// The readers' codes are one table (model/reader_code.h): a reader can only emit a code it holds, since the code is
// an enum. Here: the table is in declaration order, names are unique, a code named as a finding is that finding, and
// what check makes of a reader's warning is the table's finding.
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/model/reader_code.h"

#include <gtest/gtest.h>
#include <set>
#include <string>

using namespace optscope;

TEST(ReaderCodes, TableIsInOrderWithUniqueNames)
{
    const auto& table = readerCodeRegistry();
    ASSERT_GT(table.size(), 30u);
    std::set<std::string> names;
    for (size_t i = 0; i < table.size(); ++i) {
        EXPECT_EQ(static_cast<size_t>(table[i].code), i) << table[i].name;
        EXPECT_TRUE(names.insert(table[i].name).second) << "two codes named " << table[i].name;
    }
    EXPECT_STREQ(readerCodeName(ReaderCode::ZeroElastic), "zero-elastic");
}

TEST(ReaderCodes, ACodeNamedAsAFindingIsThatFinding)
{
    size_t same = 0;
    for (const auto& code : readerCodeRegistry())
        for (const auto& finding : findingRegistry())
            if (std::string(code.name) == finding.name) {
                EXPECT_EQ(code.finding, finding.code) << code.name;
                ++same;
            }
    EXPECT_GT(same, 15u);
    EXPECT_EQ(readerCodeInfo(ReaderCode::ChunkOutOfRange).finding, FindingCode::ChunkTruncated);
    EXPECT_EQ(readerCodeInfo(ReaderCode::DtensorLayout).finding, FindingCode::BadMetadata);
}

TEST(ReaderCodes, CheckReportsAReadersErrorAsItsFinding)
{
    // one error and one plain warning of each code: every error becomes the table's finding, and a warning only where
    // the table says check reports it
    for (const auto& code : readerCodeRegistry()) {
        if (code.code == ReaderCode::UnsafeGlobal) continue; // check tells its kinds of global apart (own tests)
        for (bool isError : {true, false}) {
            Checkpoint cp;
            CheckpointWarning w;
            w.code = code.code;
            w.message = "said by a reader";
            w.isError = isError;
            cp.warnings.push_back(w);
            CheckOptions opt;
            opt.optimizers = false;
            const CheckReport r = checkCheckpoint(cp, opt);
            if (isError || code.checkedWhenWarning) {
                ASSERT_EQ(r.findings.size(), 1u) << code.name << (isError ? " error" : " warning");
                EXPECT_EQ(r.findings[0].code, code.finding) << code.name;
                EXPECT_EQ(r.findings[0].message, "said by a reader");
            } else {
                EXPECT_TRUE(r.findings.empty()) << code.name << " warning";
            }
        }
    }
}
