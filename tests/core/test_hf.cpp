// SPDX-License-Identifier: GPL-3.0-or-later
// safetensors files and Hugging Face Trainer folders (tests/data/hf, written by real PyTorch 2.6 and Debian's
// python3-safetensors: tests/fixtures/make_hf_fixtures.py, which records the truth in expected.json).
#include "optscope/analysis/checkpoint_check.h"
#include "optscope/analysis/diagnosis.h"
#include "optscope/analysis/diff_report.h"
#include "optscope/analysis/gather.h"
#include "optscope/analysis/verify_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/formats/safetensors/safetensors_reader.h"
#include "optscope/io/sha256.h"
#include "optscope/model/element_decoder.h"
#include "optscope/optim/param_table.h"
#include "optscope/tensor/chunk_reader.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <unistd.h>

using namespace optscope;
namespace fs = std::filesystem;

namespace {

const std::string kHf = std::string(OPTSCOPE_TEST_DATA) + "/hf";

nlohmann::json expected()
{
    std::ifstream in(kHf + "/expected.json");
    return nlohmann::json::parse(in);
}

std::string hashOf(const Checkpoint& cp, const Entry& e)
{
    if (e.tensor->numel() == 0) return Sha256::hex("", 0);
    EXPECT_EQ(e.tensor->chunks.size(), 1u) << e.key;
    const ChunkData d = ChunkReader::resolve(cp, e, e.tensor->chunks[0]);
    EXPECT_TRUE(d.isContiguous()) << e.key;
    return Sha256::hex(d.data(), d.nbytes());
}

std::vector<double> valuesOf(const Checkpoint& cp, const Entry& e, size_t n)
{
    if (e.tensor->numel() == 0) return {};
    const ChunkData d = ChunkReader::resolve(cp, e, e.tensor->chunks[0]);
    return ElementDecoder::decode(
        d.data(), std::min<size_t>(n, static_cast<size_t>(e.tensor->numel())), e.tensor->dtype);
}

/// every tensor of expected.json, by value and by bytes, under key prefix @p prefix
void expectDtypeTensors(const Checkpoint& cp)
{
    const auto ex = expected()["tensors"];
    size_t tensors = 0;
    for (const auto& e : cp.entries)
        tensors += e.isTensor();
    EXPECT_EQ(tensors, ex.size());
    for (const auto& [name, want] : ex.items()) {
        const Entry* e = cp.find(name);
        ASSERT_TRUE(e) << name;
        ASSERT_TRUE(e->isTensor()) << name;
        EXPECT_EQ(std::string(dtypeName(e->tensor->dtype)), want["dtype"].get<std::string>()) << name;
        EXPECT_EQ(e->tensor->shape, want["shape"].get<std::vector<int64_t>>()) << name;
        EXPECT_EQ(hashOf(cp, *e), want["sha256"].get<std::string>()) << name;
        const auto values = valuesOf(cp, *e, 8);
        const auto wantValues = want["values"].get<std::vector<double>>();
        ASSERT_EQ(values.size(), wantValues.size()) << name;
        for (size_t i = 0; i < values.size(); ++i)
            EXPECT_EQ(values[i], wantValues[i]) << name << "[" << i << "]";
    }
}

class TempDir
{
public:
    TempDir()
    {
        std::random_device rd;
        m_path = fs::temp_directory_path() / ("optscope-hf-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
        fs::create_directories(m_path);
    }
    ~TempDir()
    {
        std::error_code ec;
        fs::remove_all(m_path, ec);
    }
    fs::path operator/(const std::string& n) const { return m_path / n; }
    const fs::path& path() const { return m_path; }

private:
    fs::path m_path;
};

void writeFile(const fs::path& p, const std::string& bytes)
{
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// a safetensors file with header @p json (padded as the writer pads) and @p dataBytes zero bytes of data
std::string safetensors(const std::string& json, size_t dataBytes, uint64_t lengthOverride = 0)
{
    std::string h = json;
    while (h.size() % 8)
        h += ' ';
    uint64_t n = lengthOverride ? lengthOverride : h.size();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i)
        out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + h + std::string(dataBytes, '\0');
}

/// opening @p bytes as a .safetensors file throws an Error that names the file and says @p what
void expectRejected(const std::string& bytes, const std::string& what)
{
    TempDir dir;
    const fs::path p = dir / "bad.safetensors";
    writeFile(p, bytes);
    try {
        openCheckpoint(p.string());
        ADD_FAILURE() << "opened: " << what;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
}

} // namespace

TEST(Safetensors, EveryDtypeMatchesPyTorch)
{
    const auto cp = openCheckpoint(kHf + "/single/model.safetensors");
    EXPECT_EQ(cp->format, CheckpointFormat::Safetensors);
    EXPECT_STREQ(checkpointFormatName(cp->format), "safetensors");
    EXPECT_NE(cp->formatDetail.find("format: pt"), std::string::npos) << cp->formatDetail;
    EXPECT_TRUE(cp->warnings.empty());
    expectDtypeTensors(*cp);
    // names as-is: dots are part of the name, the path is one element
    const Entry* cube = cp->find("layers.10.cube");
    ASSERT_TRUE(cube);
    EXPECT_EQ(cube->path.size(), 1u);
    EXPECT_EQ(cube->tensor->chunks[0].source.strides, (std::vector<int64_t> {12, 4, 1}));
}

TEST(Safetensors, ShardedIndexAndFolderOpenAsOneCheckpoint)
{
    for (const std::string& p : {kHf + "/sharded", kHf + "/sharded/model.safetensors.index.json"}) {
        SCOPED_TRACE(p);
        const auto cp = openCheckpoint(p);
        EXPECT_EQ(cp->format, CheckpointFormat::Safetensors);
        EXPECT_TRUE(cp->warnings.empty());
        expectDtypeTensors(*cp);
        std::set<std::string> files;
        for (const auto& e : cp->entries)
            files.insert(e.tensor->chunks.at(0).source.file);
        EXPECT_EQ(
            files, (std::set<std::string> {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
    }
}

TEST(Safetensors, MissingShardIsAnErrorWarningNamingIt)
{
    TempDir dir;
    fs::copy(kHf + "/sharded", dir.path(), fs::copy_options::recursive);
    fs::remove(dir / "model-00002-of-00002.safetensors");
    const auto cp = openCheckpoint(dir.path().string());
    ASSERT_TRUE(cp->hasErrors());
    EXPECT_EQ(cp->warnings[0].code, ReaderCode::MissingFile);
    EXPECT_NE(cp->warnings[0].message.find("model-00002-of-00002.safetensors"), std::string::npos);
    EXPECT_FALSE(cp->entries.empty()); // the first shard's tensors are there
    const CheckReport report = checkCheckpoint(*cp, {});
    bool missing = false;
    for (const auto& f : report.findings)
        missing = missing || f.code == FindingCode::MissingFile;
    EXPECT_TRUE(missing);
}

TEST(Safetensors, IndexPointingOutsideTheFolderIsRefused)
{
    TempDir dir;
    writeFile(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "../evil.safetensors"}})");
    EXPECT_THROW(openCheckpoint((dir / "model.safetensors.index.json").string()), Error);
}

TEST(Safetensors, HostileHeadersAreErrorsNamingTheFile)
{
    const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    expectRejected(std::string("\x05\0\0", 3), "shorter than a safetensors header length");
    expectRejected(safetensors(ok, 8, uint64_t(1) << 40), "out of bounds");
    expectRejected(safetensors(ok, 8, 4096), "runs past the end");
    expectRejected(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8), "not valid JSON");
    expectRejected(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "begin 8 > end 0");
    expectRejected(safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "needs 12");
    expectRejected(safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "not a list of sizes");
    expectRejected(
        safetensors(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", 8), "2^63");
    expectRejected(safetensors(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "data_offsets");
    expectRejected(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       8),
        "overlap");
    expectRejected(safetensors(R"({"__metadata__":{"format":3}})", 0), "__metadata__");
}

TEST(Safetensors, CutShortDataAndUnrepresentableDtypesAreEntryErrors)
{
    TempDir dir;
    // b reaches 8 bytes past the end: an error on b, a readable a
    writeFile(dir / "cut.safetensors",
        safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]},)"
                    R"("c":{"dtype":"F4","shape":[4],"data_offsets":[24,26]},)"
                    R"("d":{"dtype":"Q7","shape":[2],"data_offsets":[26,27]}})",
            16));
    const auto cp = openCheckpoint((dir / "cut.safetensors").string());
    ASSERT_TRUE(cp->find("a"));
    EXPECT_EQ(cp->find("a")->tensor->chunks.size(), 1u);
    ASSERT_TRUE(cp->find("b"));
    EXPECT_TRUE(cp->find("b")->tensor->chunks.empty());
    ASSERT_TRUE(cp->find("c"));
    EXPECT_FALSE(cp->find("c")->isTensor());
    EXPECT_FALSE(cp->find("c")->error.empty());
    ASSERT_TRUE(cp->find("d"));
    EXPECT_FALSE(cp->find("d")->isTensor());
    std::set<std::string> codes;
    for (const auto& w : cp->warnings) {
        codes.insert(readerCodeName(w.code));
        EXPECT_TRUE(w.isError);
        EXPECT_NE(w.message.find("cut.safetensors"), std::string::npos) << w.message;
    }
    EXPECT_EQ(codes, (std::set<std::string> {"chunk-out-of-range", "unsupported-dtype"}));
}

