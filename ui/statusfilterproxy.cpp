// SPDX-License-Identifier: GPL-3.0-or-later
#include "statusfilterproxy.h"

namespace optscope::ui {

StatusFilterProxy::StatusFilterProxy(int statusRole, QObject* parent)
    : QSortFilterProxyModel(parent)
    , m_statusRole(statusRole)
{
    setFilterCaseSensitivity(Qt::CaseInsensitive);
}

void StatusFilterProxy::setRequiredStatus(const QString& status)
{
    if (status == m_required) return;
    m_required = status;
    invalidateFilter();
}

void StatusFilterProxy::setExcludedStatus(const QString& status)
{
    if (status == m_excluded) return;
    m_excluded = status;
    invalidateFilter();
}

bool StatusFilterProxy::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const
{
    if (sourceParent.isValid()) return true;
    const QString status = sourceModel()->index(sourceRow, 0, sourceParent).data(m_statusRole).toString();
    if (!m_required.isEmpty() && status != m_required) return false;
    if (!m_excluded.isEmpty() && status == m_excluded) return false;
    return QSortFilterProxyModel::filterAcceptsRow(sourceRow, sourceParent);
}

} // namespace optscope::ui
