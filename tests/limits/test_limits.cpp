// SPDX-License-Identifier: GPL-3.0-or-later
// Limits and hardening, the cheap cases (the expensive ones, 100k keys, > 4 GiB tensors and thousands of files, are
// benchmarks: bench/limits):
//  * zero-size tensors, from fixtures written by real PyTorch (tests/data/limits, tests/limits/make_limits_fixtures.py)
//  * deep nesting: the flattening depth limit, and nesting the pickle machine cannot see (lists filled after they
//    were nested) reaching the recursive consumers
//  * objects shared through the pickle memo (cycles, aliases, exponential DAGs, one value under many keys), long keys
//    repeated through deep nesting, nested tuple keys, huge integers, large dicts: bounded time and memory, and the
//    same results as before for real checkpoints (tests/fuzz/regressions/pickle holds the inputs as files)
//  * tensor statistics at the ends of the double range (a fuzzer finding: histc threw, or indexed out of range)
#include "optscope/analysis/inspect_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/state_flattener.h"
#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/io/mapped_file.h"
#include "optscope/pickle/pickle_machine.h"
#include "optscope/pickle/value_json.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_stats.h"
#include "optscope/tensor/tensor_values.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

using namespace optscope;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const fs::path kData = OPTSCOPE_TEST_DATA;
const fs::path kRegressions = OPTSCOPE_FUZZ_REGRESSIONS;
const std::string kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string readFile(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    EXPECT_TRUE(in.good()) << p;
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// An unpickled value graph with the bytes it points into.
struct Unpickled
{
    std::string bytes;
    PyArena arena;
    PickleResult result;
    const PyValue* root() const { return result.root; }
};

std::unique_ptr<Unpickled> unpickleBytes(std::string bytes)
{
    auto u = std::make_unique<Unpickled>();
    u->bytes = std::move(bytes);
    PickleOptions options;
    options.sourceName = "test";
    u->result = unpickle(reinterpret_cast<const uint8_t*>(u->bytes.data()), u->bytes.size(), u->arena, options);
    return u;
}

std::unique_ptr<Unpickled> unpickleRegression(const std::string& name)
{
    return unpickleBytes(readFile(kRegressions / "pickle" / name));
}

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string u32(uint32_t v)
{
    std::string s(4, '\0');
    std::memcpy(s.data(), &v, 4); // little-endian hosts
    return s;
}

std::string binUnicode(const std::string& s)
{
    return "X" + u32(static_cast<uint32_t>(s.size())) + s;
}

/// {'k': {'k': ... {'k': 1}}} with @p levels dicts, protocol 2
std::string nestedDicts(int levels)
{
    std::string p = "\x80\x02";
    for (int i = 0; i < levels; ++i)
        p += "}" + binUnicode("k");
    p += "K\x01";
    for (int i = 0; i < levels; ++i)
        p += "s";
    return p + ".";
}

/// Containers nested @p levels deep whose nesting the pickle machine does not see: n + 1 empty containers are made
/// and memoized first, then container i gets container i + 1 (in increasing i, so each is still empty when it is
/// added): every recorded depth stays 1. Lists (APPEND) or dicts (SETITEM 'x'); the root is {'k': container 0}.
std::string untrackedNesting(uint32_t levels, bool dicts)
{
    std::string p = "\x80\x02";
    for (uint32_t i = 0; i <= levels; ++i)
        p += std::string(dicts ? "}" : "]") + "r" + u32(i) + "0";
    for (uint32_t i = 0; i < levels; ++i)
        p += "j" + u32(i) + (dicts ? binUnicode("x") : std::string()) + "j" + u32(i + 1) + (dicts ? "s0" : "a0");
    return p + "}(" + binUnicode("k") + "j" + u32(0) + "u.";
}

struct TempDir
{
    fs::path path;
    TempDir()
    {
        std::string templ = (fs::temp_directory_path() / "optscope-limits-XXXXXX").string();
        EXPECT_NE(::mkdtemp(templ.data()), nullptr);
        path = templ;
    }
    ~TempDir()
    {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

/// the fixture's tensors as PyTorch described them (tests/data/limits/expected.json)
void expectTensorsAsPyTorch(const std::string& fixture)
{
    const json expected = json::parse(readFile(kData / "limits" / "expected.json"))[fixture];
    ASSERT_GE(expected.size(), 10u);
    const CheckpointPtr cp = openCheckpoint((kData / "limits" / fixture).string());
    EXPECT_FALSE(cp->hasErrors());
    size_t empty = 0;
    for (const auto& [key, t] : expected.items()) {
        SCOPED_TRACE(fixture + ": " + key);
        const Entry* e = cp->find(key);
        ASSERT_NE(e, nullptr);
        ASSERT_TRUE(e->isTensor());
        EXPECT_EQ(e->tensor->shape, t["shape"].get<std::vector<int64_t>>());
        EXPECT_EQ(std::string(dtypeName(e->tensor->dtype)), t["dtype"].get<std::string>());
        EXPECT_EQ(e->tensor->numel(), t["numel"].get<int64_t>());
        EXPECT_EQ(hashTensor(*cp, *e), t["sha256"].get<std::string>());
        if (e->tensor->numel() != 0) continue;
        ++empty;
        EXPECT_EQ(e->tensor->nbytes(), 0u);
        uint64_t streamed = 0;
        TensorAssembler(*cp, *e).stream([&](const uint8_t*, size_t n) { streamed += n; });
        EXPECT_EQ(streamed, 0u);
        EXPECT_TRUE(readTensorValues(*cp, *e, 8).empty());
        const TensorStats s = computeTensorStats(*cp, *e, 8);
        EXPECT_EQ(s.numel, 0);
        EXPECT_EQ(s.finite, 0);
        EXPECT_TRUE(std::isnan(s.min) && std::isnan(s.max) && std::isnan(s.mean));
        EXPECT_TRUE(s.histogramCounts.empty());
    }
    EXPECT_GE(empty, 10u) << "the fixture has zero-size parameters, their Adam state and an empty view";

    InspectOptions options;
    options.hash = true;
    options.threads = 2;
    const InspectReport report = inspectCheckpoint(*cp, options);
    EXPECT_TRUE(report.ok);
    for (const auto& je : report.json["entries"]) {
        if (je["type"] != "tensor" || je["numel"] != 0) continue;
        EXPECT_EQ(je["bytes"], 0) << je.dump();
        EXPECT_EQ(je["sha256"], kEmptySha256) << je.dump();
    }
}

} // namespace

// --- zero-size tensors --------------------------------------------------------------------------------------------

TEST(ZeroSizeTensors, TorchSaveMatchesPyTorch)
{
    expectTensorsAsPyTorch("zero_size.pt");
    const CheckpointPtr cp = openCheckpoint((kData / "limits" / "zero_size.pt").string());
    // an empty view into a 10-element storage keeps its storage offset
    const Entry* view = cp->find("extras.empty_view");
    ASSERT_NE(view, nullptr);
    ASSERT_EQ(view->tensor->chunks.size(), 1u);
    EXPECT_EQ(view->tensor->chunks[0].source.storageOffset, 2);
    // an empty list is a value; so is an empty dict (DCP's flatten_state_dict drops it on save, but the file holds it
    // and gather must write it back: an optimizer's "state": {} before its first step)
    const Entry* list = cp->find("extras.empty_list");
    ASSERT_NE(list, nullptr);
    EXPECT_FALSE(list->isTensor());
    EXPECT_EQ(list->value->kind, PyKind::List);
    const Entry* dict = cp->find("extras.empty_dict");
    ASSERT_NE(dict, nullptr);
    EXPECT_EQ(dict->value->kind, PyKind::Dict);
    EXPECT_EQ(dict->value->size(), 0u);
}

TEST(ZeroSizeTensors, DcpMatchesPyTorch)
{
    expectTensorsAsPyTorch("zero_size_dcp");
    const CheckpointPtr cp = openCheckpoint((kData / "limits" / "zero_size_dcp").string());
    const Entry* e = cp->find("model.no_rows");
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->tensor->chunks.size(), 1u);
    EXPECT_EQ(e->tensor->chunks[0].sizes, (std::vector<int64_t> {0, 4}));
}

// --- deep nesting ---------------------------------------------------------------------------------------------------

TEST(DeepNesting, FlatteningStopsAt200Levels)
{
    auto shallow = unpickleBytes(nestedDicts(150));
    auto leaves = flattenStateDict(shallow->root());
    ASSERT_EQ(leaves.size(), 1u);
    EXPECT_EQ(leaves[0].path.size(), 150u);
    EXPECT_EQ(leaves[0].value->kind, PyKind::Int);

    auto deep = unpickleBytes(nestedDicts(250));
    leaves = flattenStateDict(deep->root());
    ASSERT_EQ(leaves.size(), 1u);
    EXPECT_EQ(leaves[0].path.size(), 200u);
    EXPECT_EQ(leaves[0].value->kind, PyKind::Dict); // the remaining 50 levels, as one value
    EXPECT_EQ(joinKeyPath(leaves[0].path).size(), 200u * 2 - 1);
    const std::string rendered = valueToJson(deep->root()).dump();
    EXPECT_NE(rendered.find("<...>"), std::string::npos); // rendered 64 levels deep
}

TEST(DeepNesting, NestingThePickleMachineCannotSeeStaysBounded)
{
    // 200000 levels: every recursive consumer must bound its own depth (the machine's nesting cap cannot)
    for (const bool dicts : {false, true}) {
        SCOPED_TRACE(dicts ? "dicts" : "lists");
        const auto start = std::chrono::steady_clock::now();
        auto u = unpickleBytes(untrackedNesting(200000, dicts));
        const auto leaves = flattenStateDict(u->root());
        ASSERT_EQ(leaves.size(), 1u);
        EXPECT_EQ(leaves[0].path.size(), dicts ? 200u : 1u); // lists without tensors or dicts are one value
        EXPECT_NE(valueToJson(u->root()).dump().find("<...>"), std::string::npos);
        EXPECT_LE(pyRepr(u->root(), 100).size(), 103u);
        EXPECT_LT(secondsSince(start), 20.0);
    }
}

// --- objects shared through the memo -------------------------------------------------------------------------------

TEST(SharedReferences, ACycleIsOneLeaf)
{
    // d = {'a': d, 'b': d, 'x': 1}
    const std::string memo0("\0", 1);
    auto u = unpickleBytes("\x80\x02}q" + memo0 + "(" + binUnicode("a") + "h" + memo0 + binUnicode("b") + "h" + memo0
        + binUnicode("x") + "K\x01u.");
    const auto leaves = flattenStateDict(u->root());
    ASSERT_EQ(leaves.size(), 3u);
    EXPECT_EQ(joinKeyPath(leaves[0].path), "a");
    EXPECT_EQ(leaves[0].value, u->root());
    EXPECT_EQ(joinKeyPath(leaves[1].path), "b");
    EXPECT_EQ(joinKeyPath(leaves[2].path), "x");
    EXPECT_EQ(valueToJson(u->root()).dump(), R"({"a":"<...>","b":"<...>","x":1})");

    // the fuzzer's first finding: a list holding itself twice made the tensor search exponential
    auto list = unpickleRegression("timeout-self-referencing-list");
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(flattenStateDict(list->root()).size(), 1u);
    EXPECT_LT(secondsSince(start), 1.0);
}

TEST(SharedReferences, AnAliasedStateDictIsExpandedAtEachKey)
{
    // real PyTorch: torch.save({"model": sd, "ema": sd, ...}) pickles sd once and references it again
    const CheckpointPtr cp = openCheckpoint((kData / "limits" / "shared.pt").string());
    for (const char* key : {"model.w", "model.b", "ema.w", "ema.b"}) {
        const Entry* e = cp->find(key);
        ASSERT_NE(e, nullptr) << key;
        EXPECT_TRUE(e->isTensor()) << key;
    }
    EXPECT_EQ(hashTensor(*cp, *cp->find("model.w")), hashTensor(*cp, *cp->find("ema.w")));
    // os.system is pickled once and referenced by the next two objects: every entry holding one is reported
    std::set<std::string> warned;
    for (const auto& w : cp->warnings)
        if (w.code == ReaderCode::UnsafeGlobal && w.message.find("posix.system") != std::string::npos)
            warned.insert(w.key);
    EXPECT_EQ(warned, (std::set<std::string> {"hooks.a", "hooks.b", "more"}));
}

TEST(SharedReferences, ExponentialGraphsAreBounded)
{
    // d_k = {'a': d_(k-1), 'b': d_(k-1)}, 40 levels: 2^40 paths in 463 bytes
    auto dag = unpickleRegression("crafted-exponential-dict-dag");
    auto start = std::chrono::steady_clock::now();
    const auto leaves = flattenStateDict(dag->root());
    EXPECT_LT(secondsSince(start), 10.0);
    EXPECT_GT(leaves.size(), 1000u); // shared containers are still expanded again, within the budget
    EXPECT_LT(leaves.size(), size_t(1) << 20);
    std::string firstKey = "a"; // down the 'a' side to d_0: 41 keys
    for (int i = 0; i < 40; ++i)
        firstKey += ".a";
    EXPECT_EQ(joinKeyPath(leaves[0].path), firstKey);
    EXPECT_EQ(leaves[0].value->kind, PyKind::Int);
    bool repeatedLeaf = false;
    for (const auto& l : leaves)
        repeatedLeaf = repeatedLeaf || l.value->kind == PyKind::Dict;
    EXPECT_TRUE(repeatedLeaf) << "past the budget a repeated container stays one leaf";

    start = std::chrono::steady_clock::now();
    const std::string rendered = valueToJson(dag->root()).dump();
    EXPECT_LT(secondsSince(start), 10.0);
    EXPECT_LT(rendered.size(), size_t(64) << 20);
    EXPECT_NE(rendered.find("<...>"), std::string::npos);

    auto lists = unpickleRegression("crafted-exponential-list-dag");
    start = std::chrono::steady_clock::now();
    EXPECT_EQ(flattenStateDict(lists->root()).size(), 1u);
    EXPECT_LT(valueToJson(lists->root()).dump().size(), size_t(64) << 20);
    EXPECT_LT(secondsSince(start), 10.0);
}

TEST(SharedReferences, OneValueUnderManyKeysRendersWithinOneBudget)
{
    // {str(i): big for i in range(4000)}, big = list(range(4000)): 16M list items if each key rendered it again
    auto u = unpickleRegression("crafted-shared-value-many-keys");
    const auto leaves = flattenStateDict(u->root());
    ASSERT_EQ(leaves.size(), 4000u);
    std::vector<const PyValue*> values;
    for (const auto& l : leaves)
        values.push_back(l.value);
    const auto start = std::chrono::steady_clock::now();
    ValueJsonRenderer renderer(values);
    std::vector<nlohmann::ordered_json> rendered;
    for (const PyValue* v : values)
        rendered.push_back(renderer.render(v));
    EXPECT_LT(secondsSince(start), 10.0);
    ASSERT_EQ(rendered.size(), 4000u);
    ASSERT_TRUE(rendered[0].is_array());
    EXPECT_EQ(rendered[0].size(), 4000u); // the first ones completely
    EXPECT_EQ(rendered[0][3999], 3999);
    size_t items = 0, truncated = 0;
    for (const auto& r : rendered) {
        if (r.is_array())
            items += r.size();
        else
            ++truncated;
    }
    EXPECT_LT(items, size_t(1) << 20);
    EXPECT_GT(truncated, 3000u);
}

TEST(SharedReferences, AMillionPlainValuesNeedNoSetToBudget)
{
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "the sanitizer's allocator keeps its own accounting";
#else
    // inspect --json of 1M plain values: the budget's walk kept every value in a set (50 MB at its peak) though a
    // number cannot share anything; such values count at each reference now, and only containers and long text are
    // looked up
    PyArena arena;
    std::vector<const PyValue*> values;
    for (int i = 0; i < 1000000; ++i)
        values.push_back(i % 2 ? arena.makeInt(i) : arena.makeFloat(i));
    // the process's peak resident memory, from a peak reset to what it holds now (Linux: clear_refs 5)
    auto peakKb = [] {
        std::ifstream status("/proc/self/status");
        std::string line;
        while (std::getline(status, line))
            if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
        return -1L;
    };
    std::ofstream("/proc/self/clear_refs") << "5";
    const long before = peakKb();
    ValueJsonRenderer renderer(values);
    const long grown = peakKb() - before;
    if (before < 0) GTEST_SKIP() << "no VmHWM";
    EXPECT_LT(grown, 8L << 10) << grown << " kB";
    EXPECT_EQ(renderer.render(values[3]), 3);
#endif
}

TEST(SharedReferences, UnsharedValuesRenderCompletely)
{
    // a list of 300000 distinct ints (more than any fixed budget would allow) renders in full
    std::string p = "\x80\x02(";
    for (int i = 0; i < 300000; ++i)
        p += "J" + u32(static_cast<uint32_t>(i));
    p += "l.";
    auto u = unpickleBytes(p);
    const auto j = valueToJson(u->root());
    ASSERT_TRUE(j.is_array());
    ASSERT_EQ(j.size(), 300000u);
    EXPECT_EQ(j[299999], 299999);
}

// --- keys --------------------------------------------------------------------------------------------------------

TEST(Keys, LongKeysRepeatedThroughDeepNestingHitTheLimit)
{
    // an 8 KiB key at each of 150 levels above 3000 leaves: 7 GiB of key paths from 20 KiB of pickle
    auto u = unpickleRegression("crafted-long-key-deep-nesting");
    try {
        flattenStateDict(u->root());
        FAIL() << "no limit";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Limit);
        EXPECT_NE(std::string(e.what()).find("MiB"), std::string::npos) << e.what();
    }
}

