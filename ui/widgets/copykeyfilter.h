// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QObject>
#include <QString>

#include <functional>

class QAbstractItemView;
class QModelIndex;

namespace optscope::ui {

/// Makes Ctrl+C (QKeySequence::Copy) on a view of keys copy the current row's full key, not the text of the current
/// cell that the view copies by itself (a number, or only the last path element in a tree). The Diff table and the
/// state-key tree share it. Owned by the view.
class CopyKeyFilter : public QObject
{
    Q_OBJECT
public:
    using KeyOf = std::function<QString(const QModelIndex& current)>;
    CopyKeyFilter(QAbstractItemView* view, KeyOf keyOf);

    /// copies the current row's key to the clipboard (nothing without a current row)
    void copyCurrentKey() const;

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    QAbstractItemView* m_view;
    KeyOf m_keyOf;
};

} // namespace optscope::ui
