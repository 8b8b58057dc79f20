// SPDX-License-Identifier: GPL-3.0-or-later
// Property tests for the safety rules (tests/safety/safety.py drives the CLI with real hostile files): over many
// random inputs, escaped text holds no control or direction character, CSV cells never start a formula, a region
// listed k times is k - 1 overlap pairs, lexical '..' escapes are caught, every spelling of an input is refused
// as an output, a tensor of many chunks is compared box by box in linear time, and a URL's token query never
// reaches a location that readers build names on (and so any message).
#include "optscope/analysis/diff_report.h"
#include "optscope/base/display_text.h"
#include "optscope/base/error.h"
#include "optscope/formats/torch_save/torch_save_writer.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/csv.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/output_file.h"
#include "optscope/io/remote_object.h"
#include "optscope/io/storage.h"
#include "optscope/model/checkpoint.h"

#include "optscope/model/shard_layout.h"
#include <new>
#include <stdexcept>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <malloc.h>
#include <random>
#include <unistd.h>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

std::string randomBytes(std::mt19937& rng, size_t maxLen)
{
    // mostly the dangerous neighbourhoods: C0, DEL, C1 lead bytes, the bidi marks' lead bytes, and plain text
    static const std::vector<std::string> pieces = {"\x1b", "\r", "\n", "\t", "\x07", std::string(1, '\0'), "\x7f",
        "\xc2\x85", "\xc2\x9b", "\xe2\x80\xae", "\xe2\x81\xa6", "\xd8\x9c", "\xed\xa0\x80", "\xff", "\xc3", "a", "Z",
        "\\", "=", "\xe2\x80\x8e", "\xf0\x9f\x98\x80"};
    std::string s;
    const size_t n = rng() % maxLen;
    for (size_t i = 0; i < n; ++i)
        s += rng() % 4 == 0 ? std::string(1, static_cast<char>(rng() % 256)) : pieces[rng() % pieces.size()];
    return s;
}

} // namespace

TEST(Safety, RunningOutOfMemoryIsSaidSoNotAsAnInternalError)
{
    // the CLI printed "internal error: std::bad_alloc" for a checkpoint too large for the memory it may use, which
    // reads as a crash; the CLI and the app both say it through unexpectedErrorText
    const std::string oom = unexpectedErrorText(std::bad_alloc());
    EXPECT_EQ(oom.rfind("ran out of memory (", 0), 0u) << oom;
    EXPECT_EQ(oom.find("bad_alloc"), std::string::npos) << oom;
    EXPECT_EQ(unexpectedErrorText(std::length_error("vector::_M_default_append")),
        "internal error: vector::_M_default_append");
}