TEST(Keys, KeyPathElementTextIsCompact)
{
    // a 100k-entry checkpoint keeps 400k path elements: each is 32 bytes, its text inline up to 15 characters
    static_assert(sizeof(CompactString) == 16);
    static_assert(sizeof(KeyPathElem) == 32);
    for (size_t n : {0, 1, 14, 15, 16, 17, 300}) {
        std::string text(n, 'k');
        if (n > 2) text[1] = '\0'; // pickled keys may hold NULs
        CompactString s(text);
        EXPECT_EQ(s.size(), n);
        EXPECT_EQ(s.view(), text);
        EXPECT_EQ(s.c_str()[n], '\0');
        CompactString copy(s);
        EXPECT_EQ(copy, s);
        CompactString moved(std::move(copy));
        EXPECT_EQ(moved.view(), text);
        EXPECT_TRUE(copy.empty());
        CompactString assigned("x");
        assigned = s;
        EXPECT_EQ(assigned.view(), text);
        assigned = assigned; // self-assignment keeps the text
        EXPECT_EQ(assigned.view(), text);
        assigned = CompactString("other text longer than fifteen");
        EXPECT_EQ(assigned, "other text longer than fifteen");
        EXPECT_EQ(std::string("a.") + s, "a." + text);
    }
    const KeyPath path {KeyPathElem::fromKey("optim"), KeyPathElem::fromKey("state"), KeyPathElem::fromIndex(123),
        KeyPathElem::fromKey("model.layers.0.self_attn.q_proj.weight"), KeyPathElem::fromKey("exp_avg")};
    EXPECT_EQ(joinKeyPath(path), "optim.state.123.model.layers.0.self_attn.q_proj.weight.exp_avg");
}

