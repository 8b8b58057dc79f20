// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/base/error.h"
#include "optscope/formats/dcp/dcp_reader.h"
#include "optscope/formats/format_registry.h"
#include "optscope/formats/torch_save_ranks/torch_save_ranks_reader.h"
#include "optscope/io/fault_injection.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"

#include <filesystem>

namespace fs = std::filesystem;

namespace optscope {

static CheckpointPtr openUnguarded(const std::string& path, const Progress& progress)
{
    const LocationKind kind = locationKind(path);
    if (kind == LocationKind::Missing)
        throw Error(ErrorKind::Io, displayLocation(path),
            isUrl(path) ? "no such object or folder" : "no such file or directory");
    const bool folder = kind == LocationKind::Folder;
    if (folder) {
        std::vector<std::string> names;
        for (const auto& f : formatRegistry())
            for (const char* name : f.folderNames)
                names.push_back(childLocation(path, name));
        statAhead(names); // plain HTTP: the probes' HEADs together (a local folder or an object store: nothing)
    }
    // a DCP data file without its .metadata: its first item is a zip, which the torch.save reader would take and fail
    // on ("ZIP64 end-of-central-directory record missing")
    if (!folder && fs::path(locationName(path)).extension() == ".distcp" && !DcpReader::looksLikeDcp(path))
        throw Error(ErrorKind::Format, displayLocation(path),
            std::string("is a torch.distributed.checkpoint data file with no ") + DcpReader::kMetadataFile
                + " beside it: DCP writes .metadata last, once every rank's data is written (a save still running, "
                  "or one that failed). Open the folder once it is there");
    for (const FormatInfo* f : formatsByScore())
        if (f->probe(path, folder)) return f->open(path, progress);
    if (const std::string gaps = TorchSaveRanksReader::missingRankFiles(path); !gaps.empty())
        throw Error(ErrorKind::Format, path, gaps);
    std::string formats;
    for (const auto& f : formatRegistry())
        if (&f != formatsByScore().back()) formats += (formats.empty() ? "" : "; ") + std::string(f.looksFor);
    if (isUrl(path) && !canListFolder(path))
        throw Error(ErrorKind::Io, displayLocation(path),
            "is no object (" + statLocation(path).detail
                + "), nor a folder holding the files a checkpoint format looks for (a folder cannot be listed over "
                  "HTTP: OptScope asked for the names each format uses): "
                + formats);
    throw Error(ErrorKind::Format, displayLocation(path),
        "is a directory that holds none of the checkpoint formats: " + formats);
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

bool formatTakesFileByName(const std::string& path)
{
    for (const FormatInfo* f : formatsByScore())
        if (f != formatsByScore().back() && f->probe(path, false)) return true;
    return false;
}

std::string checkpointPathFor(const std::string& path)
{
    return DcpReader::folderOf(path);
}

CheckpointPtr openCheckpoint(const std::string& path, const Progress& progress)
{
    return openGuarded(readerLocation(path), progress, openUnguarded);
}

static CheckpointPtr openFileUnguarded(const std::string& path, const Progress& progress)
{
    const LocationKind kind = locationKind(path);
    if (kind == LocationKind::Missing)
        throw Error(ErrorKind::Io, displayLocation(path), isUrl(path) ? "no such object" : "no such file or directory");
    if (kind == LocationKind::Folder) throw Error(ErrorKind::Usage, path, "is a folder: --raw opens one file");
    return formatInfo(CheckpointFormat::TorchSave).open(path, progress);
}

CheckpointPtr openCheckpointFile(const std::string& path, const Progress& progress)
{
    return openGuarded(readerLocation(path), progress, openFileUnguarded);
}

} // namespace optscope