TEST(Safety, DisplayTextLeavesNoControlOrDirectionCharacter)
{
    std::mt19937 rng(26);
    for (int round = 0; round < 20000; ++round) {
        const std::string in = randomBytes(rng, 24);
        for (bool keepNewlines : {false, true}) {
            const std::string out = displayText(in, keepNewlines);
            ASSERT_TRUE(isUtf8(out)) << hexBytes(in);
            for (size_t i = 0; i < out.size(); ++i) {
                const auto c = static_cast<unsigned char>(out[i]);
                ASSERT_FALSE(c < 0x20 && !(keepNewlines && (c == '\n' || c == '\t'))) << hexBytes(in);
                ASSERT_NE(c, 0x7f) << hexBytes(in);
                if (c == 0xc2 && i + 1 < out.size()) {
                    ASSERT_GE(static_cast<unsigned char>(out[i + 1]), 0xa0) << hexBytes(in);
                }
            }
            for (const char* mark : {"\xe2\x80\xae", "\xe2\x80\xad", "\xe2\x81\xa6", "\xe2\x81\xa9", "\xe2\x80\x8e",
                     "\xe2\x80\x8f", "\xd8\x9c"})
                ASSERT_EQ(out.find(mark), std::string::npos) << hexBytes(in);
            ASSERT_EQ(needsDisplayEscape(in, keepNewlines), out != in);
        }
    }
    EXPECT_EQ(displayText("evil\xe2\x80\xaegpj.exe"), "evil\\u202egpj.exe");
    EXPECT_EQ(displayText("a\nb"), "a\\x0ab");
    EXPECT_EQ(displayText("a\nb", true), "a\nb");
    // PyTorch's own layout of a multi-line error ("\n\tMissing key(s) in state_dict: ...") reads as it prints
    EXPECT_EQ(displayText("for Small:\n\tMissing", true), "for Small:\n\tMissing");
    EXPECT_EQ(displayText("a\tb"), "a\\x09b");
    // DEL as a JSON escape too (--json output passes through here); zero-width and line-separator characters visible
    EXPECT_EQ(displayText("del\x7f"
                          "key"),
        "del\\u007fkey");
    EXPECT_EQ(displayText("layer\xe2\x80\x8b.weight"), "layer\\u200b.weight");
    EXPECT_EQ(displayText("\xef\xbb\xbf"
                          "bom \xe2\x80\xa8line"),
        "\\ufeffbom \\u2028line");
    // soft hyphen, a variation selector, a Hangul filler, a tag character (as a surrogate pair: JSON reads it)
    EXPECT_EQ(displayText("a\xc2\xad"
                          "b\xef\xb8\x8f"
                          "c\xe3\x85\xa4"
                          "d\xf3\xa0\x81\x81"),
        "a\\u00adb\\ufe0fc\\u3164d\\udb40\\udc41");
    EXPECT_EQ(displayText("caf\xc3\xa9 \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xf0\x9f\x98\x80"); // text stays text
    EXPECT_EQ(displayText("lone\xed\xa0\x80"), "lone\\xed\\xa0\\x80");
}

// A checkpoint of more files than the process may keep open (4,096 ranks under `ulimit -n 1024`) closes the least
// recently read ones; a closed file that changed is still found, when it is opened again and by checkUnchanged()
TEST(Safety, FilesClosedToStayWithinTheBudgetAreStillCheckedUnchanged)
{
    const fs::path dir = fs::temp_directory_path() / ("optscope-budget-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto write = [&](const char* name, const std::string& bytes) { std::ofstream(dir / name) << bytes; };
    write("a", "aaaa");
    write("b", "bbbb");
    write("c", "cccc");
    {
        // (the budget counts every checkpoint's open files: this test's own budget is 1 above what is open now)
        const CheckpointFiles files(dir.string(), 1);
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(files.open("a")->all()), 4), "aaaa");
        files.open("b");
        files.open("c"); // a and b are closed by now, if the budget is full
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(files.open("a")->all()), 4), "aaaa");
        files.open("b");
        files.open("c");
        EXPECT_NO_THROW(files.checkUnchanged());
        write("a", "AAAAA"); // a closed file rewritten
        EXPECT_THROW(
            {
                try {
                    files.checkUnchanged();
                } catch (const Error& e) {
                    EXPECT_NE(std::string(e.what()).find("changed while being read"), std::string::npos) << e.what();
                    throw;
                }
            },
            Error);
        EXPECT_THROW(files.open("a"), Error);
    }
    fs::remove_all(dir);
}

namespace {

/// bytes that opening their path again would not give back: as a remote torch.save archive's inflated copy
/// (zip_inflate.h), whose URL names the deflated archive. No detached check
class BytesNotAtTheirPath final : public ByteSource
{
public:
    BytesNotAtTheirPath(std::string path, std::string bytes)
        : m_bytes(std::move(bytes))
    {
        m_path = std::move(path);
        m_base = reinterpret_cast<const uint8_t*>(m_bytes.data());
        m_size = m_bytes.size();
    }
    bool faulted() const override { return false; }
    void checkUnchanged() const override { }
    void adviseSequential(uint64_t, uint64_t) const override { }
    void release(uint64_t, uint64_t) const override { }

private:
    void fetch(uint64_t, uint64_t) const override { }
    std::string m_bytes;
};

} // namespace