TEST(Keys, NestedTupleKeysStayCheap)
{
    // 40 keys (t5, i) where t5 nests five levels of 200 references: 200^5 elements if a key were rendered in full
    const auto start = std::chrono::steady_clock::now();
    auto u = unpickleRegression("crafted-nested-tuple-keys");
    EXPECT_LT(secondsSince(start), 5.0);
    ASSERT_EQ(u->root()->kind, PyKind::Dict);
    EXPECT_EQ(u->root()->size(), 40u);
    // small keys still replace each other as in Python: {1: 'a', 1: 'b'} is {1: 'b'}
    auto d = unpickleBytes(std::string("\x80\x02}(K\x01") + binUnicode("a") + "K\x01" + binUnicode("b") + "u.");
    ASSERT_EQ(d->root()->size(), 1u);
    EXPECT_EQ(d->root()->dictValue(0)->text, "b");
}

TEST(Keys, LargeDictLookupsUseTheIndex)
{
    // planner_data of a DCP checkpoint with 200000 keys is looked up once per key
    std::string p = "\x80\x02}(";
    for (int i = 0; i < 200000; ++i)
        p += binUnicode("key." + std::to_string(i)) + "J" + u32(static_cast<uint32_t>(i));
    p += "u.";
    auto u = unpickleBytes(p);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 200000; ++i) {
        const PyValue* v = u->root()->get("key." + std::to_string(i));
        ASSERT_NE(v, nullptr) << i;
        ASSERT_EQ(v->integer, i);
    }
    EXPECT_EQ(u->root()->get("key.200000"), nullptr);
    EXPECT_EQ(u->root()->get(std::string(5000, 'k')), nullptr);
    EXPECT_LT(secondsSince(start), 5.0); // a linear scan per lookup: 2e10 comparisons
}