TEST(Safetensors, EveryTruncationOfARealFileIsAnErrorOrAnErrorWarning)
{
    std::ifstream in(kHf + "/single/model.safetensors", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    TempDir dir;
    const fs::path p = dir / "model.safetensors";
    for (size_t len = 0; len < bytes.size(); len += 7) {
        writeFile(p, bytes.substr(0, len));
        try {
            const auto cp = openCheckpoint(p.string());
            EXPECT_TRUE(cp->hasErrors()) << len;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << len << ": " << e.what();
        }
    }
}

namespace {

struct TrainerCase
{
    std::string name;
    std::shared_ptr<const Checkpoint> folder;
    std::shared_ptr<const Checkpoint> raw; ///< optimizer.pt on its own (integer ids)
    nlohmann::json truth;
};

TrainerCase openCase(const std::string& name)
{
    TrainerCase c;
    c.name = name;
    c.folder = openCheckpoint(kHf + "/" + name);
    c.raw = openCheckpoint(kHf + "/" + name + "/optimizer.pt");
    c.truth = expected()["checkpoints"][name];
    return c;
}

/// the name safetensors keeps for @p fqn (save_model drops one of a tied pair and records it in the metadata)
std::string storedName(const nlohmann::json& truth, const std::string& fqn)
{
    const auto& meta = truth["safetensors_metadata"];
    return meta.contains(fqn) ? meta[fqn].get<std::string>() : fqn;
}

} // namespace

TEST(HfTrainer, FolderIsOneCheckpointWithModelOptimizerSchedulerAndState)
{
    const TrainerCase c = openCase("checkpoint-3");
    const Checkpoint& cp = *c.folder;
    EXPECT_EQ(cp.format, CheckpointFormat::HfTrainer);
    EXPECT_FALSE(cp.hasErrors());
    EXPECT_NE(cp.formatDetail.find("not read: rng_state.pth"), std::string::npos) << cp.formatDetail;
    ASSERT_TRUE(cp.find("trainer_state.log_history.2.step")); // flattened as DCP flattens
    EXPECT_EQ(cp.find("trainer_state.log_history.2.step")->value->integer, 3);
    const Entry* step = cp.find("trainer_state.global_step");
    ASSERT_TRUE(step);
    EXPECT_EQ(step->value->integer, 3);
    ASSERT_TRUE(cp.find("scheduler.last_epoch"));
    EXPECT_EQ(cp.find("scheduler.last_epoch")->value->integer, 3);
    ASSERT_TRUE(cp.find("model.layers.1.mlp.fc.weight"));
    ASSERT_TRUE(cp.find("optim.param_groups.0.weight_decay"));
    EXPECT_DOUBLE_EQ(cp.find("optim.param_groups.0.weight_decay")->value->real, 0.01);
    // params now name the parameters
    const Entry* params = cp.find("optim.param_groups.0.params");
    ASSERT_TRUE(params);
    ASSERT_EQ(params->value->size(), c.truth["groups"][0].size());
    EXPECT_EQ(params->value->item(0)->text, "pos_emb");
    // the model part's tensors equal the model.safetensors file's
    const auto model = openCheckpoint(kHf + "/checkpoint-3/model.safetensors");
    for (const auto& e : model->entries) {
        const Entry* f = cp.find("model." + e.key);
        ASSERT_TRUE(f) << e.key;
        EXPECT_EQ(hashOf(cp, *f), hashOf(*model, e)) << e.key;
    }
}

TEST(HfTrainer, IdsAreNamedAsTheTrainerGroupsThem)
{
    // checked by value: optim.state.<fqn>.exp_avg of the folder is the bytes of state.<id>.exp_avg of optimizer.pt
    for (const char* name : {"checkpoint-3", "checkpoint-tied", "checkpoint-frozen", "checkpoint-ambiguous",
             "checkpoint-bin", "checkpoint-bin-sharded"}) {
        SCOPED_TRACE(name);
        const TrainerCase c = openCase(name);
        EXPECT_FALSE(c.folder->hasErrors());
        EXPECT_EQ(c.folder->paramOrigins.size(), c.truth["ids"].size());
        const ParamTable table = ParamTable::build(*c.folder);
        ASSERT_EQ(table.sources.size(), 1u);
        EXPECT_EQ(table.sources[0], NameSource::TrainerGroups);
        size_t wrong = 0;
        for (const ParamRow& r : table.rows) {
            ASSERT_TRUE(c.truth["ids"].contains(r.id)) << r.fqn << " id " << r.id;
            const std::string truth = storedName(c.truth, c.truth["ids"][r.id].get<std::string>());
            const Entry* mine = c.folder->find("optim.state." + r.fqn + ".exp_avg");
            const Entry* raw = c.raw->find("state." + r.id + ".exp_avg");
            ASSERT_TRUE(mine && raw) << r.fqn;
            if (r.fqn == truth) {
                EXPECT_EQ(hashOf(*c.folder, *mine), hashOf(*c.raw, *raw)) << r.fqn;
                continue;
            }
            // shapes cannot tell same-shaped parameters apart: a wrong name must be marked as an assumed order
            ++wrong;
            EXPECT_EQ(r.confidence, Confidence::OrderAssumed)
                << "id " << r.id << " named " << r.fqn << ", is " << truth;
        }
        // q/k/v/o of both layers come out k, o, q, v by name; a torch.save model (pytorch_model.bin) keeps
        // named_parameters() order, so every name there is exact
        EXPECT_EQ(wrong, std::string(name) == "checkpoint-ambiguous" ? 8u : 0u);
        if (std::string(name).rfind("checkpoint-bin", 0) == 0) {
            for (const ParamRow& r : table.rows)
                EXPECT_EQ(r.confidence, Confidence::Exact) << r.fqn;
        }
        // frozen parameters are in no group and have no state
        for (const auto& f : c.truth["frozen"])
            EXPECT_FALSE(c.folder->find("optim.state." + f.get<std::string>() + ".exp_avg")) << f;
    }
}

TEST(HfTrainer, ConfidenceSaysWhatShapesDecide)
{
    const TrainerCase c = openCase("checkpoint-3");
    const ParamTable table = ParamTable::build(*c.folder);
    std::map<std::string, Confidence> conf;
    for (const auto& r : table.rows)
        conf[r.fqn] = r.confidence;
    EXPECT_EQ(conf["pos_emb"], Confidence::ShapeUnique);
    EXPECT_EQ(conf["layers.1.mlp.fc.weight"], Confidence::IndexOrder);
    EXPECT_EQ(conf["embed.weight"], Confidence::OrderAssumed); // head.weight has its shape
    EXPECT_EQ(conf["layers.0.norm1.weight"], Confidence::OrderAssumed);
    const auto j = table.toJson();
    EXPECT_EQ(j["params"][0]["confidence"], "unique shape");
    EXPECT_EQ(j["params"][0]["id"], "0");
}

TEST(HfTrainer, ReshardsToDcpAndLoadsBackBitIdentical)
{
    // the one model: a Trainer folder (bf16 model, fp32 state) and a sharded safetensors model go through the same
    // reshard -> load -> gather as DCP checkpoints
    for (const std::string& path : {kHf + "/checkpoint-tied", kHf + "/sharded"})
        for (int m : {1, 3}) {
            VerifyOptions o;
            o.worldSize = m;
            const VerifyReport r = verifyByLoad(*openCheckpoint(path), o);
            EXPECT_TRUE(r.identical()) << path << " M=" << m << ": " << r.toJson().dump().substr(0, 1500);
        }
}

TEST(HfTrainer, ChangedModelKeepsIdsAndIsAFinding)
{
    const TrainerCase c = openCase("checkpoint-changed");
    EXPECT_TRUE(c.folder->hasErrors());
    EXPECT_TRUE(c.folder->paramOrigins.empty());
    EXPECT_TRUE(c.folder->find("optim.state.0.exp_avg"));
    const CheckReport report = checkCheckpoint(*c.folder, {});
    bool mapping = false;
    for (const auto& f : report.findings)
        mapping = mapping || f.code == FindingCode::ParamMapping;
    EXPECT_TRUE(mapping);
}

TEST(HfTrainer, DiagnoseOptimizerAgainstModelSafetensors)
{
    auto diagnose = [](const std::string& name) {
        const auto optim = openCheckpoint(kHf + "/" + name + "/optimizer.pt");
        const auto model = openCheckpoint(kHf + "/" + name + "/model.safetensors");
        const ModelParams params = ModelParams::fromCheckpoint(*model);
        EXPECT_FALSE(params.orderKnown);
        return diagnoseCheckpoint(*optim, &params);
    };
    auto codes = [](const Diagnosis& d) {
        std::set<FindingCode> out;
        for (const auto& f : d.findings)
            out.insert(f.code);
        return out;
    };
    auto verdict = [](const Diagnosis& d, LoadPath p) {
        for (const auto& v : d.verdicts)
            if (v.path == p) return v.outcome;
        return LoadOutcome::NotApplicable;
    };
    {
        const Diagnosis d = diagnose("checkpoint-3");
        EXPECT_EQ(codes(d), (std::set<FindingCode> {FindingCode::IdKeyed}));
        EXPECT_EQ(verdict(d, LoadPath::OptimizerLoadStateDict), LoadOutcome::Loads);
    }
    {
        const Diagnosis d = diagnose("checkpoint-frozen");
        EXPECT_EQ(codes(d), (std::set<FindingCode> {FindingCode::IdKeyed, FindingCode::FrozenParams}));
        EXPECT_EQ(verdict(d, LoadPath::OptimizerLoadStateDict), LoadOutcome::Loads);
    }
    {
        const Diagnosis d = diagnose("checkpoint-changed");
        EXPECT_TRUE(codes(d).count(FindingCode::ParamGroupsMismatch));
        EXPECT_EQ(verdict(d, LoadPath::OptimizerLoadStateDict), LoadOutcome::Raises);
    }
}

TEST(ParamTable, ModuleOrderGuessAndTrainerDecayRule)
{
    EXPECT_TRUE(moduleOrderLess("layers.2.w", "layers.10.w"));
    EXPECT_TRUE(moduleOrderLess("pos_emb", "embed.weight")); // own parameters before children's
    EXPECT_TRUE(moduleOrderLess("fc.weight", "fc.bias"));
    EXPECT_FALSE(moduleOrderLess("fc.bias", "fc.weight"));
    EXPECT_TRUE(trainerDecaysByName("layers.0.mlp.fc.weight"));
    EXPECT_FALSE(trainerDecaysByName("layers.0.mlp.fc.bias"));
    EXPECT_FALSE(trainerDecaysByName("model.layers.0.input_layernorm.weight"));
    EXPECT_FALSE(trainerDecaysByName("model.norm.weight"));
    EXPECT_FALSE(trainerDecaysByName("blocks.0.attn_norm.weight"));
    EXPECT_TRUE(trainerDecaysByName("normalizer.weight"));
    EXPECT_TRUE(trainerDecaysByName("model.norm.weight", true)); // before 4.48 only "bias" counted
}

TEST(HfTrainer, NamesOnAnAssumedOrderAreAWarningNotClean)
{
    // a safetensors model keeps no parameter order: names of same-shaped parameters are a guess, and check, diagnose
    // and diff say so (check called the folder clean while 8 of these 22 names were wrong); a torch.save
    // model keeps the order, and there is nothing to say
    const CheckReport ambiguous = checkCheckpoint(*openCheckpoint(kHf + "/checkpoint-ambiguous"));
    const auto it = std::find_if(ambiguous.findings.begin(), ambiguous.findings.end(),
        [](const Finding& f) { return f.code == FindingCode::ParamOrderAssumed; });
    ASSERT_NE(it, ambiguous.findings.end());
    EXPECT_EQ(it->severity, Severity::Warning);
    EXPECT_NE(it->message.find("22 of the names"), std::string::npos) << it->message;
    EXPECT_FALSE(it->fix.empty());
    EXPECT_FALSE(ambiguous.clean());
    const CheckReport exact = checkCheckpoint(*openCheckpoint(kHf + "/checkpoint-bin"));
    for (const auto& f : exact.findings)
        EXPECT_NE(f.code, FindingCode::ParamOrderAssumed) << f.message;
    const DiffReport d
        = diffCheckpoints(*openCheckpoint(kHf + "/checkpoint-ambiguous"), *openCheckpoint(kHf + "/checkpoint-bin"));
    EXPECT_TRUE(std::any_of(
        d.notes.begin(), d.notes.end(), [](const std::string& n) { return n.rfind("A: 22 of the names", 0) == 0; }));
}

TEST(HfTrainer, AccelerateFoldersOfSeveralModelsNameWhatIsNotRead)
{
    // accelerate's save_state: optimizer.bin, scheduler.bin, random_states_0.pkl, and for a second model and optimizer
    // model_1.safetensors, optimizer_1.bin (the sweep found those ignored without a word)
    const fs::path dir = fs::temp_directory_path() / ("optscope-accelerate-" + std::to_string(std::random_device {}()));
    fs::create_directories(dir);
    const fs::path src = kHf + "/checkpoint-3";
    fs::copy_file(src / "model.safetensors", dir / "model.safetensors");
    fs::copy_file(src / "model.safetensors", dir / "model_1.safetensors");
    fs::copy_file(src / "optimizer.pt", dir / "optimizer.bin");
    fs::copy_file(src / "optimizer.pt", dir / "optimizer_1.bin");
    fs::copy_file(src / "scheduler.pt", dir / "scheduler.bin");
    std::ofstream(dir / "random_states_0.pkl") << "x";
    const auto cp = openCheckpoint(dir.string());
    EXPECT_EQ(cp->format, CheckpointFormat::HfTrainer);
    EXPECT_TRUE(cp->find("scheduler.last_epoch") || cp->find("scheduler._step_count")) << cp->formatDetail;
    EXPECT_NE(
        cp->formatDetail.find("not read: model_1.safetensors, optimizer_1.bin, random_states_0.pkl"), std::string::npos)
        << cp->formatDetail;
    const auto w = std::find_if(cp->warnings.begin(), cp->warnings.end(),
        [](const CheckpointWarning& x) { return x.code == ReaderCode::UnreadFile; });
    ASSERT_NE(w, cp->warnings.end());
    EXPECT_NE(w->message.find("model_1.safetensors, optimizer_1.bin are not part of this view"), std::string::npos)
        << w->message;
    fs::remove_all(dir);
}

TEST(HfModelBin, ShardedTorchSaveModelOpensAsOneStateDictFromItsFolderOrIndex)
{
    // save_pretrained(safe_serialization=False) without a Trainer around it: the model folder alone, or its index
    const auto trainer = openCheckpoint(kHf + "/checkpoint-bin-sharded");
    TempDir dir;
    for (const auto& e : fs::directory_iterator(kHf + "/checkpoint-bin-sharded"))
        if (e.path().filename().string().rfind("pytorch_model", 0) == 0)
            fs::copy(e.path(), dir / e.path().filename().string());
    for (const std::string& p : {dir.path().string(), (dir / "pytorch_model.bin.index.json").string()}) {
        SCOPED_TRACE(p);
        const auto cp = openCheckpoint(p);
        EXPECT_EQ(cp->format, CheckpointFormat::TorchSave);
        EXPECT_NE(cp->formatDetail.find("2 of 2 shards"), std::string::npos) << cp->formatDetail;
        EXPECT_TRUE(cp->warnings.empty());
        size_t models = 0;
        for (const auto& e : trainer->entries)
            if (e.path[0].key.str() == "model") {
                ++models;
                const Entry* mine = cp->find(e.key.substr(6));
                ASSERT_TRUE(mine) << e.key;
                EXPECT_EQ(hashOf(*cp, *mine), hashOf(*trainer, e)) << e.key;
            }
        EXPECT_EQ(cp->entries.size(), models);
        EXPECT_GT(models, 0u);
    }
    // unsharded: a folder holding pytorch_model.bin is that file
    TempDir one;
    fs::copy(dir / "pytorch_model-00001-of-00002.bin", one / "pytorch_model.bin");
    const auto single = openCheckpoint(one.path().string());
    EXPECT_EQ(single->format, CheckpointFormat::TorchSave);
    EXPECT_EQ(single->entries.size(), openCheckpoint((one / "pytorch_model.bin").string())->entries.size());
    // the index placing a tensor in the other shard than the one holding it: read from where it is, as a loader that
    // reads every shard finds it, with a warning (was: an error in inspect while diff and gather went on silently)
    TempDir moved;
    for (const auto& e : fs::directory_iterator(dir.path()))
        fs::copy(e.path(), moved / e.path().filename().string());
    {
        nlohmann::json index = nlohmann::json::parse(std::ifstream(moved / "pytorch_model.bin.index.json"));
        auto& map = index["weight_map"];
        const std::string first = map.begin().key(), shard = map.begin().value();
        map[first] = shard == "pytorch_model-00001-of-00002.bin" ? "pytorch_model-00002-of-00002.bin"
                                                                 : "pytorch_model-00001-of-00002.bin";
        std::ofstream(moved / "pytorch_model.bin.index.json") << index.dump();
    }
    const auto misplaced = openCheckpoint(moved.path().string());
    EXPECT_FALSE(misplaced->hasErrors());
    ASSERT_FALSE(misplaced->warnings.empty());
    EXPECT_EQ(misplaced->warnings[0].code, ReaderCode::IndexMismatch);
    EXPECT_TRUE(diffCheckpoints(*misplaced, *openCheckpoint(dir.path().string())).equal);
    // a shard the index names but the folder lacks: an error warning naming it, the other shard read; nothing is
    // gathered from it and diff calls it equal to nothing (were: a partial gather, exit 0; diff EQUAL to a copy)
    fs::remove(dir / "pytorch_model-00002-of-00002.bin");
    const auto missing = openCheckpoint(dir.path().string());
    ASSERT_TRUE(missing->hasErrors());
    EXPECT_NE(missing->warnings[0].message.find("pytorch_model-00002-of-00002.bin"), std::string::npos);
    EXPECT_FALSE(missing->entries.empty());
    TempDir out;
    EXPECT_THROW(gatherCheckpoint(*missing, (out / "g.pt").string(), {}), Error);
    EXPECT_FALSE(fs::exists(out / "g.pt"));
    const DiffReport self = diffCheckpoints(*missing, *openCheckpoint(dir.path().string()));
    EXPECT_FALSE(self.equal);
    ASSERT_FALSE(self.notes.empty());
    EXPECT_NE(self.notes[0].find("is not whole"), std::string::npos);
}

// trainer_state.json becomes values as Python's json.load makes them (read as it is parsed, with no JSON document in
// between): a repeated key keeps its first place and takes its last value, numbers keep their kinds, a value nested
// past 64 levels is cut with a placeholder and its siblings read on, and a file that is not JSON says so
TEST(HfTrainer, TrainerStateIsReadAsJsonLoadReadsIt)
{
    TempDir dir;
    fs::copy(kHf + "/checkpoint-3", dir.path(), fs::copy_options::recursive);
    std::string deep;
    for (int i = 0; i < 70; ++i)
        deep += "[";
    deep += "1";
    for (int i = 0; i < 70; ++i)
        deep += "]";
    std::string many = "{"; // a dict of many keys (looked up by a map of its own), one repeated
    for (int i = 0; i < 40; ++i)
        many += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
    many += "\"k5\": \"again\"}";
    std::ofstream(dir / "trainer_state.json")
        << R"({"a": 1, "b": {"x": 2, "x": 3.5, "y": null}, "a": true, "big": 18446744073709551615, "neg": -7,)"
        << R"( "s": "caf\u00e9", "deep": )" << deep << R"(, "after": [false, 1e-5], "many": )" << many << "}";
    auto cp = openCheckpoint(dir.path().string());
    EXPECT_FALSE(cp->hasErrors());
    std::vector<std::string> keys;
    for (const Entry& e : cp->entries)
        if (e.key.rfind("trainer_state.", 0) == 0) keys.push_back(e.key);
    ASSERT_GE(keys.size(), 6u);
    EXPECT_EQ(keys[0], "trainer_state.a"); // the first place of "a"
    EXPECT_EQ(keys[1], "trainer_state.b.x");
    EXPECT_EQ(keys[2], "trainer_state.b.y");
    EXPECT_EQ(cp->find("trainer_state.a")->value->kind, PyKind::Bool); // its last value
    EXPECT_DOUBLE_EQ(cp->find("trainer_state.b.x")->value->real, 3.5);
    EXPECT_EQ(cp->find("trainer_state.b.y")->value->kind, PyKind::None);
    EXPECT_EQ(cp->find("trainer_state.big")->value->kind, PyKind::Float); // past int64
    EXPECT_EQ(cp->find("trainer_state.neg")->value->integer, -7);
    EXPECT_EQ(cp->find("trainer_state.s")->value->text, "caf\xc3\xa9");
    EXPECT_EQ(pyRepr(cp->find("trainer_state.after")->value, 40), "[False, 1e-05]"); // read on past the cut
    EXPECT_EQ(cp->find("trainer_state.many.k5")->value->text, "again");
    EXPECT_EQ(cp->find("trainer_state.many.k39")->value->integer, 39);
    EXPECT_EQ(cp->find("trainer_state.many.k5") + 1, cp->find("trainer_state.many.k6")); // in its first place
    // the root is level 0: lists at levels 1 to 64, the one at 65 cut
    const PyValue* v = cp->find("trainer_state.deep")->value;
    int lists = 0;
    for (; v && v->kind == PyKind::List && v->size() == 1; v = v->item(0))
        ++lists;
    EXPECT_EQ(lists, 64);
    ASSERT_TRUE(v && v->kind == PyKind::Str);
    EXPECT_EQ(v->text, "<nested too deep>");

    std::ofstream(dir / "trainer_state.json", std::ios::trunc) << R"({"a": [1, 2)";
    cp = openCheckpoint(dir.path().string());
    ASSERT_TRUE(cp->hasErrors());
    bool said = false;
    for (const auto& w : cp->warnings)
        said = said || w.message.find("trainer_state.json is not valid JSON") != std::string::npos;
    EXPECT_TRUE(said);
    std::ofstream(dir / "trainer_state.json", std::ios::trunc) << R"([1, 2])";
    cp = openCheckpoint(dir.path().string());
    said = false;
    for (const auto& w : cp->warnings)
        said = said || w.message.find("trainer_state.json is not a JSON object") != std::string::npos;
    EXPECT_TRUE(said);
}
