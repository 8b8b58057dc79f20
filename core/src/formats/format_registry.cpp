// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/format_registry.h"
#include "optscope/base/error.h"
#include "optscope/formats/dcp/dcp_reader.h"
#include "optscope/formats/deepspeed/deepspeed_universal_reader.h"
#include "optscope/formats/deepspeed/deepspeed_zero_reader.h"
#include "optscope/formats/hf_trainer/hf_trainer_reader.h"
#include "optscope/formats/megatron/megatron_dist_reader.h"
#include "optscope/formats/safetensors/safetensors_reader.h"
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/formats/torch_save_ranks/torch_save_ranks_reader.h"
#include "optscope/io/byte_source.h"

#include <algorithm>
#include <cstdio>

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

/// a file no path rule recognised: torch.save or safetensors by its content
CheckpointPtr openFileByContent(const std::string& path, const Progress& progress)
{
    auto file = openByteSource(path);
    if (file->size() == 0) throw Error(ErrorKind::Format, file->path(), "is empty (0 bytes), not a checkpoint");
    // the first bytes say which (one ranged read when remote)
    const uint64_t headSize = std::min(file->size(), kTorchSaveHeadBytes);
    const uint8_t* head = file->bytes(0, headSize);
    if (!looksLikeTorchSave(head, headSize)) {
        // by content, or by name: a damaged .safetensors file gets the safetensors reader's own error
        const std::string sfx = ".safetensors";
        if (SafetensorsReader::looksLikeSafetensors(head, headSize)
            || (path.size() > sfx.size() && path.compare(path.size() - sfx.size(), sfx.size(), sfx) == 0))
            return SafetensorsReader::open(path, progress);
        throw Error(ErrorKind::Format, file->path(),
            "is not a torch.save file, a safetensors file or a DCP checkpoint (it starts with bytes "
                + describeStart(head, headSize)
                + "; expected a zip archive 'PK\\x03\\x04', a legacy torch pickle or a safetensors header "
                  "length and '{')");
    }
    return TorchSaveReader::open(file, progress); // the source already open: a small remote file was fetched twice
}

} // namespace

const std::vector<FormatInfo>& formatRegistry()
{
    using F = CheckpointFormat;
    using W = OtherWorldSize;
    // {format, looksFor, score, probe, folderNames, open, writerLibrary, writerClassPrefix, loaderReadsDataObjects,
    //  loadsThroughDcp, otherWorldSize, fixWritesDcp, stepsPerParamGroup}
    static const std::vector<FormatInfo> r = {
        {F::MegatronDist, "a Megatron-Core torch_dist folder (metadata.json, common.pt)", 90,
            [](const std::string& p, bool dir) { return dir && MegatronDistReader::looksLikeMegatron(p); },
            {MegatronDistReader::kLatestFile, MegatronDistReader::kMetadataJson, MegatronDistReader::kCommonFile},
            MegatronDistReader::open, "Megatron-Core", "megatron.core.", false, true, W::LoaderDecides, false, true},
        {F::Dcp, "a torch.distributed.checkpoint folder (.metadata)", 80,
            [](const std::string& p, bool) { return DcpReader::looksLikeDcp(p); },
            {DcpReader::kMetadataFile, DcpReader::kFabricMetaFile}, DcpReader::open, "", "", true, true,
            W::ReshardedOnLoad, true, false},
        {F::HfTrainer, "a Hugging Face Trainer folder (optimizer.pt)", 70,
            [](const std::string& p, bool dir) { return dir && HfTrainerReader::looksLikeTrainerFolder(p); },
            {HfTrainerReader::kOptimizerFiles[0], HfTrainerReader::kOptimizerFiles[1],
                HfTrainerReader::kTrainerStateFile},
            HfTrainerReader::open, "", "", false, false, W::FullStateDict, false, false},
        {F::DeepSpeedZero, "DeepSpeed ZeRO checkpoint files", 60,
            [](const std::string& p, bool) { return DeepSpeedZeroReader::looksLikeZero(p); },
            {DeepSpeedZeroReader::kLatestFile}, DeepSpeedZeroReader::open, "DeepSpeed", "deepspeed.", false, false,
            W::SavedOnly, false, false},
        {F::DeepSpeedUniversal, "DeepSpeed universal checkpoint files", 50,
            [](const std::string& p, bool) { return DeepSpeedUniversalReader::looksLikeUniversal(p); },
            {DeepSpeedUniversalReader::kZeroFolder, DeepSpeedUniversalReader::kOptimizerStateFile,
                DeepSpeedUniversalReader::kLatestFile},
            DeepSpeedUniversalReader::open, "DeepSpeed", "deepspeed.", false, false, W::Universal, false, false},
        {F::Safetensors, "model.safetensors or a safetensors index", 40,
            [](const std::string& p, bool) { return SafetensorsReader::looksLikeSafetensorsPath(p); },
            {SafetensorsReader::kIndexFile, SafetensorsReader::kSingleFile}, SafetensorsReader::open, "", "", false,
            false, W::FullStateDict, false, false},
        {F::TorchSaveRanks, "one set of per-rank torch.save files (rank0.pt, rank1.pt, ...)", 30,
            [](const std::string& p, bool dir) { return dir && TorchSaveRanksReader::looksLikeRankFiles(p); },
            {}, // rank files are found by listing (over plain HTTP: the common names, asked for by the reader)
            TorchSaveRanksReader::open, "", "", false, false, W::ReshardedOnLoad, false, false},
        // any other file: torch.save or safetensors by its content (openCheckpoint's last resort, which also names
        // the bytes it found)
        {F::TorchSave, "a torch.save file", 1, [](const std::string&, bool dir) { return !dir; }, {}, openFileByContent,
            "", "", false, false, W::FullStateDict, false, false},
        // a second way to read torch.save (formatInfo gives the general row above: rows of one format come general
        // first)
        {F::TorchSave, "pytorch_model.bin or its shards' index (pytorch_model.bin.index.json)", 35,
            [](const std::string& p, bool) { return TorchSaveReader::looksLikeHfModel(p); },
            {TorchSaveReader::kShardIndexFile, TorchSaveReader::kSingleModelFile}, TorchSaveReader::openHfModel, "", "",
            false, false, W::FullStateDict, false, false},
    };
    return r;
}

const std::vector<const FormatInfo*>& formatsByScore()
{
    static const std::vector<const FormatInfo*> r = [] {
        std::vector<const FormatInfo*> byScore;
        for (const auto& f : formatRegistry())
            byScore.push_back(&f);
        std::sort(byScore.begin(), byScore.end(),
            [](const FormatInfo* a, const FormatInfo* b) { return a->score > b->score; });
        return byScore;
    }();
    return r;
}

const FormatInfo& formatInfo(CheckpointFormat format)
{
    for (const auto& f : formatRegistry())
        if (f.format == format) return f;
    return *formatsByScore().back(); // the last resort
}

} // namespace optscope