TEST(Keys, CheckpointIndexFindsEveryKeyAndTheFirstOfDuplicates)
{
    // the key index holds entry positions, not copies of the keys: every key found, the first of equal keys wins and
    // the others are reported, absent keys (also ones that share a hash bucket) are not found
    Checkpoint cp;
    cp.arena = std::make_shared<PyArena>();
    CheckpointBuilder builder(cp);
    const int n = 50000;
    for (int i = 0; i < n; ++i)
        builder.addValue(
            {KeyPathElem::fromKey("state"), KeyPathElem::fromKey(std::to_string(i))}, cp.arena->makeInt(i));
    builder.addValue({KeyPathElem::fromKey("state.7")}, cp.arena->makeInt(-7)); // flattens to the key of entry 7
    builder.addValue({KeyPathElem::fromKey("state.9")}, cp.arena->makeInt(-9));
    builder.finish();
    for (int i = 0; i < n; ++i) {
        const Entry* e = cp.find("state." + std::to_string(i));
        ASSERT_NE(e, nullptr) << i;
        ASSERT_EQ(e->value->integer, i);
    }
    EXPECT_EQ(cp.find("state." + std::to_string(n)), nullptr);
    EXPECT_EQ(cp.find(""), nullptr);
    EXPECT_EQ(cp.find("state"), nullptr);
    std::set<std::string> duplicates;
    for (const auto& w : cp.warnings)
        if (w.code == ReaderCode::DuplicateKey) duplicates.insert(w.key);
    EXPECT_EQ(duplicates, (std::set<std::string> {"state.7", "state.9"}));
    const Checkpoint copy = cp; // positions, not pointers: a copy finds its own entries
    EXPECT_EQ(copy.find("state.123"), &copy.entries[123]);
}

