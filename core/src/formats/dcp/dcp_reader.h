// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// torch.distributed.checkpoint (DCP) folders written by FileSystemWriter, PyTorch 1.13 (torch.distributed._shard.
// checkpoint) to 2.6+.
//
//   <dir>/.metadata            a pickle (protocol 4 on CPython 3.8-3.13) of Metadata, a dataclass built as
//                              NEWOBJ + BUILD {field: value}:
//     state_dict_metadata      {flat key: TensorStorageMetadata | BytesStorageMetadata}
//       TensorStorageMetadata  properties: TensorProperties (BUILD state (dtype, layout, requires_grad,
//                              memory_format, pin_memory), or a dict in old files), size: torch.Size (global shape),
//                              chunks: [ChunkStorageMetadata(offsets: torch.Size, sizes: torch.Size)]
//     planner_data             {flat key: path tuple of str keys and int list indices} (None before 2.0): the
//                              nesting. Flat keys are '.'-joined paths, but FQNs contain dots: never split them.
//     storage_data             {MetadataIndex(fqn, offset: torch.Size | absent for BYTE_IO, index hint):
//                              _StorageInfo(relative_path, offset, length[, transform_descriptors])}
//     storage_meta, version    2.4+ / ~2.5+ ("1.0.0"); informational
//   <dir>/__<rank>_<n>.distcp  items back to back; each item, tensor chunk or BYTE_IO value, is a complete
//                              torch.save archive (prefix "archive/") at its _StorageInfo range. <rank> is the rank
//                              that wrote it.
//
//   <dir>/meta.pt              Lightning Fabric's FSDP/ModelParallel strategies with state_dict_type="sharded"
//                              (lightning/fabric/strategies/fsdp.py, save_checkpoint): the DCP part holds the
//                              modules' and optimizers' state dicts, and rank 0 torch.saves everything else of the
//                              user's state (scheduler state dicts, step, hyperparameters) as one dict in meta.pt
//                              (utilities/load.py: _METADATA_FILENAME). Fabric's loader recognizes such a folder by
//                              that file (_is_sharded_checkpoint) and its consolidation (_load_distributed_checkpoint)
//                              puts meta.pt's keys at the top level, after the DCP part's (checkpoint.update). Read
//                              here the same way, as a companion file (Checkpoint::companionFiles) that reshard copies.
//
// Reading is lazy: only .metadata and the (small) BYTE_IO items are parsed on open; tensor chunks are located by
// (fqn, offsets) and read when needed (ChunkReader). Missing data files, ranges past a file's end, chunks without
// storage info and unreadable values become warnings of severity "error" on the checkpoint, so that the rest can
// still be browsed; a missing or unreadable .metadata throws Error.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <memory>
#include <string>

namespace optscope {

class DcpReader
{
public:
    /// @p path is the checkpoint folder or its .metadata file
    static std::shared_ptr<const Checkpoint> open(const std::string& path, const Progress& progress = {});
    /// true if @p path is a folder holding a .metadata file, or its .metadata or one of its .distcp files
    static bool looksLikeDcp(const std::string& path);
    /// the folder of a DCP checkpoint's .metadata or .distcp file; @p path itself otherwise
    static std::string folderOf(const std::string& path);
    /// the checkpoint's metadata file in its folder (the name probes ask for)
    static constexpr const char* kMetadataFile = ".metadata";
    /// Lightning Fabric's file of the user's other state beside a sharded checkpoint
    static constexpr const char* kFabricMetaFile = "meta.pt";
    /// rank parsed from "__<rank>_<n>.distcp", -1 if the name has another form
    static int rankFromFileName(const std::string& relativePath);
};

} // namespace optscope
