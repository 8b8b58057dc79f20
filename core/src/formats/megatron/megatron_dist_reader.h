// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Megatron-Core dist_checkpointing folders with the torch_dist backend (megatron/core/dist_checkpointing, as
// core_v0.16.1 writes them), read without running Python:
//
//   <save>/latest_checkpointed_iteration.txt   text: the newest iteration ("2"; "release" for iter folder "release")
//   <save>/iter_0000002/                       iter_%07d: one dist_checkpointing folder
//     metadata.json        {"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
//                          "common_backend_version": 1}; another sharded backend (zarr) is refused
//     .metadata, __R_T.distcp   a DCP checkpoint (see dcp_reader.h) of the sharded part: every ShardedTensor under
//                          its key (a model weight "model.inp.weight", an optimizer state
//                          "optimizer.state.exp_avg.model.inp.weight"), every ShardedObject as a BYTE_IO item
//                          "<key>/shard_<i>_<n>"; planner_data is None, so each key is one path element
//     common.pt            torch.save of the non-sharded objects ({iteration, args, checkpoint_version,
//                          content_metadata, optimizer: {param_state_sharding_type, optimizer: {param_groups}}})
//
// DistributedOptimizer state (content_metadata.distrib_optim_sharding_type):
//   fully_reshardable  model space: optimizer.state.{param,exp_avg,exp_avg_sq}.<weight key> with the weight's shape
//                      and chunks ("param" is the fp32 main copy); param_groups (with "step") in common.pt, without
//                      "params" lists
//   dp_reshardable     flat per bucket: optimizer.distributed.dp_group_idx_G.gbuf_idx_I.dtype_(<param dtype>,
//                      <grad dtype>).bucket_idx_B.{param,exp_avg,exp_avg_sq}, 1-D of the bucket's unpadded numel,
//                      chunked at the writers' ranges; ShardedObjects ...dp_group_idx_G.{optimizer (param_groups),
//                      per_bucket_numel, per_bucket_numel_unpadded}. G = tp + TP * pp: one group per tensor and
//                      pipeline parallel rank, each holding its own model chunk; a writer's rank is
//                      tp + TP * dp + TP * DP * pp (TP and PP are the sizes that explain every bucket item's writer).
//                      Layout (_ParamAndGradBuffer): the rank's parameters in reverse registration order, each
//                      starting at a multiple of 64 elements, a bucket ending after its last parameter
//                      (per_bucket_numel_unpadded); the gaps are padding. A rank's parameter is its part of the
//                      weight: the chunk its tensor-parallel rank wrote (a shard), or the whole weight that another
//                      wrote (replicated, a row-parallel bias), of the layers its pipeline stage holds; stacked
//                      layers are registered layer by layer.
//
// Model weights are every tensor outside "optimizer.": "model.<name>" when saved with that prefix, "<name>" as
// Megatron-LM's training saves them ("decoder.layers.mlp.linear_fc1.weight": by default a block's layers are one
// tensor with a leading layer axis, each pipeline stage writing its layers' rows; "decoder.layers.3.mlp..." when not).
//
// The checkpoint model: weights model.<fqn> (the key without "model."), optimizer moments optim.state.<fqn>.<name>,
// optim.state.<fqn>.step and optim.param_groups.<g>.* (params: FQNs, by Megatron's default no-weight-decay rule:
// biases and 1-D weights in the group with wd_mult 0) from common.pt or the pickled optimizer object; the fp32 main
// weights stay under optimizer.state.param.<weight key>. fully_reshardable entries keep DCP's chunks (renamed);
// dp_reshardable moments are cut out of the flat buckets: each parameter's chunks are rectangular StorageRecord
// pieces pointing into the storage inside the bucket's DCP items, padding never becomes data. A bucket layout that
// the parameters do not explain (buffers or frozen weights among the model keys, virtual pipeline chunks) leaves the
// flat buckets as they are, with a warning (megatron-bucket-layout), as does a rank layout no TP x PP split explains.
// Other common.pt objects are entries at their own keys (iteration, args.*; Megatron-LM's args is an
// argparse.Namespace, kept inert).
//
// Failure semantics: an unreadable metadata.json, another backend, an invalid tracker file or a missing iteration
// folder throws Error naming the file (with Megatron's own message where it has one); a folder that lost its
// metadata.json but has the DCP index and common.pt is read as torch_dist with an error warning
// (megatron-missing-metadata), as is a missing tracker file (megatron-missing-latest) and a missing common.pt
// (megatron-missing-common), each quoting what Megatron does (core_v0.16.1); an unreadable common.pt, or bucket items
// that cannot be read, become warnings of severity "error" naming the file; DCP's own faults (missing .distcp) are
// reported as for any DCP folder.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <memory>
#include <string>

namespace optscope {

class MegatronDistReader
{
public:
    /// the names its probe asks for (and the format registry's folderNames)
    static constexpr const char* kLatestFile = "latest_checkpointed_iteration.txt";
    static constexpr const char* kMetadataJson = "metadata.json";
    static constexpr const char* kCommonFile = "common.pt";
    /// a folder with a dist_checkpointing metadata.json, or a folder with latest_checkpointed_iteration.txt
    static bool looksLikeMegatron(const std::string& path);
    static std::shared_ptr<const Checkpoint> open(const std::string& path, const Progress& progress = {});
};

} // namespace optscope