TEST(Keys, SmallIntegersNoneAndBoolsAreSharedNotMadePerUse)
{
    // a torch.save pickle spells out offset 0, sizes, strides and requires_grad for every tensor: 100k tensors must
    // not make a value for each (the arena grew by about 5 values per tensor)
    std::string p = "\x80\x02](";
    const int n = 20000;
    for (int i = 0; i < n; ++i)
        p += std::string("K") + char(i % 200) + "J" + u32(1024) + "N\x88\x89" + "J" + u32(static_cast<uint32_t>(-1))
            + "J" + u32(1025);
    p += "e.";
    auto u = unpickleBytes(p);
    const PyValue* list = u->root();
    ASSERT_EQ(list->size(), size_t(7 * n));
    for (int i = 0; i < n; ++i) {
        const auto* v = &list->items()[size_t(7 * i)];
        ASSERT_EQ(v[0]->integer, i % 200);
        ASSERT_EQ(v[1]->integer, 1024);
        ASSERT_EQ(v[2]->kind, PyKind::None);
        ASSERT_TRUE(v[3]->kind == PyKind::Bool && v[3]->boolean);
        ASSERT_TRUE(v[4]->kind == PyKind::Bool && !v[4]->boolean);
        ASSERT_EQ(v[5]->integer, -1);
        ASSERT_EQ(v[6]->integer, 1025);
    }
    // shared: the small values once each; 1025 is made per use
    EXPECT_LT(u->arena.valueCount(), size_t(n + 300));
    EXPECT_EQ(list->items()[0], list->items()[7 * 200]);
    EXPECT_NE(list->items()[6], list->items()[13]);
}