// The budget closes only a file that opening its path again brings back (checked then): before, a remote archive's
// inflated copy was closed like a local file, and the next read of it got the deflated archive from its URL
TEST(Safety, ASourceThatItsPathWouldNotGiveBackIsNeverClosedByTheBudget)
{
    const fs::path dir = fs::temp_directory_path() / ("optscope-budget-held-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const char* name : {"a", "b", "c"})
        std::ofstream(dir / name) << "on disk";
    {
        const CheckpointFiles files(dir.string(), 1);
        const auto held = std::make_shared<BytesNotAtTheirPath>((dir / "a").string(), "inflated");
        files.add("a", held);
        files.open("b");
        files.open("c"); // the budget is full: the least recently opened closable file goes
        EXPECT_EQ(files.open("a").get(), held.get());
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(files.open("a")->all()), 8), "inflated");
    }
    fs::remove_all(dir);
}

TEST(Safety, CsvCellsNeverStartAFormula)
{
    std::mt19937 rng(27);
    for (int round = 0; round < 20000; ++round) {
        std::string in = randomBytes(rng, 12);
        if (round % 3 == 0) in.insert(0, 1, "=+-@\t\r"[rng() % 6]);
        const std::string cell = CsvWriter::field(in);
        // what a spreadsheet sees: the cell's text after CSV unquoting
        std::string shown = cell;
        if (!cell.empty() && cell.front() == '"') {
            shown.clear();
            for (size_t i = 1; i + 1 < cell.size(); ++i) {
                shown += cell[i];
                if (cell[i] == '"') ++i;
            }
        }
        if (shown.empty()) continue;
        char* end = nullptr;
        std::strtod(shown.c_str(), &end);
        const bool number = end == shown.c_str() + shown.size();
        const bool formulaStart = std::string("=+-@\t\r").find(shown.front()) != std::string::npos;
        ASSERT_TRUE(!formulaStart || (number && shown.front() != '=' && shown.front() != '@')) << hexBytes(in);
    }
    EXPECT_EQ(CsvWriter::field("=cmd|' /C calc'!A0"), "\"'=cmd|' /C calc'!A0\"");
    EXPECT_EQ(CsvWriter::field("-0.5"), "-0.5");
    EXPECT_EQ(CsvWriter::field("-inf"), "-inf");
    EXPECT_EQ(CsvWriter::field("-x"), "\"'-x\"");
}

TEST(Safety, ARegionListedKTimesIsKMinusOnePairs)
{
    std::mt19937 rng(28);
    for (int round = 0; round < 50; ++round) {
        const int64_t rows = 1 + rng() % 16;
        const size_t k = 1 + rng() % 3000;
        TensorEntry t;
        t.shape = {rows, 4};
        t.dtype = DType::Float32;
        for (size_t i = 0; i < k; ++i) {
            const int64_t off[2] = {0, 0}, sizes[2] = {rows, 4};
            t.chunks.appendBox(static_cast<int>(i % 7), off, sizes, 2);
        }
        const ShardLayout L = ShardLayout::of(t);
        ASSERT_EQ(L.overlaps.size(), k - 1);
        ASSERT_FALSE(L.overlapsTruncated);
        EXPECT_EQ(L.coveredElements, rows * 4);
    }
    // partly overlapping distinct boxes: listed up to the cap, then said to be truncated
    TensorEntry t;
    t.shape = {10000, 4};
    t.dtype = DType::Float32;
    for (int64_t i = 0; i < 5000; ++i) {
        const int64_t off[2] = {i, 0}, sizes[2] = {100, 4};
        t.chunks.appendBox(0, off, sizes, 2);
    }
    const ShardLayout L = ShardLayout::of(t);
    EXPECT_EQ(L.overlaps.size(), ShardLayout::kMaxOverlapPairs);
    EXPECT_TRUE(L.overlapsTruncated);
    EXPECT_FALSE(L.complete());
}

