// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/key_filter.h"

#include <QSortFilterProxyModel>

namespace optscope::ui {

/// Sorts, and filters top-level rows by a status role (one required status, or one excluded) and by a KeyFilter over
/// the filter key column (its key terms: words, wildcards, regexes); children of an accepted row are always kept
/// (per-rank rows under a key).
class StatusFilterProxy : public QSortFilterProxyModel
{
    Q_OBJECT
public:
    explicit StatusFilterProxy(int statusRole, QObject* parent = nullptr);

    /// keep only rows with this status (empty: any)
    void setRequiredStatus(const QString& status);
    /// drop rows with this status (empty: none)
    void setExcludedStatus(const QString& status);
    /// the key filter's text (optscope::KeyFilter syntax)
    void setKeyFilter(const QString& text);
    const KeyFilter& keyFilter() const { return m_keyFilter; }

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

private:
    int m_statusRole;
    QString m_required;
    QString m_excluded;
    KeyFilter m_keyFilter;
};

} // namespace optscope::ui