TEST(Keys, HugeIntegersRenderInHexBeyond4300Digits)
{
    // 2**8000 has 2409 digits: decimal, as Python prints it
    std::string le(1001, '\0');
    le[1000] = 1;
    const std::string dec = bigIntToDecimal(le);
    EXPECT_EQ(dec.size(), 2409u);
    EXPECT_EQ(dec.substr(0, 20), "17376620319380945659");
    EXPECT_EQ(dec.substr(dec.size() - 10), "7634789376");
    // 2**16000 has 4817 digits: beyond CPython's 4300-digit str() limit, hexadecimal
    std::string big(2001, '\0');
    big[2000] = 1;
    EXPECT_EQ(bigIntToDecimal(big), "0x1" + std::string(4000, '0'));
    EXPECT_EQ(bigIntToDecimal(std::string(2001, '\xff')), "-1"); // -1 in 2001 bytes is still decimal
    // -(2**15992): 1999 zero bytes, then 0xff 0xff
    EXPECT_EQ(bigIntToDecimal(std::string(1999, '\0') + "\xff\xff"), "-0x1" + std::string(3998, '0'));
    // a 64 KiB integer referenced 2000 times renders quickly
    auto u = unpickleRegression("crafted-shared-huge-int");
    const auto start = std::chrono::steady_clock::now();
    const std::string rendered = valueToJson(u->root()).dump();
    EXPECT_EQ(pyRepr(u->root(), 200).size(), 203u);
    EXPECT_LT(secondsSince(start), 5.0);
    EXPECT_EQ(rendered.substr(0, 4), "[\"0x");
}

