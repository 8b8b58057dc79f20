// SPDX-License-Identifier: GPL-3.0-or-later
// The key filter (optscope/key_filter.h): words, wildcards, regular expressions, dtypes and value predicates, and the
// value facts it reads, against what PyTorch says of a real checkpoint with an overflow (tests/data/diff/step4.pt:
// NaN in model.0.bias, inf in the Adam moments of that bias; written by tests/fixtures/make_fixtures.py).
#include "optscope/analysis/key_filter.h"
#include "optscope/base/error.h"
#include "optscope/base/pattern.h"
#include "optscope/formats/checkpoint_loader.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace optscope;

namespace {

const std::string kData = OPTSCOPE_TEST_DATA;

bool keyMatches(const std::string& filter, const std::string& key)
{
    return KeyFilter::parse(filter).matchesKey(key);
}

std::set<std::string> matching(const Checkpoint& cp, const std::vector<ValueFacts>& facts, const std::string& text)
{
    const KeyFilter f = KeyFilter::parse(text);
    EXPECT_EQ(f.error(), "") << text;
    std::set<std::string> out;
    for (size_t i = 0; i < cp.entries.size(); ++i)
        if (f.matches(cp.entries[i].key, &cp.entries[i], &facts[i])) out.insert(cp.entries[i].key);
    return out;
}

} // namespace

TEST(KeyFilter, WordsAreAllFoundCaseInsensitive)
{
    const std::string key = "model.blocks.1.MLP.2.weight.max_exp_avg_sq";
    EXPECT_TRUE(keyMatches("", key));
    EXPECT_TRUE(KeyFilter::parse("  ").empty());
    EXPECT_TRUE(keyMatches("mlp.2 max", key)); // two words: both present (was: one substring, nothing found)
    EXPECT_TRUE(keyMatches("exp_avg_sq blocks.1", key));
    EXPECT_FALSE(keyMatches("mlp.2 blocks.0", key));
    EXPECT_TRUE(keyMatches("-blocks.0 mlp", key));
    EXPECT_FALSE(keyMatches("!blocks.1", key));
}

TEST(KeyFilter, WildcardsMatchInsideTheKey)
{
    const std::string key = "model.blocks.1.mlp.2.weight.max_exp_avg_sq";
    EXPECT_TRUE(keyMatches("mlp.2*max", key));
    EXPECT_TRUE(keyMatches("blocks.?.mlp", key));
    EXPECT_TRUE(keyMatches("blocks.[01].mlp", key));
    EXPECT_FALSE(keyMatches("blocks.[02].mlp", key));
    EXPECT_TRUE(keyMatches("blocks.[!0].mlp", key));
    EXPECT_TRUE(keyMatches("BLOCKS.*.WEIGHT", key));
    EXPECT_FALSE(keyMatches("mlp.3*max", key));
    EXPECT_TRUE(keyMatches("*", key));
    EXPECT_TRUE(keyMatches("a[b", "x.a[b.y")); // an unclosed class is a literal '['
    // a pathological pattern stays fast (one star backtrack point, no exponential search)
    EXPECT_FALSE(keyMatches("a*a*a*a*a*a*a*a*a*a*b", std::string(5000, 'a')));
}

TEST(KeyFilter, RegularExpressions)
{
    const std::string key = "model.blocks.10.attn.qkv.weight";
    EXPECT_TRUE(keyMatches("/blocks\\.1[0-9]\\.attn/", key));
    EXPECT_TRUE(keyMatches("re:QKV\\.weight$", key));
    EXPECT_FALSE(keyMatches("/^attn/", key));
    EXPECT_TRUE(keyMatches("-/^attn/", key));
    EXPECT_TRUE(keyMatches("/attn qkv|attn\\.qkv/ weight", key)); // a regex may hold spaces
    const KeyFilter bad = KeyFilter::parse("/blocks[/");
    EXPECT_NE(bad.error(), "");
    EXPECT_FALSE(bad.matchesKey(key));
}

// Pattern (base/pattern.h): the one place std::regex is compiled, for the key filter and the readers' file names
TEST(Pattern, MatchesWholeOrSearchesAndGivesTheGroups)
{
    const Pattern optim(R"(^(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_?optim_states\.pt$)");
    std::vector<std::string> g;
    ASSERT_TRUE(optim.matches("zero_pp_rank_12_mp_rank_03_optim_states.pt", &g));
    EXPECT_EQ(g, (std::vector<std::string> {"zero_pp_rank_12_mp_rank_03_optim_states.pt", "", "12", "03"}));
    ASSERT_TRUE(optim.matches("bf16_zero_pp_rank_0_mp_rank_00optim_states.pt", &g));
    EXPECT_EQ(g[1], "bf16_");
    EXPECT_FALSE(optim.matches("zero_pp_rank_0_mp_rank_00_optim_states.pt.tmp"));

    const Pattern digits(R"((\d+)$)");
    EXPECT_FALSE(digits.matches("global_step12")); // matches() is the whole text,
    ASSERT_TRUE(digits.search("global_step12", &g)); // search() any part of it
    EXPECT_EQ(g, (std::vector<std::string> {"12", "12"}));
    EXPECT_FALSE(digits.search("global_step"));

    EXPECT_TRUE(Pattern("QKV", true).search("attn.qkv.weight"));
    EXPECT_FALSE(Pattern("QKV").search("attn.qkv.weight"));
    // a std::string_view that is not the whole string: only its own characters are matched
    const std::string text = "rank7.pt and more";
    EXPECT_TRUE(Pattern(R"(rank\d\.pt)").matches(std::string_view(text).substr(0, 8)));

    EXPECT_THROW(Pattern("blocks["), BadPattern);
    Pattern moved = Pattern("a+");
    EXPECT_TRUE(moved.matches("aaa"));
}

