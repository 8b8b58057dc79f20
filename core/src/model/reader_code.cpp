// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/reader_code.h"

namespace optscope {

const std::vector<ReaderCodeInfo>& readerCodeRegistry()
{
    using R = ReaderCode;
    using F = FindingCode;
    static const std::vector<ReaderCodeInfo> r = {
        // a global outside the safe set: check tells a writer library's class, pure data and the unsafe apart
        // name, finding, checkedWhenWarning, contentMissing
        {R::UnsafeGlobal, "unsafe-global", F::UnsafeGlobal, true},
        {R::MissingFile, "missing-file", F::MissingFile, false, true},
        {R::PathOutsideCheckpoint, "path-outside-checkpoint", F::PathOutsideCheckpoint, false, true},
        {R::SpecialFile, "special-file", F::SpecialFile, false, true},
        {R::MissingStorageInfo, "missing-storage-info", F::MissingStorageInfo},
        {R::UnreadableValue, "unreadable-value", F::UnreadableValue},
        {R::BadMetadata, "bad-metadata", F::BadMetadata},
        {R::UnsupportedTransform, "unsupported-transform", F::UnsupportedTransform},
        {R::NoOptimizer, "no-optimizer", F::NoOptimizer},
        {R::ParamMapping, "param-mapping", F::ParamMapping},
        {R::ParamOrderAssumed, "param-order-assumed", F::ParamOrderAssumed, true},
        // check finds it from the entry (TensorEntry::withoutData), on every path that builds one
        {R::TensorWithoutData, "tensor-without-data", F::TensorWithoutData},
        {R::ZeroMissingRankFile, "zero-missing-rank-file", F::ZeroMissingRankFile, false, true},
        {R::ZeroWorldSizeMismatch, "zero-world-size-mismatch", F::ZeroWorldSizeMismatch},
        {R::ZeroStageMismatch, "zero-stage-mismatch", F::ZeroStageMismatch},
        {R::ZeroMissingLatest, "zero-missing-latest", F::ZeroMissingLatest},
        {R::MegatronBucketLayout, "megatron-bucket-layout", F::MegatronBucketLayout, true},
        {R::MegatronParamGroups, "megatron-param-groups", F::MegatronParamGroups, true},
        {R::MegatronMissingLatest, "megatron-missing-latest", F::MegatronMissingLatest},
        {R::MegatronMissingMetadata, "megatron-missing-metadata", F::MegatronMissingMetadata},
        {R::MegatronMissingCommon, "megatron-missing-common", F::MegatronMissingCommon, false, true},
        {R::ChunkOutOfRange, "chunk-out-of-range", F::ChunkTruncated},
        {R::BadStorageInfo, "bad-storage-info", F::MissingStorageInfo},
        {R::NoStorageData, "no-storage-data", F::MissingStorageInfo},
        {R::BadTensor, "bad-tensor", F::BadMetadata},
        {R::BadShape, "bad-shape", F::BadMetadata},
        {R::UnsupportedTensor, "unsupported-tensor", F::BadMetadata},
        {R::UnsupportedDtype, "unsupported-dtype", F::BadMetadata},
        {R::MissingTensor, "missing-tensor", F::BadMetadata, false, true},
        {R::DuplicateKey, "duplicate-key", F::BadMetadata},
        {R::IndexMismatch, "index-mismatch", F::BadMetadata},
        {R::UnknownOffsets, "unknown-offsets", F::BadMetadata},
        {R::UnknownMetadata, "unknown-metadata", F::BadMetadata},
        // check finds it from the entry (a torch.save file) or from each DCP item's own pickle, as it reads them
        {R::LazyBit, "lazy-bit", F::LazyBit},
        {R::BuildIgnored, "build-ignored", F::BadMetadata},
        {R::DtensorLayout, "dtensor-layout", F::BadMetadata},
        {R::NoModel, "no-model", F::BadMetadata},
        {R::UnreadFile, "unread-file", F::BadMetadata},
        {R::ZeroUnreadFile, "zero-unread-file", F::BadMetadata},
        {R::ZeroModelParallel, "zero-model-parallel", F::BadMetadata},
        {R::ZeroFrozenMissing, "zero-frozen-missing", F::BadMetadata},
        {R::ZeroFrozenFromModule, "zero-frozen-from-module", F::BadMetadata},
        {R::ZeroElastic, "zero-elastic", F::BadMetadata},
        // torch_save_ranks: a rank file whose keys or tensors differ from rank 0's (the shards left out are gaps too)
        {R::RankFilesDisagree, "rank-files-disagree", F::BadMetadata},
        // a DCP value item holding DTensor/ShardedTensor shards pickled whole: one rank wrote it, the others' shards
        // are not in the checkpoint (why each such tensor's chunk-gap is there)
        {R::ShardedTensorPickled, "sharded-tensor-pickled", F::ChunkGap, true},
        // a value past kMaxStateDepth that holds tensors: they are not entries (check said "clean" of them)
        {R::NestedTooDeep, "nested-too-deep", F::NestedTooDeep, true},
    };
    return r;
}

const ReaderCodeInfo& readerCodeInfo(ReaderCode code)
{
    return readerCodeRegistry()[static_cast<size_t>(code)];
}

const char* readerCodeName(ReaderCode code)
{
    return readerCodeInfo(code).name;
}

} // namespace optscope
