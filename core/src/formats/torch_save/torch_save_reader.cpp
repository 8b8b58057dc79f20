// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/formats/torch_save/torch_save_reader.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_builder.h"
#include "optscope/formats/state_flattener.h"
#include "optscope/formats/weight_index.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/storage.h"
#include "optscope/io/zip_inflate.h"

#include <filesystem>

namespace optscope {

std::shared_ptr<const Checkpoint> TorchSaveReader::open(const std::string& path, const Progress& progress)
{
    return open(openByteSource(path), progress);
}

std::shared_ptr<const Checkpoint> TorchSaveReader::open(
    std::shared_ptr<const ByteSource> file, const Progress& progress)
{
    progress(0.0, "reading");
    // a remote archive zipped again (a local one is inflated when opened: openByteSource)
    if (file->isRemote()) file = inflatedIfCompressed(std::move(file));
    auto cp = std::make_shared<Checkpoint>();
    cp->format = CheckpointFormat::TorchSave;
    cp->path = file->path(); // a URL without its query (a presigned URL's signature is a credential)
    cp->arena = std::make_shared<PyArena>();
    // the file goes by its name as a listing shows it ("my file.pt", not "my%20file.pt")
    const std::string fileName = locationName(cp->path);
    cp->files = std::make_shared<CheckpointFiles>(parentLocation(cp->path));
    cp->files->add(fileName, file);

    TorchSaveArchive ar = readTorchSaveArchive(file, 0, file->size(), *cp->arena, cp->path);
    cp->pickleProtocol = ar.pickleProtocol;
    cp->root = ar.root;
    cp->formatDetail = ar.legacy ? "legacy (pre-1.6) format" : "zip, prefix '" + ar.prefix + "/'";
    if (ar.bigEndian) cp->formatDetail += ", big-endian";
    if (const std::string as = file->readAs(); !as.empty()) cp->formatDetail += ", " + as;

    CheckpointBuilder builder(*cp);
    builder.consumeGraphTensors(); // cp->root's tensors are read through the entries only
    try {
        cp->entries.reserve(countStateLeaves(ar.root));
        forEachStateLeaf(ar.root, [&](FlattenedLeaf&& leaf) {
            progress.checkCancelled();
            builder.addLeaf(std::move(leaf.path), leaf.value, ar, fileName, cp->path, leaf.shared);
        });
    } catch (const Error& e) {
        if (!e.file().empty()) throw;
        throw Error(e.kind(), cp->path, e.detail(), e.offset()); // the flattener's limits name no file
    }
    builder.addPickleWarnings(ar.warnings);
    builder.finish();
    progress(1.0, "reading");
    return cp;
}

namespace {

bool endsWith(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

bool TorchSaveReader::looksLikeHfModel(const std::string& path)
{
    if (isFolder(path))
        return isFile(childLocation(path, kShardIndexFile)) || isFile(childLocation(path, kSingleModelFile));
    return endsWith(locationName(path), ".bin.index.json") && isFile(path);
}

std::shared_ptr<const Checkpoint> TorchSaveReader::openHfModel(const std::string& path, const Progress& progress)
{
    const bool folder = isFolder(path);
    if (folder && !isFile(childLocation(path, kShardIndexFile))) {
        // unsharded: the one file, as a checkpoint of its folder's name
        auto cp = std::const_pointer_cast<Checkpoint>(open(childLocation(path, kSingleModelFile), progress));
        cp->formatDetail = std::string(kSingleModelFile) + ", " + cp->formatDetail;
        return cp;
    }
    progress(0.0, "reading pytorch_model shards");
    // a URL's query tag stays with the folder (its shards are asked for with it); the index goes by its name
    const std::string root = folder ? path : parentLocation(path);
    const std::string indexFile = folder ? kShardIndexFile : locationName(path);
    auto cp = std::make_shared<Checkpoint>();
    cp->format = CheckpointFormat::TorchSave;
    cp->path = displayLocation(path);
    cp->arena = std::make_shared<PyArena>();
    cp->files = std::make_shared<CheckpointFiles>(root);
    if (!folder && isUrl(path)) cp->files->add(indexFile, openByteSource(path)); // the URL as given
    CheckpointBuilder builder(*cp);
    cp->formatDetail = "Hugging Face torch.save shards, " + indexFile + " ("
        + addTorchSaveShards(*cp, builder, indexFile, {}, progress) + ")";
    builder.finish();
    progress(1.0, "reading pytorch_model shards");
    return cp;
}

} // namespace optscope
