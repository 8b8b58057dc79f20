// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/base/error.h"
#include "optscope/formats/dcp_reader.h"
#include "optscope/formats/deepspeed_universal_reader.h"
#include "optscope/formats/deepspeed_zero_reader.h"
#include "optscope/formats/hf_trainer_reader.h"
#include "optscope/formats/megatron_dist_reader.h"
#include "optscope/formats/safetensors_reader.h"
#include "optscope/formats/torch_save_ranks_reader.h"
#include "optscope/formats/torch_save_reader.h"
#include "optscope/io/fault_injection.h"
#include "optscope/io/mapped_file.h"

#include <cstdio>
#include <filesystem>

namespace fs = std::filesystem;

namespace optscope {

namespace {
std::string describeStart(const uint8_t* data, uint64_t size)
{
    std::string hex;
    char buf[4];
    for (uint64_t i = 0; i < std::min<uint64_t>(size, 8); ++i) {
        std::snprintf(buf, sizeof buf, "%02x", data[i]);
        hex += buf;
        if (i + 1 < std::min<uint64_t>(size, 8)) hex += ' ';
    }
    return hex;
}
} // namespace

static CheckpointPtr openFileByContent(const std::string& path, const Progress& progress);

static CheckpointPtr openUnguarded(const std::string& path, const Progress& progress)
{
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (ec || !fs::exists(status)) throw Error(ErrorKind::Io, path, "no such file or directory");
    if (fs::is_directory(status)) {
        // before DCP: a torch_dist folder is a DCP folder plus metadata.json and common.pt
        if (MegatronDistReader::looksLikeMegatron(path)) return MegatronDistReader::open(path, progress);
        if (DcpReader::looksLikeDcp(path)) return DcpReader::open(path, progress);
        if (HfTrainerReader::looksLikeTrainerFolder(path)) return HfTrainerReader::open(path, progress);
        // before safetensors: a Trainer run under DeepSpeed keeps global_stepN/ and `latest` beside its model files
        if (DeepSpeedZeroReader::looksLikeZero(path)) return DeepSpeedZeroReader::open(path, progress);
        if (DeepSpeedUniversalReader::looksLikeUniversal(path)) return DeepSpeedUniversalReader::open(path, progress);
        if (SafetensorsReader::looksLikeSafetensorsPath(path)) return SafetensorsReader::open(path, progress);
        if (TorchSaveRanksReader::looksLikeRankFiles(path)) return TorchSaveRanksReader::open(path, progress);
        if (const std::string gaps = TorchSaveRanksReader::missingRankFiles(path); !gaps.empty())
            throw Error(ErrorKind::Format, path, gaps);
        throw Error(ErrorKind::Format, path,
            "is a directory without a .metadata file (not a torch.distributed.checkpoint folder), without "
            "model.safetensors or a safetensors index, without optimizer.pt (not a Hugging Face Trainer folder), "
            "without DeepSpeed ZeRO or universal checkpoint files and without one set of per-rank torch.save files "
            "(rank0.pt, rank1.pt, ...)");
    }
    if (DcpReader::looksLikeDcp(path)) return DcpReader::open(path, progress);
    if (SafetensorsReader::looksLikeSafetensorsPath(path)) return SafetensorsReader::open(path, progress);
    if (DeepSpeedZeroReader::looksLikeZero(path)) return DeepSpeedZeroReader::open(path, progress);
    if (DeepSpeedUniversalReader::looksLikeUniversal(path)) return DeepSpeedUniversalReader::open(path, progress);
    return openFileByContent(path, progress);
}

static CheckpointPtr openFileByContent(const std::string& path, const Progress& progress)
{
    auto file = MappedFile::open(path);
    if (file->size() == 0) throw Error(ErrorKind::Format, path, "is empty (0 bytes), not a checkpoint");
    if (!looksLikeTorchSave(file->data(), file->size())) {
        // by content, or by name: a damaged .safetensors file gets the safetensors reader's own error
        const std::string sfx = ".safetensors";
        if (SafetensorsReader::looksLikeSafetensors(file->data(), file->size())
            || (path.size() > sfx.size() && path.compare(path.size() - sfx.size(), sfx.size(), sfx) == 0))
            return SafetensorsReader::open(path, progress);
        throw Error(ErrorKind::Format, path,
            "is not a torch.save file, a safetensors file or a DCP checkpoint (it starts with bytes "
                + describeStart(file->data(), file->size())
                + "; expected a zip archive 'PK\\x03\\x04', a legacy torch pickle or a safetensors header "
                  "length and '{')");
    }
    return TorchSaveReader::open(path, progress);
}

static CheckpointPtr openGuarded(
    const std::string& path, const Progress& progress, CheckpointPtr (*open)(const std::string&, const Progress&))
{
    const uint64_t faults = MappedFile::faultCount();
    CheckpointPtr cp;
    try {
        cp = open(path, progress);
        cp->files->checkFaults();
    } catch (const Error& e) {
        // a file cut short while its index was parsed reads as zeros: that, not the parse error, is what happened
        if (e.kind() != ErrorKind::Cancelled && MappedFile::faultCount() != faults) {
            std::error_code ec;
            const auto size = fs::is_regular_file(path, ec) ? fs::file_size(path, ec) : 0;
            throw Error(ErrorKind::Io, path,
                "changed while being read" + (ec ? std::string() : " (now " + std::to_string(size) + " bytes)"));
        }
        // every error names its file: one raised where no file is known (a table's limit) is the checkpoint's
        if (e.file().empty() && e.kind() != ErrorKind::Cancelled) throw Error(e.kind(), path, e.detail(), e.offset());
        throw;
    }
    pausePoint("opened");
    return cp;
}

CheckpointPtr openCheckpoint(const std::string& path, const Progress& progress)
{
    return openGuarded(path, progress, openUnguarded);
}

static CheckpointPtr openFileUnguarded(const std::string& path, const Progress& progress)
{
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (ec || !fs::exists(status)) throw Error(ErrorKind::Io, path, "no such file or directory");
    if (fs::is_directory(status)) throw Error(ErrorKind::Usage, path, "is a folder: --raw opens one file");
    return openFileByContent(path, progress);
}

CheckpointPtr openCheckpointFile(const std::string& path, const Progress& progress)
{
    return openGuarded(path, progress, openFileUnguarded);
}

} // namespace optscope