TEST(Safety, PathsThatClimbOutOfTheRootAreOutside)
{
    const fs::path root = fs::temp_directory_path() / ("optscope-safety-" + std::to_string(::getpid()));
    fs::create_directories(root / "sub");
    std::ofstream(root / "sub" / "f") << "x";
    std::mt19937 rng(29);
    const std::vector<std::string> parts = {"sub", "..", ".", "f", "x"};
    for (int round = 0; round < 5000; ++round) {
        std::string rel;
        int depth = 0;
        bool escapes = false;
        const size_t n = 1 + rng() % 5;
        for (size_t i = 0; i < n; ++i) {
            const std::string& p = parts[rng() % parts.size()];
            rel += (i ? "/" : "") + p;
            depth += p == ".." ? -1 : p == "." ? 0 : 1;
            escapes = escapes || depth < 0;
        }
        const MemberStat m = statInside(root.string(), rel);
        if (escapes)
            ASSERT_EQ(m.kind, MemberStat::Outside) << rel;
        else
            ASSERT_NE(m.kind, MemberStat::Outside) << rel;
    }
    EXPECT_EQ(statInside(root.string(), "/etc/passwd").kind, MemberStat::Outside);
    fs::create_symlink("/etc/hostname", root / "link");
    EXPECT_EQ(statInside(root.string(), "link").kind, MemberStat::Outside);
    EXPECT_EQ(statInside(root.string(), "sub/f").kind, MemberStat::Regular);
    fs::remove_all(root);
}

TEST(Safety, EverySpellingOfAnInputIsRefusedAsOutput)
{
    const fs::path dir = fs::temp_directory_path() / ("optscope-spell-" + std::to_string(::getpid()));
    fs::create_directories(dir / "ckpt" / "deep");
    std::ofstream(dir / "in.pt") << "x";
    fs::create_directory_symlink(dir / "ckpt", dir / "alias");
    fs::create_hard_link(dir / "in.pt", dir / "hard.pt");
    const std::vector<std::string> inputs = {(dir / "in.pt").string(), (dir / "ckpt").string()};
    for (const std::string& out : {(dir / "in.pt").string(), (dir / "." / "in.pt").string(),
             (dir / "ckpt" / ".." / "in.pt").string(), (dir / "hard.pt").string(), (dir / "ckpt").string(),
             (dir / "ckpt" / "new.pt").string(), (dir / "ckpt" / "deep" / "x").string(), (dir / "alias" / "x").string(),
             (dir / "alias").string(), dir.string()}) {
        try {
            refuseOutputOverInputs(out, inputs);
            ADD_FAILURE() << out << " was not refused";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Usage) << out;
        }
    }
    for (const std::string& out : {(dir / "out.pt").string(), (dir / "ckpt2").string(), (dir / "in.pt2").string()})
        EXPECT_NO_THROW(refuseOutputOverInputs(out, inputs)) << out;
    fs::remove_all(dir);
}

TEST(Safety, ADictOfManyKeysIsPlacedInLinearTime)
{
    // the same tree as a naive build, for 200k keys in one dict (was N^2 / 2 comparisons)
    StateTree tree;
    for (int i = 0; i < 200000; ++i)
        tree.setValue({KeyPathElem::fromKey("d"), KeyPathElem::fromKey("k" + std::to_string(i))}, nullptr);
    for (int i = 0; i < 200000; i += 997) // again: the same node, not a new one
        tree.setValue({KeyPathElem::fromKey("d"), KeyPathElem::fromKey("k" + std::to_string(i))}, nullptr);
    const std::vector<size_t> root = tree.children(tree.node(tree.root()));
    ASSERT_EQ(root.size(), 1u);
    const std::vector<size_t> d = tree.children(tree.node(root[0]));
    ASSERT_EQ(d.size(), 200000u);
    EXPECT_EQ(tree.node(d[123456]).key, "k123456");
}

