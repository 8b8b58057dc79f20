// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// A Hugging Face Trainer checkpoint folder (transformers' Trainer._save_checkpoint), opened as one checkpoint:
//
//   checkpoint-N/model.safetensors                 the model (save_pretrained; safetensors_reader.h), or sharded
//                model-0000K-of-0000N.safetensors  + model.safetensors.index.json; pytorch_model.bin (torch.save of
//                                                  the state dict) when save_safetensors=False, or sharded
//                pytorch_model-0000K-of-0000N.bin  + pytorch_model.bin.index.json (weight_index.h)
//   checkpoint-N/optimizer.pt                      torch.save(optimizer.state_dict()): state keyed by integer ids,
//                                                  param_groups without names (Trainer.create_optimizer builds two
//                                                  groups from model.named_parameters(): the parameters
//                                                  get_decay_parameter_names keeps, with weight_decay, then the rest
//                                                  with 0.0; frozen ones (requires_grad=False) in neither)
//   checkpoint-N/scheduler.pt                      torch.save(lr_scheduler.state_dict()) (base_lrs, last_epoch, ...)
//   checkpoint-N/trainer_state.json                TrainerState as JSON (global_step, epoch, log_history, ...)
//   checkpoint-N/rng_state.pth, training_args.bin, scaler.pt   RNG states / the pickled TrainingArguments: not read
//                                                  (arbitrary Python objects, nothing a loader checks)
//
// Entries: model.<fqn> (tensors named as the model file names them), optim.state.<fqn>.<state> and
// optim.param_groups.<i>.<hyperparameter> (params: the FQNs), scheduler.<key>, trainer_state.<key> (flattened like
// the rest: trainer_state.log_history.0.loss). The optimizer's integer ids are named by ParamTable (the one id -> FQN
// rule: the Trainer's groups matched by shapes); each named parameter's id, rule and confidence are kept in
// Checkpoint::paramOrigins. When no rule fits (the model changed: a parameter missing or added) the state keeps its
// integer ids and an error warning "param-mapping" says why.
//
// Failure semantics: a folder without optimizer.pt and trainer_state.json is not a Trainer folder; a part that is
// missing or cannot be read becomes a warning of severity "error" (the rest is still read); a model file or optimizer
// that is malformed throws Error naming the file.

#include "optscope/base/progress.h"
#include "optscope/model/checkpoint.h"

#include <memory>
#include <string>

namespace optscope {

class HfTrainerReader
{
public:
    /// the names its probe asks for (and the format registry's folderNames)
    static constexpr const char* kOptimizerFiles[] = {"optimizer.pt", "optimizer.bin"};
    static constexpr const char* kTrainerStateFile = "trainer_state.json";
    /// a model saved in torch.save shards (save_safetensors=False): their index (weight_index.h)
    static constexpr const char* kBinIndexFile = "pytorch_model.bin.index.json";
    /// a folder holding optimizer.pt or trainer_state.json next to model weights (or optimizer.pt alone)
    static bool looksLikeTrainerFolder(const std::string& path);
    static std::shared_ptr<const Checkpoint> open(const std::string& path, const Progress& progress = {});
};

} // namespace optscope
