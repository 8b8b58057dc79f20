// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/paramgroupsmodel.h"

#include <QColor>
#include <QFont>

#include <algorithm>

namespace optscope::ui {

ParamGroupsModel::ParamGroupsModel(QObject* parent)
    : QAbstractTableModel(parent)
{ }

void ParamGroupsModel::setData(ParamGroupsTable table, const ParamGroupsTable* other)
{
    beginResetModel();
    m_table = std::move(table);
    m_compared = other != nullptr;
    m_other = other ? *other : ParamGroupsTable {};
    m_differs = other ? differingCells(m_table, *other) : std::vector<std::vector<bool>> {};
    endResetModel();
}

int ParamGroupsModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_table.cells.size());
}

int ParamGroupsModel::columnCount(const QModelIndex& parent) const
{
    // the first column counts the group's parameters
    return parent.isValid() ? 0 : static_cast<int>(m_table.columns.size()) + 1;
}

QVariant ParamGroupsModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid()) return {};
    const auto g = static_cast<size_t>(index.row());
    if (index.column() == 0) {
        if (role == Qt::DisplayRole) return static_cast<qulonglong>(m_table.paramCounts[g]);
        if (role == Qt::TextAlignmentRole) return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    }
    const auto c = static_cast<size_t>(index.column() - 1);
    const bool differs = m_compared && g < m_differs.size() && m_differs[g][c];
    switch (role) {
    case Qt::DisplayRole:
        return QString::fromStdString(m_table.cells[g][c]);
    case DiffersRole:
        return differs;
    case Qt::BackgroundRole:
        if (differs) return QColor(0xff, 0xe0, 0xb2);
        return {};
    case Qt::FontRole:
        if (differs) {
            QFont f;
            f.setBold(true);
            return f;
        }
        return {};
    case Qt::ToolTipRole: {
        if (!m_compared) return {};
        const auto& name = m_table.columns[c];
        const auto it = std::find(m_other.columns.begin(), m_other.columns.end(), name);
        const QString b = it == m_other.columns.end() || g >= m_other.cells.size()
            ? tr("(none)")
            : QString::fromStdString(m_other.cells[g][static_cast<size_t>(it - m_other.columns.begin())]);
        return tr("A: %1\nB: %2").arg(QString::fromStdString(m_table.cells[g][c]), b);
    }
    default:
        return {};
    }
}

QVariant ParamGroupsModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (role != Qt::DisplayRole) return {};
    if (orientation == Qt::Vertical) return tr("group %1").arg(section);
    if (section == 0) return tr("params");
    return QString::fromStdString(m_table.columns[static_cast<size_t>(section - 1)]);
}

} // namespace optscope::ui
