// SPDX-License-Identifier: GPL-3.0-or-later
#include "diagnosismodel.h"

#include "format.h"

#include <QApplication>
#include <QColor>
#include <QStyle>

namespace optscope::ui {

DiagnosisModel::DiagnosisModel(QObject* parent)
    : QAbstractTableModel(parent)
{ }

int DiagnosisModel::severityRank(Severity severity)
{
    return static_cast<int>(severity); // Error < Warning < Info
}

void DiagnosisModel::setData(Diagnosis diagnosis)
{
    beginResetModel();
    m_diagnosis = std::move(diagnosis);
    endResetModel();
}

const DiagnosisFinding* DiagnosisModel::finding(int row) const
{
    if (row < 0 || row >= static_cast<int>(m_diagnosis.findings.size())) return nullptr;
    return &m_diagnosis.findings[static_cast<size_t>(row)];
}

int DiagnosisModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_diagnosis.findings.size());
}

int DiagnosisModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant DiagnosisModel::data(const QModelIndex& index, int role) const
{
    const DiagnosisFinding* f = index.isValid() ? finding(index.row()) : nullptr;
    if (!f) return {};
    const int col = index.column();
    switch (role) {
    case SeverityRole:
        return QString::fromLatin1(severityName(f->severity));
    case FixableRole:
        return !f->actions.empty();
    case SortRole:
        if (col == SeverityColumn) return severityRank(f->severity) * 100000 + index.row();
        break;
    case Qt::DecorationRole:
        if (col == SeverityColumn) {
            const auto icon = f->severity == Severity::Error ? QStyle::SP_MessageBoxCritical
                : f->severity == Severity::Warning           ? QStyle::SP_MessageBoxWarning
                                                             : QStyle::SP_MessageBoxInformation;
            return QApplication::style()->standardIcon(icon);
        }
        return {};
    case Qt::ForegroundRole:
        if (col == SeverityColumn)
            return f->severity == Severity::Error  ? QColor(0xd6, 0x27, 0x28)
                : f->severity == Severity::Warning ? QColor(0xb3, 0x59, 0x00)
                                                   : QColor(0x1f, 0x6f, 0xb4);
        return {};
    case Qt::ToolTipRole:
        // the key cell shows the full key even where the column elides it
        if (col == OptimizerColumn && !f->key.empty())
            return QString(Format::text(f->key) + QLatin1Char('\n') + Format::withDisplayPaths(f->message));
        return Format::withDisplayPaths(f->message);
    default:
        break;
    }
    if (role != Qt::DisplayRole && role != SortRole) return {};
    switch (col) {
    case SeverityColumn:
        return QString::fromLatin1(severityName(f->severity));
    case CodeColumn:
        if (role == SortRole || f->actions.empty()) return QString::fromStdString(f->name());
        return QString(QString::fromStdString(f->name()) + tr(" (fixable)"));
    case OptimizerColumn:
        return Format::text(f->key);
    case MessageColumn:
        return Format::withDisplayPaths(f->message);
    default:
        return {};
    }
}

QVariant DiagnosisModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case SeverityColumn:
        return tr("Severity");
    case CodeColumn:
        return tr("Finding");
    case OptimizerColumn:
        return tr("Optimizer");
    case MessageColumn:
        return tr("Message");
    default:
        return {};
    }
}

} // namespace optscope::ui
