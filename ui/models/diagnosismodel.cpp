// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/diagnosismodel.h"

#include "common/format.h"

#include <QApplication>
#include <QColor>
#include <QStyle>

#include <algorithm>

namespace optscope::ui {

DiagnosisModel::DiagnosisModel(QObject* parent)
    : QAbstractItemModel(parent)
{ }

int DiagnosisModel::severityRank(Severity severity)
{
    return static_cast<int>(severity); // Error < Warning < Info
}

void DiagnosisModel::setData(Diagnosis diagnosis)
{
    beginResetModel();
    m_diagnosis = std::move(diagnosis);
    m_groups = groupAlikeFindings(m_diagnosis.findings);
    // the ranks a group names, once (a row's data is asked for at every paint)
    m_groupRanks.clear();
    for (const auto& g : m_groups) {
        std::vector<int> ranks;
        if (g.size() > 1)
            for (size_t i : g)
                ranks.insert(ranks.end(), m_diagnosis.findings[i].ranks.begin(), m_diagnosis.findings[i].ranks.end());
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        m_groupRanks.push_back(ranks.empty() ? QString() : Format::ranks(ranks));
    }
    endResetModel();
}

// a top-level row's internal id is 0; a group member's is its group's row + 1

const std::vector<size_t>* DiagnosisModel::group(const QModelIndex& index) const
{
    if (!index.isValid() || index.internalId() != 0) return nullptr;
    if (index.row() < 0 || index.row() >= static_cast<int>(m_groups.size())) return nullptr;
    return &m_groups[static_cast<size_t>(index.row())];
}

const DiagnosisFinding* DiagnosisModel::finding(const QModelIndex& index) const
{
    if (!index.isValid()) return nullptr;
    if (const auto* g = group(index)) return &m_diagnosis.findings[g->front()];
    const size_t parentRow = static_cast<size_t>(index.internalId() - 1);
    if (parentRow >= m_groups.size()) return nullptr;
    const auto& members = m_groups[parentRow];
    if (index.row() < 0 || index.row() >= static_cast<int>(members.size())) return nullptr;
    return &m_diagnosis.findings[members[static_cast<size_t>(index.row())]];
}

int DiagnosisModel::findingCount(const QModelIndex& index) const
{
    const auto* g = group(index);
    return g ? static_cast<int>(g->size()) : (index.isValid() ? 1 : 0);
}

QModelIndex DiagnosisModel::index(int row, int column, const QModelIndex& parent) const
{
    if (row < 0 || column < 0 || column >= ColumnCount) return {};
    if (!parent.isValid())
        return row < static_cast<int>(m_groups.size()) ? createIndex(row, column, quintptr(0)) : QModelIndex();
    const auto* g = group(parent);
    if (!g || g->size() < 2 || row >= static_cast<int>(g->size())) return {};
    return createIndex(row, column, quintptr(parent.row() + 1));
}

QModelIndex DiagnosisModel::parent(const QModelIndex& child) const
{
    if (!child.isValid() || child.internalId() == 0) return {};
    return createIndex(static_cast<int>(child.internalId() - 1), 0, quintptr(0));
}

int DiagnosisModel::rowCount(const QModelIndex& parent) const
{
    if (!parent.isValid()) return static_cast<int>(m_groups.size());
    if (parent.column() != 0) return 0;
    const auto* g = group(parent);
    return g && g->size() > 1 ? static_cast<int>(g->size()) : 0;
}

int DiagnosisModel::columnCount(const QModelIndex&) const
{
    return ColumnCount;
}

QVariant DiagnosisModel::data(const QModelIndex& index, int role) const
{
    const DiagnosisFinding* f = finding(index);
    if (!f) return {};
    const int col = index.column();
    // a group's row: the first finding's words, how many there are and which ranks
    const auto* g = group(index);
    const int count = g ? static_cast<int>(g->size()) : 1;
    auto groupMessage = [&]() -> QString {
        const QString& ranks = m_groupRanks[static_cast<size_t>(index.row())];
        return Format::withDisplayPaths(f->message) + tr(" (and %n more like it", nullptr, count - 1)
            + (ranks.isEmpty() ? QStringLiteral(")") : tr("; %1)").arg(ranks));
    };
    switch (role) {
    case SeverityRole:
        return QString::fromLatin1(severityName(f->severity));
    case FixableRole:
        return !f->actions.empty();
    case SortRole:
        if (col == SeverityColumn) return severityRank(f->severity) * 100000 + index.row();
        if (col == CodeColumn && count > 1) return QString::fromStdString(f->name());
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
        if (count > 1) return groupMessage();
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
    case CodeColumn: {
        QString name = QString::fromStdString(f->name());
        if (role == SortRole) return name;
        if (count > 1) name += QStringLiteral(" ×%1").arg(Format::count(count));
        return f->actions.empty() ? name : QString(name + tr(" (fixable)"));
    }
    case OptimizerColumn:
        if (count > 1)
            for (size_t i : *g)
                if (m_diagnosis.findings[i].key != f->key) return tr("(several)");
        return Format::text(f->key);
    case MessageColumn:
        return count > 1 ? groupMessage() : Format::withDisplayPaths(f->message);
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
