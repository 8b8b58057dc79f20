// SPDX-License-Identifier: GPL-3.0-or-later
#include "fqnmapping.h"

#include "format.h"

#include "optscope/error.h"
#include "optscope/flat_param_layout.h"
#include "optscope/fsdp1_optim.h"

#include <QRegularExpression>

#include <map>
#include <set>

namespace optscope::ui {

namespace {

QString qs(const std::string& s)
{
    return QString::fromStdString(s);
}

bool hasModelPart(const Checkpoint& cp)
{
    for (const auto& e : cp.entries)
        if (e.isTensor() && e.path.size() == 2 && e.path[0].key == "model") return true;
    return false;
}

/// the model's parameters in order (FQN, shape), or empty
std::vector<std::pair<std::string, std::vector<int64_t>>> modelParams(const Checkpoint& model, QString* note)
{
    try {
        const Fsdp1Model m = Fsdp1Model::fromCheckpoint(model, {});
        std::vector<std::pair<std::string, std::vector<int64_t>>> out;
        for (const auto& u : m.units)
            out.insert(out.end(), u.params.begin(), u.params.end());
        if (note && !m.notes.empty()) *note = qs(m.notes.front());
        return out;
    } catch (const Error&) {
        return {};
    }
}

/// the first non-scalar tensor state's shape (exp_avg, momentum_buffer, ...)
const Entry* shapeState(const OptimizerParam& p)
{
    for (const auto& [name, e] : p.states)
        if (e->isTensor() && !e->tensor.shape.empty()) return e;
    return nullptr;
}

QString jumpKeyOf(const OptimizerView& view, const OptimizerParam* p)
{
    if (p && !p->states.empty()) {
        const Entry* e = p->states.begin()->second;
        if (!view.flattened && e->path.size() >= 2) return qs(joinKeyPath(KeyPath(e->path.begin(), e->path.end() - 1)));
        return qs(e->key);
    }
    return {};
}

/// module prefixes FSDP auto-wrap policies usually wrap: items of ModuleLists ("layers.0", "blocks.1")
QStringList guessUnits(const std::vector<std::pair<std::string, std::vector<int64_t>>>& params)
{
    static const QRegularExpression item(QStringLiteral("^(.*?\\.\\d+)\\."));
    QStringList units;
    for (const auto& [fqn, shape] : params) {
        const auto m = item.match(qs(fqn));
        if (m.hasMatch() && !units.contains(m.captured(1))) units << m.captured(1);
    }
    return units;
}

std::vector<std::string> toStd(const QStringList& l)
{
    std::vector<std::string> out;
    for (const auto& s : l)
        out.push_back(s.toStdString());
    return out;
}

/// Tries to explain an id-keyed optimizer with 1-D states as raw FSDP1 flat parameters of @p model. Returns false
/// when no unit split and world size reproduce the shard sizes.
bool mapFsdp1(const Checkpoint& checkpoint, const OptimizerView& view, const Checkpoint& model,
    const FqnMapping::Options& options, std::vector<FqnMapping::Row>& rows, QStringList& notes)
{
    const std::vector<std::string> ids = view.groupParams();
    if (ids.empty()) return false;
    std::vector<int64_t> shardNumel;
    for (const auto& id : ids) {
        const OptimizerParam* p = view.param(id);
        const Entry* e = p ? shapeState(*p) : nullptr;
        if (!e || e->tensor.shape.size() != 1) return false;
        shardNumel.push_back(e->tensor.shape[0]);
    }
    QStringList candidates[2];
    candidates[0] = options.units;
    if (options.units.isEmpty()) {
        QString ignored;
        candidates[1] = guessUnits(modelParams(model, &ignored));
    }
    for (const QStringList& units : candidates) {
        Fsdp1Model m;
        try {
            m = Fsdp1Model::fromCheckpoint(model, toStd(units));
        } catch (const Error&) {
            continue;
        }
        if (m.units.size() != ids.size()) continue;
        std::vector<FlatParamLayout> layouts;
        int world = 0;
        for (int w = options.worldSize > 0 ? options.worldSize : 1;
             w <= (options.worldSize > 0 ? options.worldSize : 4096); ++w) {
            layouts.clear();
            bool fits = true;
            for (size_t u = 0; u < m.units.size() && fits; ++u) {
                layouts.push_back(FlatParamLayout::compute(m.units[u].params, w, 0));
                fits = layouts.back().shardNumel == shardNumel[u];
            }
            if (fits) {
                world = w;
                break;
            }
        }
        if (!world) continue;
        // which rank wrote this file, if its name says so (optim_rank1.pt)
        static const QRegularExpression rankRe(QStringLiteral("rank[_-]?(\\d+)"));
        const auto rm = rankRe.match(qs(checkpoint.path).section(QLatin1Char('/'), -1));
        const int fileRank = rm.hasMatch() ? rm.captured(1).toInt() : -1;
        notes << QObject::tr("Raw FSDP1 optimizer state (use_orig_params=False): %1 flat parameters over %2 ranks, "
                             "units %3, parameters from %4")
                     .arg(ids.size())
                     .arg(world)
                     .arg(units.isEmpty() ? QObject::tr("(root only)") : units.join(QLatin1String(", ")),
                         qs(model.path));
        if (fileRank >= 0) notes << QObject::tr("This file is rank %1 (from its name).").arg(fileRank);
        for (size_t u = 0; u < m.units.size(); ++u) {
            const FlatParamLayout& layout = layouts[u];
            const OptimizerParam* p = view.param(ids[u]);
            QStringList states;
            for (const auto& [name, e] : p->states)
                states << qs(name);
            const auto infos = fileRank >= 0 && fileRank < world ? layout.shardParamInfos(fileRank)
                                                                 : std::vector<FlatParamLayout::ShardParamInfo> {};
            for (size_t k = 0; k < layout.members.size(); ++k) {
                const auto& member = layout.members[k];
                FqnMapping::Row r;
                r.optimizer = qs(view.rootKey());
                r.id = qs(ids[u]);
                r.fqn = qs(member.fqn);
                r.normalized = FqnMapping::normalize(r.fqn);
                r.flatParam = static_cast<int>(u);
                r.flatUnit = qs(m.units[u].prefix);
                r.flatOffset = member.offset;
                r.numel = member.numel;
                r.shape = member.shape;
                r.states = states;
                r.source = QObject::tr("FSDP1 flat parameter layout");
                const int first = static_cast<int>(member.offset / layout.shardNumel);
                const int last
                    = static_cast<int>((member.offset + std::max<int64_t>(member.numel, 1) - 1) / layout.shardNumel);
                r.note = first == last ? QObject::tr("on rank %1").arg(first)
                                       : QObject::tr("split over ranks %1–%2").arg(first).arg(last);
                if (k < infos.size()) {
                    const auto& info = infos[k];
                    r.note += info.inShard ? QObject::tr("; this file holds [%1, %2] at shard offset %3")
                                                 .arg(info.intraStart)
                                                 .arg(info.intraEnd)
                                                 .arg(info.offsetInShard)
                                           : QObject::tr("; not in this file");
                }
                r.jumpKey = jumpKeyOf(view, p);
                rows.push_back(std::move(r));
            }
        }
        return true;
    }
    return false;
}

} // namespace

QString FqnMapping::normalize(const QString& fqn)
{
    QStringList parts = fqn.split(QLatin1Char('.'));
    while (parts.size() > 1 && parts.front() == QLatin1String("module"))
        parts.removeFirst();
    parts.removeIf([](const QString& p) {
        return p == QLatin1String("_orig_mod") || p == QLatin1String("_fsdp_wrapped_module")
            || p == QLatin1String("_checkpoint_wrapped_module");
    });
    return parts.join(QLatin1Char('.'));
}

FqnMapping FqnMapping::build(const Checkpoint& checkpoint, const std::vector<OptimizerView>& optimizers,
    const Checkpoint* reference, const Options& options)
{
    FqnMapping out;
    // the model to name id-keyed parameters by position: this checkpoint's "model" part, else the reference
    const Checkpoint* model = hasModelPart(checkpoint) ? &checkpoint : reference;
    QString modelNote;
    const auto params = model ? modelParams(*model, &modelNote) : decltype(modelParams(checkpoint, nullptr)) {};
    std::map<std::string, std::vector<int64_t>> modelShapes(params.begin(), params.end());

    for (const OptimizerView& view : optimizers) {
        const std::vector<std::string> ids = view.groupParams();
        if (view.idKeyed) {
            // raw FSDP1 shards: fewer, 1-D "parameters" than the model has
            bool oneDim = !view.params.empty();
            for (const auto& p : view.params) {
                const Entry* e = shapeState(p);
                oneDim = oneDim && (!e || e->tensor.shape.size() == 1);
            }
            if (oneDim && model && params.size() != ids.size()
                && mapFsdp1(checkpoint, view, *model, options, out.rows, out.notes))
                continue;
            if (oneDim && !model)
                out.notes << tr("Every state of '%1' is 1-D: if this is a raw FSDP1 optimizer file, open the model "
                                "(Model…) to map flat parameters to FQNs.")
                                 .arg(qs(view.rootKey()));
        }
        // names by position (param_names or the model) for id-keyed optimizers
        std::vector<std::string> names;
        QString source;
        if (view.idKeyed) {
            for (const auto& g : view.groups)
                names.insert(names.end(), g.paramNames.begin(), g.paramNames.end());
            if (names.size() == ids.size() && !names.empty()) {
                source = tr("param_names");
            } else if (!params.empty()) {
                names.clear();
                for (const auto& p : params)
                    names.push_back(p.first);
                source = model == &checkpoint ? tr("model order (this checkpoint)") : tr("model order (reference)");
                if (names.size() != ids.size())
                    out.notes << tr("'%1' has %2 parameters but the model has %3: names by position are a guess.")
                                     .arg(qs(view.rootKey()))
                                     .arg(ids.size())
                                     .arg(names.size());
            } else {
                names.clear();
            }
        }
        std::map<std::string, int> groupOf;
        for (size_t g = 0; g < view.groups.size(); ++g)
            for (const auto& p : view.groups[g].params)
                groupOf.emplace(p, static_cast<int>(g));
        // every parameter named by param_groups, then any with state but no group
        std::vector<std::string> order = ids;
        std::set<std::string> seen(ids.begin(), ids.end());
        for (const auto& p : view.params)
            if (seen.insert(p.key).second) order.push_back(p.key);
        for (size_t i = 0; i < order.size(); ++i) {
            const std::string& key = order[i];
            const OptimizerParam* p = view.param(key);
            Row r;
            r.optimizer = qs(view.rootKey());
            const auto pos = std::find(ids.begin(), ids.end(), key);
            const bool inGroups = pos != ids.end();
            const size_t position = static_cast<size_t>(pos - ids.begin());
            if (view.idKeyed) {
                r.id = qs(key);
                if (inGroups && position < names.size()) {
                    r.fqn = qs(names[position]);
                    r.source = source;
                }
            } else {
                r.id = inGroups ? QString::number(position) : QString();
                r.fqn = qs(key);
                r.source = view.flattened ? tr("flattened state key") : tr("state key");
            }
            r.normalized = normalize(r.fqn);
            auto git = groupOf.find(key);
            r.group = git == groupOf.end() ? -1 : git->second;
            if (p) {
                for (const auto& [name, e] : p->states)
                    r.states << qs(name);
                if (const Entry* e = shapeState(*p)) {
                    r.shape = e->tensor.shape;
                    r.numel = e->tensor.numel();
                }
            } else {
                r.note = tr("no state (frozen, or no step taken yet)");
            }
            const auto ms = modelShapes.find(r.fqn.toStdString());
            if (ms != modelShapes.end()) {
                if (r.shape.empty() && !p) {
                    r.shape = ms->second;
                } else if (!r.shape.empty() && ms->second != r.shape) {
                    r.note = tr("state shape %1 differs from the model's %2")
                                 .arg(Format::shape(r.shape), Format::shape(ms->second));
                }
            }
            if (!inGroups) r.note = tr("has state but is in no param_group");
            r.jumpKey = jumpKeyOf(view, p);
            out.rows.push_back(std::move(r));
        }
    }
    if (optimizers.empty()) {
        // a model-only checkpoint: its parameters
        for (const auto& [fqn, shape] : params) {
            Row r;
            r.fqn = qs(fqn);
            r.normalized = normalize(r.fqn);
            r.shape = shape;
            int64_t n = 1;
            for (auto d : shape)
                n *= d;
            r.numel = n;
            r.source = tr("model");
            r.jumpKey = hasModelPart(checkpoint) ? QStringLiteral("model.") + r.fqn : r.fqn;
            out.rows.push_back(std::move(r));
        }
        if (out.rows.empty()) out.notes << tr("No optimizer state dict and no model parameters found.");
    }
    if (!modelNote.isEmpty() && model) out.notes << tr("Model: %1").arg(modelNote);
    return out;
}

} // namespace optscope::ui
