// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QObject>

class QAbstractItemView;
class QHeaderView;

namespace optscope::ui {

/// Keeps a view's key column readable: the other columns are sized to their content and the key column takes the
/// spare width, never less than its own content (full names); past that the view scrolls horizontally instead of
/// squeezing the key. Re-applied on resizes, resets and expansions.
class KeyColumnSizer : public QObject
{
    Q_OBJECT
public:
    KeyColumnSizer(QAbstractItemView* view, QHeaderView* header, int keyColumn);

    /// sizes the columns now
    void apply();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void schedule();

    QAbstractItemView* m_view;
    QHeaderView* m_header;
    int m_keyColumn;
    bool m_pending = false;
    bool m_applying = false;
};

} // namespace optscope::ui