// --- tensor statistics at the ends of the double range --------------------------------------------------------------

TEST(TensorStatistics, ExtremeRangesGiveAHistogram)
{
    constexpr double kMax = std::numeric_limits<double>::max();
    const std::vector<std::pair<std::string, std::vector<double>>> cases = {
        {"constant_1e300", {1e300, 1e300, 1e300}}, // min == max beyond 2^53: +-0.5 does not widen the range
        {"constant_max", {kMax, kMax}},
        {"constant_lowest", {-kMax}},
        {"full_range", {-kMax, 0.0, kMax}}, // hi - lo overflows to inf
        {"wide", {-1e308, -1.0, 1.0, 1e308}},
        {"ordinary", {0.0, 1.0, 2.0, 3.0}},
    };
    TempDir tmp;
    StateTree tree;
    for (const auto& [name, values] : cases) {
        TensorToWrite t;
        t.dtype = DType::Float64;
        t.shape = {static_cast<int64_t>(values.size())};
        const std::vector<double> data = values;
        t.produce = [data](const ByteSink& sink) {
            sink(reinterpret_cast<const uint8_t*>(data.data()), data.size() * sizeof(double));
        };
        tree.setTensor({KeyPathElem::fromKey(name)}, std::move(t));
    }
    const std::string path = (tmp.path / "extremes.pt").string();
    TorchSaveWriter::write(tree, path);
    const CheckpointPtr cp = openCheckpoint(path);
    for (const auto& [name, values] : cases) {
        SCOPED_TRACE(name);
        const Entry* e = cp->find(name);
        ASSERT_NE(e, nullptr);
        const TensorStats s = computeTensorStats(*cp, *e, 8);
        EXPECT_EQ(s.numel, static_cast<int64_t>(values.size()));
        EXPECT_EQ(s.finite, s.numel);
        ASSERT_EQ(s.histogramCounts.size(), 8u);
        ASSERT_EQ(s.histogramEdges.size(), 9u);
        int64_t total = 0;
        for (auto c : s.histogramCounts) {
            EXPECT_GE(c, 0);
            total += c;
        }
        EXPECT_EQ(total, s.numel) << "every finite value in a bin";
        for (size_t i = 0; i < s.histogramEdges.size(); ++i) {
            EXPECT_TRUE(std::isfinite(s.histogramEdges[i])) << i;
            if (i > 0) {
                EXPECT_LE(s.histogramEdges[i - 1], s.histogramEdges[i]) << i;
            }
        }
        EXPECT_LE(s.histogramEdges.front(), s.min);
        EXPECT_GE(s.histogramEdges.back(), s.max);
        if (name == "full_range" || name == "wide") {
            EXPECT_EQ(s.histogramCounts.front(), 1); // the lowest value in the first bin,
            EXPECT_EQ(s.histogramCounts.back(), 1); // the highest in the last (not everything in bin 0)
        }
    }
}

// --- many files ---------------------------------------------------------------------------------------------------

TEST(ManyFiles, MappingMoreFilesThanTheSoftLimitRaisesIt)
{
    // every mapped file keeps its descriptor, and a DCP folder can hold thousands of data files: past the soft limit
    // (1024 on most desktops) MappedFile::open raises it to the hard limit instead of failing with EMFILE
    struct rlimit saved
    { };
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
    if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 512) GTEST_SKIP() << "hard limit on open files below 512";
    struct rlimit low = saved;
    low.rlim_cur = 128;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    std::vector<std::shared_ptr<const MappedFile>> maps;
    std::string failure;
    try {
        for (int i = 0; i < 400; ++i)
            maps.push_back(MappedFile::open((kData / "limits" / "zero_size.pt").string()));
    } catch (const Error& e) {
        failure = e.what();
    }
    struct rlimit now
    { };
    ::getrlimit(RLIMIT_NOFILE, &now);
    maps.clear();
    ::setrlimit(RLIMIT_NOFILE, &saved);
    EXPECT_EQ(failure, "");
    EXPECT_GT(now.rlim_cur, 400u);
}
