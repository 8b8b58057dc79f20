// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/checkpoint_loader.h"
#include "optscope/dcp_reader.h"
#include "optscope/error.h"
#include "optscope/mapped_file.h"
#include "optscope/torch_save_reader.h"

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

CheckpointPtr openCheckpoint(const std::string& path, const Progress& progress)
{
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (ec || !fs::exists(status)) throw Error(ErrorKind::Io, path, "no such file or directory");
    if (fs::is_directory(status)) {
        if (DcpReader::looksLikeDcp(path)) return DcpReader::open(path, progress);
        throw Error(ErrorKind::Format, path,
            "is a directory without a .metadata file (not a torch.distributed.checkpoint folder)");
    }
    if (DcpReader::looksLikeDcp(path)) return DcpReader::open(path, progress);
    auto file = MappedFile::open(path);
    if (file->size() == 0) throw Error(ErrorKind::Format, path, "is empty (0 bytes), not a checkpoint");
    if (!looksLikeTorchSave(file->data(), file->size()))
        throw Error(ErrorKind::Format, path,
            "is not a torch.save file or a DCP checkpoint (it starts with bytes "
                + describeStart(file->data(), file->size())
                + "; expected a zip archive 'PK\\x03\\x04' or a legacy torch pickle)");
    return TorchSaveReader::open(path, progress);
}

} // namespace optscope
