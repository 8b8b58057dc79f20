// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"
#include "optscope/optim/optimizer_view.h"
#include "optscope/optim/param_table.h"

#include <QCoreApplication>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <vector>

namespace optscope::ui {

/// Parameter id <-> FQN <-> normalised FQN <-> FSDP1 flat parameter / offset / numel <-> shape, for every parameter
/// of every optimizer in a checkpoint. Names come from the state keys (FQN-keyed optimizers), param_names, the
/// model in the same checkpoint or a reference model (by position); raw FSDP1 optimizer files (use_orig_params=False,
/// flat-parameter-keyed) are mapped through FlatParamLayout when a model is known.
class FqnMapping
{
    Q_DECLARE_TR_FUNCTIONS(FqnMapping)

public:
    struct Row
    {
        QString optimizer; ///< key of the optimizer state dict ("optim"), "" for the root
        QString id; ///< the integer id optimizer.state_dict() uses (position in param_groups), or the id key
        QString fqn; ///< empty when unknown
        QString normalized;
        int flatParam = -1; ///< FSDP1: flat parameter (= optimizer id) holding this parameter
        QString flatUnit; ///< FSDP1: the unit's module prefix
        int64_t flatOffset = -1; ///< FSDP1: first element in the unsharded flat parameter
        int64_t numel = -1;
        std::vector<int64_t> shape;
        QStringList states; ///< "exp_avg", "exp_avg_sq", "step", ...
        int group = -1;
        QString source; ///< where the name came from
        Confidence confidence = Confidence::None; ///< how sure the name is
        QString note; ///< mismatch or layout details
        QString jumpKey; ///< the State keys node to select for this parameter
    };

    struct Options
    {
        QStringList units; ///< FSDP1 unit prefixes; empty = guess from the model's repeated blocks
        int worldSize = 0; ///< FSDP1 world size; 0 = find the one matching the shard sizes
    };

    std::vector<Row> rows;
    QStringList notes; ///< how names were found, in words

    /// @p reference may be null
    static FqnMapping build(const Checkpoint& checkpoint, const std::vector<OptimizerView>& optimizers,
        const Checkpoint* reference, const Options& options);

    /// strips wrapper prefixes: a leading `module.` (DDP), `_orig_mod.` (torch.compile), `_fsdp_wrapped_module.` and
    /// `_checkpoint_wrapped_module.` anywhere
    static QString normalize(const QString& fqn);
};

} // namespace optscope::ui