TEST(Safety, AStateTreeLeafHoldsNoContainer)
{
    // a million values of an optimizer's state are a million leaves: each costs one node with its key, and no
    // allocation of its own (gather of 1M values peaked at 302 MB in the nodes' vector alone, and later at 230 MB in
    // per-container vectors and a node-based hash map)
    static_assert(sizeof(StateTree::Node) <= 64, "a leaf node stays small");
    StateTree tree;
    tree.setValue({KeyPathElem::fromKey("l"), KeyPathElem::fromIndex(3)}, nullptr);
    tree.setValue({KeyPathElem::fromKey("l"), KeyPathElem::fromIndex(1), KeyPathElem::fromKey("x")}, nullptr);
    const std::vector<size_t> l = tree.children(tree.node(tree.children(tree.node(tree.root()))[0]));
    ASSERT_EQ(l.size(), 4u); // padded with None up to index 3
    EXPECT_EQ(tree.node(l[0]).kind, StateTree::Kind::None);
    EXPECT_EQ(tree.node(l[3]).kind, StateTree::Kind::Value);
    // a None padding later descended into becomes a dict with contents of its own
    const auto& x = tree.node(l[1]);
    ASSERT_EQ(x.kind, StateTree::Kind::Dict);
    const std::vector<size_t> xs = tree.children(x);
    ASSERT_EQ(xs.size(), 1u);
    EXPECT_EQ(tree.node(xs[0]).key, "x");
    // an index placed again is the same node; a key inside a list is refused, not an index of 2^64 - 1
    tree.setValue({KeyPathElem::fromKey("l"), KeyPathElem::fromIndex(3)}, nullptr);
    EXPECT_EQ(tree.children(tree.node(tree.children(tree.node(tree.root()))[0])).size(), 4u);
    EXPECT_THROW(tree.setValue({KeyPathElem::fromKey("l"), KeyPathElem::fromKey("y")}, nullptr), Error);
}

TEST(Safety, AMillionStateTreeLeavesCostTheirNodesAlone)
{
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "the sanitizer's allocator keeps its own accounting";
#else
    // {"state": {i: {"step": v, "lr": v}}} for 500k ids, as gather builds it for 1M values: the heap grows by the
    // nodes (64 bytes each, 1.5M of them) and the lookup table, 107 MB, not by per-container vectors and a node-based
    // hash map (283 MB before)
    const KeyPathElem state = KeyPathElem::fromKey("state"), step = KeyPathElem::fromKey("step"),
                      lr = KeyPathElem::fromKey("lr");
    auto heap = [] { // large blocks are mapped apart from the arena: both count
        const struct mallinfo2 m = mallinfo2();
        return m.uordblks + m.hblkhd;
    };
    const size_t before = heap();
    {
        StateTree tree;
        tree.reserve(2 + 500000 * 3); // exactly the nodes: mallinfo counts reserved room, untouched or not
        for (int i = 0; i < 500000; ++i) {
            const KeyPathElem id = KeyPathElem::fromKey(std::to_string(i));
            tree.setValue({state, id, step}, nullptr);
            tree.setValue({state, id, lr}, nullptr);
        }
        const size_t grown = heap() - before;
        EXPECT_LT(grown, size_t(1500000) * 64 + (size_t(32) << 20)) << grown / 1000000 << " MB";
        EXPECT_EQ(tree.node(tree.children(tree.node(tree.root()))[0]).size, 500000u);
    }
#endif
}

namespace {

/// a [rows, 4] float32 tensor "w" over the raw values in @p file (row-major), in the chunks @p layout appends: made
/// here, not by PyTorch, for the cost of many chunks alone
template<typename Layout> Checkpoint rawCheckpoint(const fs::path& file, int64_t rows, Layout layout)
{
    Checkpoint cp;
    cp.format = CheckpointFormat::Dcp;
    cp.path = file.parent_path().string();
    cp.files = std::make_shared<CheckpointFiles>(cp.path);
    Entry e;
    e.path = {KeyPathElem::fromKey("w")};
    e.key = joinKeyPath(e.path);
    e.kind = EntryKind::Tensor;
    TensorEntry t;
    t.shape = {rows, 4};
    t.dtype = DType::Float32;
    const uint64_t length = static_cast<uint64_t>(rows) * 16;
    layout([&](int rank, std::vector<int64_t> offsets, std::vector<int64_t> sizes) {
        TensorChunk c;
        c.rank = rank;
        c.source.file = file.filename().string();
        c.source.length = length;
        c.source.storageOffset = offsets[0] * 4 + offsets[1];
        c.source.strides = {4, 1};
        c.offsets = std::move(offsets);
        c.sizes = std::move(sizes);
        t.chunks.push_back(c);
    });
    e.tensor = std::move(t);
    cp.entries.push_back(std::move(e));
    cp.buildIndex();
    return cp;
}

} // namespace

