// SPDX-License-Identifier: GPL-3.0-or-later
// What the CLI prints and exits with on real checkpoints that are healthy or hold values worth a word: check and
// diagnose on a torchtitan-like DCP (io.BytesIO train state), check on non-finite weights and moments, inspect and
// gather on FSDP1 SHARDED_STATE_DICT rank files with a rank that holds no rows. The fixtures and what PyTorch did
// with them come from tests/fixtures/make_fixtures.py (groups torchtitan, non_finite, fsdp1_sharded).
#include "cli_run.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <tuple>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::string kData = OPTSCOPE_TEST_DATA;

class TempDir
{
public:
    TempDir()
    {
        std::random_device rd;
        path = fs::temp_directory_path() / ("optscope-cli-test-" + std::to_string(rd()));
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
    fs::path path;
};

std::string slurp(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

CliResult runCli(const TempDir& tmp, const std::string& args)
{
    return ::runCli(tmp.path, args);
}

TEST(CliFindings, CheckAndDiagnoseExitZeroOnADcpTrainStateOfBytesIO)
{
    TempDir tmp;
    const std::string dcp = "'" + kData + "/torchtitan/dcp'";
    CliResult r = runCli(tmp, "check " + dcp);
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("info [dcp-data-global] train_state.global_avg_losses"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("unsafe-global"), std::string::npos) << r.out;
    r = runCli(tmp, "diagnose " + dcp);
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
    // the torch.save file of the same state: torch.load(weights_only=True) refuses it, so check does not pass it
    r = runCli(tmp, "check '" + kData + "/torchtitan/torchtitan.pt'");
    EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("warning [unsafe-global] train_state.global_avg_losses"), std::string::npos) << r.out;
}

// inspect (its lines and --json) labels a global outside the safe set as check does: DeepSpeed's own classes in a
// ZeRO checkpoint and the BytesIO that dcp.load reads are info, a global in a torch.save file is an unsafe-global
// warning (inspect called DeepSpeed's classes unsafe-global warnings, check library-global info)
TEST(CliFindings, InspectLabelsGlobalsAsCheckDoes)
{
    TempDir tmp;
    for (const char* rel : {"zero/stage1/ckpt", "torchtitan/dcp", "torchtitan/torchtitan.pt", "dangerous.pt"}) {
        const std::string path = "'" + kData + "/" + rel + "'";
        const CliResult check = runCli(tmp, "check --json " + path);
        // (key, code, severity) of each global check reports (check words a DCP data global at more length)
        std::set<std::tuple<std::string, std::string, std::string>> checked;
        const nlohmann::json checkJson = nlohmann::json::parse(check.out);
        for (const auto& f : checkJson["findings"])
            checked.insert({f["key"].is_string() ? f["key"].get<std::string>() : "", f["code"], f["severity"]});
        const CliResult inspect = runCli(tmp, "inspect --json " + path);
        const CliResult lines = runCli(tmp, "inspect " + path);
        size_t globals = 0;
        const nlohmann::json inspectJson = nlohmann::json::parse(inspect.out);
        for (const auto& w : inspectJson["warnings"]) {
            const std::string code = w["code"], severity = w["severity"];
            if (code.find("-global") == std::string::npos) continue;
            ++globals;
            const std::string key = w["key"].is_string() ? w["key"].get<std::string>() : "";
            EXPECT_TRUE(checked.count({key, code, severity})) << rel << ": " << w.dump() << "\n" << check.out;
            // and the table's lines say the same
            EXPECT_NE(lines.err.find(severity + " [" + code + "]"), std::string::npos) << lines.err;
        }
        EXPECT_GT(globals, 0u) << rel;
    }
}

TEST(CliFindings, CheckReportsNonFiniteCountsAndNoDataSkipsThem)
{
    TempDir tmp;
    const nlohmann::json expected = nlohmann::json::parse(slurp(kData + "/nonfinite/expected.json"));
    for (const char* name : {"nonfinite.pt", "nonfinite_dcp_r2"}) {
        SCOPED_TRACE(name);
        const std::string path = "'" + kData + "/nonfinite/" + name + "'";
        CliResult r = runCli(tmp, "check --json " + path);
        EXPECT_EQ(r.exitCode, 1) << r.err;
        const auto j = nlohmann::json::parse(r.out);
        size_t seen = 0;
        for (const auto& f : j["findings"]) {
            if (f["code"] != "non-finite") continue;
            ++seen;
            const auto& want = expected[name][f["key"].get<std::string>()];
            EXPECT_EQ(f["severity"], "warning");
            for (const char* n : {"numel", "nan", "posinf", "neginf"})
                EXPECT_EQ(f["counts"][n].get<int64_t>(), want[n].get<int64_t>()) << n;
        }
        EXPECT_EQ(seen, expected[name].size());
        r = runCli(tmp, "check " + path);
        EXPECT_NE(r.out.find("warning [non-finite] model.0.weight: 2 NaN, 1 +inf, 1 -inf in the 12 elements"),
            std::string::npos)
            << r.out;
        // --no-data reads no tensor bytes: nothing is counted, and the structure is clean
        r = runCli(tmp, "check --no-data " + path);
        EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
        EXPECT_EQ(r.out.find("non-finite"), std::string::npos) << r.out;
    }
}

TEST(CliFindings, DiffSaysItsNumbersComeFromTheFinitePairs)
{
    // max|d|, maxrel and rms leave NaN and ±inf pairs out: a tensor whose elements differ only where one side is
    // infinite printed max|d|=0 beside diff=N/M; now the text says how many pairs the numbers are from, the NaN/inf
    // counts show whenever a pair is not finite (a +inf -> -inf swap keeps the counts), and JSON has finite_pairs
    TempDir tmp;
    const std::string a = "'" + kData + "/diff/step3.pt'", b = "'" + kData + "/diff/step4.pt'";
    CliResult r = runCli(tmp, "diff " + a + " " + b);
    EXPECT_EQ(r.exitCode, 1) << r.err;
    std::string line;
    for (std::istringstream in(r.out); std::getline(in, line);)
        if (line.find("optim.state.0.bias.exp_avg ") != std::string::npos) break;
    EXPECT_NE(line.find("(from the 8 finite pairs) diff=9/9  nan=0->0 inf=0->1"), std::string::npos) << line;
    r = runCli(tmp, "diff " + a + " " + b + " --json");
    const nlohmann::json report = nlohmann::json::parse(r.out); // (the loop's range must outlive it)
    for (const auto& e : report["entries"])
        if (e["key"] == "optim.state.0.bias.exp_avg") {
            EXPECT_EQ(e["finite_pairs"], 8) << e.dump();
        } else if (e["key"] == "optim.state.0.bias.step") {
            EXPECT_EQ(e["finite_pairs"], 1) << e.dump();
        }
}

TEST(CliFindings, InspectAndGatherOfFsdp1ShardedRankFilesWarnOfNoTensorWithoutData)
{
    TempDir tmp;
    const std::string dir = "'" + kData + "/fsdp1_sharded_r3'";
    CliResult r = runCli(tmp, "inspect " + dir);
    EXPECT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(r.err.find("tensor-without-data"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("torch_save_ranks (3 rank files"), std::string::npos) << r.out;
    r = runCli(tmp, "gather " + dir + " -o '" + (tmp.path / "full.pt").string() + "'");
    EXPECT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(r.err.find("tensor-without-data"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("tensor-without-data"), std::string::npos) << r.out;
    r = runCli(tmp, "diff '" + (tmp.path / "full.pt").string() + "' '" + kData + "/fsdp1_sharded_r3_full.pt'");
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
}

} // namespace

TEST(CliFindings, EveryCommandsHelpNamesEveryOptionItTakes)
{
    // Args::help lists, under "Also:", each option a command takes that its help text leaves out: the text must
    // name them all itself (fix's --target-optim and inspect's --raw were taken but never named)
    TempDir dir;
    const CliResult list = runCli(dir.path, "--help");
    ASSERT_EQ(list.exitCode, 0) << list.err;
    std::istringstream lines(list.out);
    std::vector<std::string> commands;
    bool inList = false;
    for (std::string line; std::getline(lines, line);) {
        if (line == "commands:") {
            inList = true;
        } else if (inList && line.rfind("  ", 0) == 0) {
            commands.push_back(line.substr(2, line.find(' ', 2) - 2));
        } else if (inList) {
            break;
        }
    }
    ASSERT_GE(commands.size(), 12u) << list.out;
    for (const auto& c : commands) {
        const CliResult r = runCli(dir.path, c + " --help");
        EXPECT_EQ(r.exitCode, 0) << c << ": " << r.err;
        EXPECT_NE(r.out.find("usage: optscope-cli " + c), std::string::npos) << c << ": " << r.out;
        EXPECT_EQ(r.out.find("\nAlso:\n"), std::string::npos) << c << " --help leaves options out:\n" << r.out;
    }
}
