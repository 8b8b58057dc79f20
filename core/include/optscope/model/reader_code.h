// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// What a reader says about the checkpoint it read (CheckpointWarning::code), as one code of one table: the code's
// stable name (inspect's "code", the CLI's "warning [name]") and the finding `check` reports for it. Codes named as a
// finding are that finding; the others are a reader's detail of one (bad-tensor and dtensor-layout are bad-metadata,
// chunk-out-of-range is chunk-truncated). A reader cannot emit a code this table does not hold: the enum is the type.

#include "optscope/model/finding.h"

namespace optscope {

enum class ReaderCode : unsigned char {
    // the finding of the same name
    UnsafeGlobal,
    MissingFile,
    PathOutsideCheckpoint,
    SpecialFile,
    MissingStorageInfo,
    UnreadableValue,
    BadMetadata,
    UnsupportedTransform,
    NoOptimizer,
    ParamMapping,
    ParamOrderAssumed,
    TensorWithoutData,
    ZeroMissingRankFile,
    ZeroWorldSizeMismatch,
    ZeroStageMismatch,
    ZeroMissingLatest,
    MegatronBucketLayout,
    MegatronParamGroups,
    MegatronMissingLatest,
    MegatronMissingMetadata,
    MegatronMissingCommon,
    // a reader's detail of a finding
    ChunkOutOfRange,
    BadStorageInfo,
    NoStorageData,
    BadTensor,
    BadShape,
    UnsupportedTensor,
    UnsupportedDtype,
    MissingTensor,
    DuplicateKey,
    IndexMismatch,
    UnknownOffsets,
    UnknownMetadata,
    LazyBit,
    BuildIgnored,
    DtensorLayout,
    NoModel,
    UnreadFile,
    ZeroUnreadFile,
    ZeroModelParallel,
    ZeroFrozenMissing,
    ZeroFrozenFromModule,
    ZeroElastic,
    RankFilesDisagree,
    ShardedTensorPickled,
    NestedTooDeep,
};

struct ReaderCodeInfo
{
    ReaderCode code;
    const char* name; ///< stable text code ("bad-tensor")
    FindingCode finding; ///< what check reports for it
    /// check reports it even when the reader only warns (the others: only when the reader says part of the
    /// checkpoint cannot be read, CheckpointWarning::isError)
    bool checkedWhenWarning = false;
    /// as an error (CheckpointWarning::isError), part of the checkpoint's content is not there (a file, a tensor):
    /// the commands that write or compare all of it (gather, reshard, verify, diff) refuse, naming it
    /// (Checkpoint::missingDataReason)
    bool contentMissing = false;
};

/// every code, in declaration order
const std::vector<ReaderCodeInfo>& readerCodeRegistry();
const ReaderCodeInfo& readerCodeInfo(ReaderCode code);
const char* readerCodeName(ReaderCode code);

} // namespace optscope