/// diffs over a tensor of @p rows one-row chunks (see below); returns the seconds they took
double diffManyChunks(int64_t rows)
{
    const fs::path dir = fs::temp_directory_path() / ("optscope_many_chunks_" + std::to_string(getpid()));
    fs::create_directories(dir);
    std::vector<float> values(static_cast<size_t>(rows) * 4);
    for (size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<float>(i);
    auto write = [&](const char* name) {
        std::ofstream(dir / name, std::ios::binary)
            .write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
    };
    write("a.raw");
    values[4 * (rows * 2 / 3) + 3] = -1.0f; // one element, in the column block of its own chunk below
    write("b.raw");
    // A: a chunk per row; B: columns 0-1 in one chunk over every row (each row box of A needs it), columns 2-3 a
    // chunk per row (column blocks: general boxes, not whole rows)
    const Checkpoint a = rawCheckpoint(dir / "a.raw", rows, [&](auto add) {
        for (int64_t r = 0; r < rows; ++r)
            add(static_cast<int>(r % 1024), {r, 0}, {1, 4});
    });
    const Checkpoint b = rawCheckpoint(dir / "b.raw", rows, [&](auto add) {
        add(0, {0, 0}, {rows, 2});
        for (int64_t r = 0; r < rows; ++r)
            add(1 + static_cast<int>(r % 1023), {r, 2}, {1, 2});
    });
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    // a quadratic cost shows at once: about a second for all three diffs of 20k chunks here (a sanitizer build: ten),
    // 13 s for one diff of 5k before; stop rather than run for an hour
    constexpr double kBound = 30;
    const DiffReport same = diffCheckpoints(a, a);
    EXPECT_EQ(same.entries.size(), 1u);
    EXPECT_TRUE(same.equal);
    EXPECT_EQ(same.entries.empty() ? 0 : same.entries[0].ranks.size(), static_cast<size_t>(rows));
    for (const auto& [x, y] : {std::pair {&a, &b}, std::pair {&b, &a}}) {
        if (seconds() > kBound) break;
        const DiffReport r = diffCheckpoints(*x, *y);
        EXPECT_EQ(r.entries.size(), 1u);
        if (r.entries.empty()) continue;
        EXPECT_EQ(r.entries[0].numDiff, 1);
        EXPECT_EQ(r.entries[0].ranks.size(), static_cast<size_t>(rows) + 1); // along B's layout either way
    }
    fs::remove_all(dir);
    EXPECT_LT(seconds(), kBound) << rows << " chunks";
    return seconds();
}

TEST(Safety, ATensorOfManyChunksIsComparedInLinearTime)
{
    // diff reads box by box along the side with more chunks; each box used to cost a pass (and per-chunk state) over
    // every chunk of both sides: one tensor in 10k chunks took 53 s against itself. 4x the chunks: about 4x the time
    // (a quadratic cost: 16x)
    diffManyChunks(100); // libtorch's first calls set up its dispatch tables
    const double small = diffManyChunks(5000);
    if (small > 30) return; // said already
    const double large = diffManyChunks(20000);
    std::printf("5k chunks: %.2f s, 20k chunks: %.2f s\n", small, large);
    EXPECT_LT(large, 8 * small + 0.5) << "5k chunks: " << small << " s, 20k: " << large << " s";
}

/// an optimizer's state dict of @p groups param groups of one parameter each (layer-wise learning rates), as
/// entries: state.<i>.step, param_groups.<i>.lr and .params; diff of it with itself, in seconds
double diffManyGroups(int groups)
{
    Checkpoint cp;
    cp.path = "many_groups";
    cp.arena = std::make_shared<PyArena>();
    PyArena& arena = *cp.arena;
    const auto add = [&](KeyPath path, const PyValue* value) {
        Entry e;
        e.path = std::move(path);
        e.key = joinKeyPath(e.path);
        e.value = value;
        cp.entries.push_back(std::move(e));
    };
    const auto key = [](const char* k) { return KeyPathElem::fromKey(k); };
    for (int g = 0; g < groups; ++g)
        add({key("optim"), key("state"), KeyPathElem::fromKey(std::to_string(g)), key("step")}, arena.makeInt(3));
    for (int g = 0; g < groups; ++g) {
        add({key("optim"), key("param_groups"), KeyPathElem::fromIndex(g), key("lr")}, arena.makeFloat(1e-3 * g));
        PyValue* params = arena.makeContainer(PyKind::List);
        params->container->items.push_back(arena.makeInt(g));
        add({key("optim"), key("param_groups"), KeyPathElem::fromIndex(g), key("params")}, params);
    }
    cp.buildIndex();
    const auto start = std::chrono::steady_clock::now();
    const DiffReport r = diffCheckpoints(cp, cp);
    EXPECT_TRUE(r.equal);
    EXPECT_EQ(r.count(DiffStatus::Equal), static_cast<size_t>(3 * groups));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(Safety, AnOptimizerOfManyParamGroupsIsComparedInLinearTime)
{
    // diff named each group's params entries in a pass over every entry of the checkpoint: 5,000 groups of one
    // parameter (AdamW with a learning rate per layer) took 12.6 s against itself, now 1 s. 4x the groups: about 4x
    // the time (a quadratic cost: 16x)
    diffManyGroups(100);
    const double small = diffManyGroups(2000);
    const double large = diffManyGroups(8000);
    std::printf("2k groups: %.2f s, 8k groups: %.2f s\n", small, large);
    EXPECT_LT(large, 8 * small + 0.5) << "2k groups: " << small << " s, 8k: " << large << " s";
}

TEST(Safety, AFileInTheRunsOwnFolderLooksForNoStaleTemporaries)
{
    // a DCP output's rank files go into the temporary folder the run made: looking there for an earlier run's dead
    // temporaries listed the folder once per file (a reshard to 5,000 ranks: 26 s, mostly readdir). Elsewhere a dead
    // one (its PID gone, nobody holds its lock) is removed.
    const fs::path dir = fs::temp_directory_path() / ("optscope_fresh_folder_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path dead = dir / ".x.tmp-999999999-abcdef"; // no such PID
    for (const bool fresh : {true, false}) {
        std::ofstream(dead) << "left by a killed run";
        WriteOptions options;
        options.fsync = false;
        options.inFreshFolder = fresh;
        OutputFile out((dir / "x").string(), options);
        out.write("x", 1);
        out.commit();
        EXPECT_EQ(fs::exists(dead), fresh);
    }
    fs::remove_all(dir);
}

TEST(Safety, AUrlsTokenQueryStaysOffTheLocationsReadersBuild)
{
    // readers name files by parentLocation/locationName/childLocation: a URL's query stays on the folder, and a name
    // is shown as a listing shows it
    const std::string file = "http://h/run/my%20file%2B1.pt?sig=s3cr3t";
    EXPECT_EQ(parentLocation(file), "http://h/run?sig=s3cr3t");
    EXPECT_EQ(locationName(file), "my file+1.pt");
    EXPECT_EQ(childLocation(parentLocation(file), locationName(file)), file);
    EXPECT_EQ(locationName("http://h/run/a%2Fb.pt"), "a%2Fb.pt"); // decoded, it would read as two names
    EXPECT_EQ(parentLocation("http://h/run/"), "http://h");
    EXPECT_EQ(parentLocation("http://h"), "http://h");
    EXPECT_EQ(locationName("http://h"), "");
    // an object store's key may hold '?' and '%' as any other character
    EXPECT_EQ(parentLocation("s3://b/run/x?y%20"), "s3://b/run");
    EXPECT_EQ(locationName("s3://b/run/x?y%20"), "x?y%20");
    EXPECT_EQ(parentLocation("s3://b"), "s3://b");
    EXPECT_EQ(parentLocation("run/x.pt"), "run");
    EXPECT_EQ(locationName("run/x.pt"), "x.pt");
    // what openCheckpoint builds on: the query becomes a tag, which names built on it keep and messages leave out
    // (that requests carry the query: tests/remote, against a server that wants it)
    const std::string folder = readerLocation("http://h/run/?sig=s3cr3t#part");
    EXPECT_EQ(folder.rfind("http://h/run#q=", 0), 0u) << folder;
    EXPECT_EQ(folder.find("s3cr3t"), std::string::npos) << folder;
    EXPECT_EQ(readerLocation("http://h/run?sig=s3cr3t"), folder); // the same query, the same tag
    EXPECT_NE(readerLocation("http://h/run?sig=other"), folder); // two versions are two locations
    EXPECT_EQ(childLocation(folder, "a b.pt"), "http://h/run/a%20b.pt" + folder.substr(folder.find('#')));
    EXPECT_EQ(parentLocation(childLocation(folder, "x.pt")), folder);
    EXPECT_EQ(displayLocation(folder), "http://h/run");
    // a password never shows, also pasted unencoded ('/', '?', '#', '@' in it: a malformed URL; found by a hunt)
    for (const char* url : {"http://u:S3cr3t@h:80/run", "http://u:S3cr3t/x@h/run", "http://u:S3cr3t?x@h/run",
             "http://u:S3cr3t#x@h/run", "http://u:S3c@r3t@h/run", "https://u:S3cr3t/x/y@h:8443/run/a@b",
             // digits first: the authority reads as host "u", port 1234 (shown as such before)
             "http://u:1234/S3cr3t@h/run", "http://u:1234?S3cr3t@h:80/run", "http://u:1234#S3c@h/run/a@b"}) {
        EXPECT_EQ(displayLocation(url).find("S3c"), std::string::npos) << url;
        try {
            EXPECT_EQ(displayLocation(readerLocation(url)).find("S3c"), std::string::npos) << url;
        } catch (const Error& e) { // refused, saying what to do without the secret
            EXPECT_EQ(std::string(e.what()).find("S3c"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("percent-encode"), std::string::npos) << e.what();
        }
    }
    EXPECT_THROW(readerLocation("http://u:S3cr3t/x@h/run"), Error);
    // AWS's own endpoint, as botocore addresses it: virtual-hosted for a DNS label, path-style for a dotted or legacy
    // name (it sent my.dotted.bucket.s3... under a one-label wildcard certificate, and My_Bucket.s3... as a host)
    EXPECT_EQ(awsObjectUrl("ckpt-1", "eu-west-1", "a/b.pt"), "https://ckpt-1.s3.eu-west-1.amazonaws.com/a/b.pt");
    EXPECT_EQ(
        awsObjectUrl("my.dotted.bucket", "us-east-1", "x"), "https://s3.us-east-1.amazonaws.com/my.dotted.bucket/x");
    EXPECT_EQ(awsObjectUrl("My_Bucket", "us-east-1", ""), "https://s3.us-east-1.amazonaws.com/My_Bucket/");
    EXPECT_EQ(awsObjectUrl("-bad", "us-east-1", "x"), "https://s3.us-east-1.amazonaws.com/-bad/x");
    EXPECT_EQ(displayLocation("http://u:S3c@r3t@h/run"), "http://h/run");
    EXPECT_EQ(displayLocation("http://h/run/a@b"), "http://h/run/a@b"); // an '@' in a path is no user info
    EXPECT_EQ(displayLocation("http://h:8080/run/a@b"), "http://h:8080/run/a@b");
    EXPECT_EQ(displayLocation("http://h:8080/@scope/x"), "http://h:8080/@scope/x");
    EXPECT_EQ(displayLocation("http://u:1234/S3cr3t@h:80/run"), "http://h:80/run");
    EXPECT_THROW(readerLocation("http://u:1234/S3cr3t@h/run"), Error);
    EXPECT_EQ(displayLocation("http://[::1]:8080/run"), "http://[::1]:8080/run");
    EXPECT_EQ(readerLocation("https://h/a/b.safetensors#frag"), "https://h/a/b.safetensors");
    EXPECT_EQ(readerLocation("s3://b/run/x?y"), "s3://b/run/x?y");
    EXPECT_EQ(readerLocation("run/x.pt?y"), "run/x.pt?y");
}
