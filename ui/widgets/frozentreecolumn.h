// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QObject>

class QModelIndex;
class QTreeView;

namespace optscope::ui {

/// The tree's counterpart of FrozenKeyColumn: while a tree view is scrolled right (its name column sized to the full
/// names, the numbers beyond the viewport), a second tree over the same model and selection shows the name column at
/// the left edge, at most 55% of the viewport wide (eliding on the left: FQNs differ at their end), scrolled and
/// expanded with the tree. Clicks, double-clicks, context menus and expanding go to the tree as if they happened
/// there. Hidden while the tree is not scrolled right: the tree's own column is then in place.
class FrozenTreeColumn : public QObject
{
    Q_OBJECT
public:
    explicit FrozenTreeColumn(QTreeView* tree);

    QTreeView* frozenView() const { return m_frozen; }

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void updateGeometry();
    void hideOtherColumns();
    /// copies the tree's expanded nodes (expandAll and expandToDepth emit no signal per node)
    void syncExpansion();
    void syncExpansion(const QModelIndex& parent);

    QTreeView* m_tree;
    QTreeView* m_frozen;
    bool m_syncing = false;
    bool m_syncPending = false; ///< a sync is scheduled
};

} // namespace optscope::ui
