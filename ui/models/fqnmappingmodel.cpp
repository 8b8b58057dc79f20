// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/fqnmappingmodel.h"

#include "common/format.h"

#include <QColor>

namespace optscope::ui {

namespace {
/// green: the file names it or the model's order and shapes fix it; blue: shapes or indices decide it; orange: an
/// order is assumed
QColor confidenceColour(Confidence c)
{
    switch (c) {
    case Confidence::Stored:
    case Confidence::Exact:
        return {0x2e, 0x7d, 0x32};
    case Confidence::ShapeUnique:
    case Confidence::IndexOrder:
        return {0x1f, 0x77, 0xb4};
    case Confidence::OrderAssumed:
        return {0xe6, 0x7e, 0x00};
    case Confidence::None:
        break;
    }
    return {};
}

QString confidenceMeaning(Confidence c)
{
    switch (c) {
    case Confidence::Stored:
        return QObject::tr("stored: the file names this parameter");
    case Confidence::Exact:
        return QObject::tr("exact: derived from a model whose order is known, every shape agrees");
    case Confidence::ShapeUnique:
        return QObject::tr("unique shape: the only parameter of its shape in its group");
    case Confidence::IndexOrder:
        return QObject::tr("index order: its group's parameters of this shape differ only in their indices "
                           "(layers.0, layers.1), ordered as nn.ModuleList registers them");
    case Confidence::OrderAssumed:
        return QObject::tr("order assumed: several parameters of its group share this shape; which is which follows "
                           "the guessed module order, shapes cannot tell");
    case Confidence::None:
        break;
    }
    return {};
}
} // namespace

FqnMappingModel::FqnMappingModel(QObject* parent)
    : QAbstractTableModel(parent)
{ }

void FqnMappingModel::setData(FqnMapping mapping)
{
    beginResetModel();
    m_mapping = std::move(mapping);
    endResetModel();
}

int FqnMappingModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_mapping.rows.size());
}

int FqnMappingModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant FqnMappingModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid()) return {};
    const auto& r = m_mapping.rows[static_cast<size_t>(index.row())];
    const int col = index.column();
    if (role == JumpKeyRole) return r.jumpKey;
    if (role == SortRole) {
        switch (col) {
        case IdColumn: {
            bool ok = false;
            const qlonglong id = r.id.toLongLong(&ok);
            return ok ? QVariant(id) : QVariant(r.id);
        }
        case FlatParamColumn:
            return r.flatParam;
        case FlatOffsetColumn:
            return qlonglong(r.flatOffset);
        case NumelColumn:
            return qlonglong(r.numel);
        case GroupColumn:
            return r.group;
        default:
            break;
        }
    }
    if (role == Qt::TextAlignmentRole
        && (col == IdColumn || col == FlatOffsetColumn || col == NumelColumn || col == GroupColumn))
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::ForegroundRole) {
        if (col == NormalizedColumn && r.normalized == r.fqn) return QColor(Qt::gray);
        if (col == FqnColumn && r.fqn.isEmpty()) return QColor(Qt::gray);
        if (col == NoteColumn
            && (r.note.contains(QLatin1String("differs")) || r.note.contains(QLatin1String("no param"))))
            return QColor(0xc0, 0x39, 0x2b);
        return {};
    }
    if (col == ConfidenceColumn && (role == Qt::DecorationRole || role == Qt::ToolTipRole)) {
        if (r.confidence == Confidence::None) return {};
        if (role == Qt::DecorationRole) return confidenceColour(r.confidence);
        return confidenceMeaning(r.confidence);
    }
    if (role == Qt::ToolTipRole) {
        QString tip = r.fqn.isEmpty() ? tr("name unknown") : r.fqn;
        if (!r.source.isEmpty()) tip += QLatin1Char('\n') + tr("name from: %1").arg(r.source);
        if (!r.note.isEmpty()) tip += QLatin1Char('\n') + r.note;
        if (!r.jumpKey.isEmpty()) tip += QLatin1Char('\n') + tr("double-click: show %1 in State keys").arg(r.jumpKey);
        return tip;
    }
    if (role != Qt::DisplayRole && role != SortRole) return {};
    switch (col) {
    case IdColumn:
        return r.id;
    case ConfidenceColumn:
        // sorted from the surest to the least sure
        if (role == SortRole) return static_cast<int>(r.confidence);
        return QString::fromLatin1(confidenceText(r.confidence));
    case FqnColumn:
        return r.fqn.isEmpty() ? tr("(unknown)") : r.fqn;
    case NormalizedColumn:
        return r.normalized;
    case FlatParamColumn:
        if (r.flatParam < 0) return QString();
        return r.flatUnit.isEmpty() ? tr("%1 (root)").arg(r.flatParam)
                                    : QStringLiteral("%1 (%2)").arg(r.flatParam).arg(r.flatUnit);
    case FlatOffsetColumn:
        return r.flatOffset < 0 ? QString() : Format::count(r.flatOffset);
    case NumelColumn:
        return r.numel < 0 ? QString() : Format::count(r.numel);
    case ShapeColumn:
        return r.shape.empty() && r.numel < 0 ? QString() : Format::shape(r.shape);
    case StatesColumn:
        return r.states.join(QLatin1String(", "));
    case GroupColumn:
        return r.group < 0 ? QString() : QString::number(r.group);
    case NoteColumn:
        return r.note.isEmpty() ? r.source : r.note;
    default:
        return {};
    }
}

QVariant FqnMappingModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal) return {};
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case IdColumn:
            return tr("The integer id optimizer.state_dict() gives the parameter (its position in param_groups)");
        case ConfidenceColumn:
            return tr("How sure the name is: stored in the file, exact, unique shape, index order, or order assumed "
                      "(several parameters share the shape: which is which follows the guessed module order)");
        case NormalizedColumn:
            return tr("FQN without module., _orig_mod., _fsdp_wrapped_module., _checkpoint_wrapped_module.");
        case FlatParamColumn:
            return tr("FSDP1 flat parameter holding this parameter (use_orig_params=False)");
        case FlatOffsetColumn:
            return tr("First element in the unsharded flat parameter");
        default:
            return {};
        }
    }
    if (role != Qt::DisplayRole) return {};
    switch (section) {
    case IdColumn:
        return tr("Id");
    case ConfidenceColumn:
        return tr("Sure");
    case FqnColumn:
        return tr("FQN");
    case NormalizedColumn:
        return tr("Normalised FQN");
    case FlatParamColumn:
        return tr("Flat param");
    case FlatOffsetColumn:
        return tr("Offset");
    case NumelColumn:
        return tr("Numel");
    case ShapeColumn:
        return tr("Shape");
    case StatesColumn:
        return tr("States");
    case GroupColumn:
        return tr("Group");
    case NoteColumn:
        return tr("Source / note");
    default:
        return {};
    }
}

} // namespace optscope::ui