TEST(KeyFilter, MalformedPredicatesSayWhy)
{
    EXPECT_NE(KeyFilter::parse("dtype:float7").error().find("float7"), std::string::npos);
    EXPECT_NE(KeyFilter::parse("|x|>abc").error().find("abc"), std::string::npos);
    EXPECT_NE(KeyFilter::parse("|x|=3").error(), "");
    EXPECT_EQ(KeyFilter::parse("|x|>=1e-3 dtype:bf16 nan inf").error(), "");
    EXPECT_TRUE(KeyFilter::parse("nan").needsValues());
    EXPECT_TRUE(KeyFilter::parse("|x|<2").needsValues());
    EXPECT_FALSE(KeyFilter::parse("dtype:bf16 key:nan").needsValues());
    // key: forces a word: a key holding "inf"
    EXPECT_TRUE(keyMatches("key:inf", "model.info.weight"));
}

TEST(KeyFilter, DTypesAndValuesAgreeWithPyTorch)
{
    const CheckpointPtr cp = openCheckpoint(kData + "/diff/step4.pt");
    const std::vector<ValueFacts> facts = scanValueFacts(*cp);
    ASSERT_EQ(facts.size(), cp->entries.size());
    using Keys = std::set<std::string>;
    // torch.isnan(t).any() / torch.isinf(t).any() per tensor of the file
    EXPECT_EQ(matching(*cp, facts, "nan"), Keys({"model.0.bias"}));
    EXPECT_EQ(matching(*cp, facts, "inf"), Keys({"optim.state.0.bias.exp_avg", "optim.state.0.bias.exp_avg_sq"}));
    EXPECT_EQ(matching(*cp, facts, "inf exp_avg_sq"), Keys({"optim.state.0.bias.exp_avg_sq"}));
    // the largest finite |x|: model.0.weight 0.4414, model.2.weight 0.3191, model.0.bias 0.3001 (its NaN aside)
    EXPECT_EQ(matching(*cp, facts, "|x|>0.3 model"), Keys({"model.0.weight", "model.2.weight", "model.0.bias"}));
    EXPECT_EQ(matching(*cp, facts, "|x|>=4 step"),
        Keys({"optim.state.0.weight.step", "optim.state.0.bias.step", "optim.state.2.weight.step",
            "optim.state.2.bias.step"}));
    EXPECT_EQ(matching(*cp, facts, "|x|<1e-5 optim.state"),
        Keys({"optim.state.0.weight.exp_avg_sq", "optim.state.0.bias.exp_avg_sq", "optim.state.2.weight.exp_avg_sq"}));
    // numbers that are values count (eps = 1e-08), flags do not (amsgrad = False)
    EXPECT_EQ(matching(*cp, facts, "|x|<1e-5 param_groups"), Keys({"optim.param_groups.0.eps"}));
    EXPECT_EQ(matching(*cp, facts, "-nan -inf model.0"), Keys({"model.0.weight"}));
    EXPECT_EQ(matching(*cp, facts, "dtype:fp32 model.2").size(), 2u);
    EXPECT_TRUE(matching(*cp, facts, "dtype:bf16").empty());
    // without facts, value terms hold for nothing (and negated ones for everything)
    const KeyFilter f = KeyFilter::parse("nan");
    for (const auto& e : cp->entries)
        EXPECT_FALSE(f.matches(e.key, &e, nullptr));

    const CheckpointPtr bf16 = openCheckpoint(kData + "/diff/step4_bf16.pt");
    const std::vector<ValueFacts> bf16Facts = scanValueFacts(*bf16);
    EXPECT_FALSE(matching(*bf16, bf16Facts, "dtype:bf16").empty());
    EXPECT_EQ(matching(*bf16, bf16Facts, "dtype:bfloat16"), matching(*bf16, bf16Facts, "dtype:bf16"));
}

TEST(KeyFilter, ScanningValuesCanBeCancelled)
{
    const CheckpointPtr cp = openCheckpoint(kData + "/diff/step4.pt");
    Progress cancel;
    cancel.cancelled = [] { return true; };
    EXPECT_THROW(scanValueFacts(*cp, cancel), Error);
}
