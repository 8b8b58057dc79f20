// SPDX-License-Identifier: GPL-3.0-or-later
#include "session/fqnmapping.h"

#include "optscope/base/error.h"
#include "optscope/optim/fqn_normalizer.h"
#include "optscope/optim/param_table.h"

namespace optscope::ui {

namespace {

QString qs(const std::string& s)
{
    return QString::fromStdString(s);
}

} // namespace

QString FqnMapping::normalize(const QString& fqn)
{
    return qs(normalizeFqn(fqn.toStdString()).fqn);
}

FqnMapping FqnMapping::build(const Checkpoint& checkpoint, const std::vector<OptimizerView>& optimizers,
    const Checkpoint* reference, const Options& options)
{
    (void)optimizers; // the core table finds them itself
    // the table is core's (param_table.h): the same rows `optscope-cli map` prints
    std::optional<ModelParams> model;
    if (reference) {
        try {
            model = ModelParams::fromCheckpoint(*reference);
        } catch (const Error&) { }
    }
    ParamTableOptions o;
    for (const auto& u : options.units)
        o.units.push_back(u.toStdString());
    o.worldSize = options.worldSize;
    const ParamTable table = ParamTable::build(checkpoint, model ? &*model : nullptr, reference, o);
    FqnMapping out;
    for (const auto& r : table.rows) {
        Row row;
        row.optimizer = r.optimizer < 0 ? QString() : qs(table.optimizers[static_cast<size_t>(r.optimizer)].rootKey());
        // a reader that re-keyed integer ids by FQN (Hugging Face Trainer folders) keeps the file's id in the row
        const bool fileId = r.optimizer >= 0
            && (table.optimizers[static_cast<size_t>(r.optimizer)].idKeyed || (!r.id.empty() && r.id != r.fqn));
        row.id = r.optimizer < 0 ? QString()
                                 : qs(fileId               ? r.id
                                         : r.position >= 0 ? std::to_string(r.position)
                                                           : std::string());
        row.fqn = qs(r.fqn);
        row.normalized = qs(r.normalized);
        row.flatParam = r.flatParam;
        row.flatUnit = qs(r.flatUnit);
        row.flatOffset = r.flatOffset;
        row.numel = r.numel;
        row.shape = r.shape;
        for (const auto& st : r.states)
            row.states << qs(st);
        row.group = r.group;
        row.source = qs(r.optimizer < 0 ? std::string("model") : std::string(nameSourceText(r.source)));
        // how sure the name is: its own column (it was a suffix at the end of an elided one)
        row.confidence = r.optimizer < 0 ? Confidence::None : r.confidence;
        row.note = qs(r.note);
        row.jumpKey = qs(r.jumpKey);
        out.rows.push_back(std::move(row));
    }
    for (const auto& n : table.notes)
        out.notes << qs(n);
    return out;
}

} // namespace optscope::ui
