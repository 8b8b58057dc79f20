// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/statusfilterproxy.h"

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
    if (!m_keyFilter.empty()) {
        const QString key
            = sourceModel()->index(sourceRow, filterKeyColumn(), sourceParent).data(filterRole()).toString();
        if (!m_keyFilter.matchesKey(key.toStdString())) return false;
    }
    return QSortFilterProxyModel::filterAcceptsRow(sourceRow, sourceParent);
}

void StatusFilterProxy::setKeyFilter(const QString& text)
{
    m_keyFilter = KeyFilter::parse(text.trimmed().toStdString());
    invalidateFilter();
}

} // namespace optscope::ui
