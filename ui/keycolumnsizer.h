// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QObject>

class QAbstractItemView;
class QHeaderView;

namespace optscope::ui {

/// Keeps a view's key column readable: the other columns are sized to their content and the key column takes the
/// spare width, never less than @p minimum (a share of the viewport, or the whole content width); past that the view
/// scrolls horizontally instead of squeezing the key to nothing. Re-applied on resizes, resets and expansions.
class KeyColumnSizer : public QObject
{
    Q_OBJECT
public:
    enum class Minimum {
        Content, ///< the key column is at least as wide as its content (trees: full names, scroll right)
        Share, ///< at least 45% of the viewport or its content, whichever is less (tables that elide keys on the left)
    };

    KeyColumnSizer(QAbstractItemView* view, QHeaderView* header, int keyColumn, Minimum minimum);

    /// sizes the columns now
    void apply();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void schedule();

    QAbstractItemView* m_view;
    QHeaderView* m_header;
    int m_keyColumn;
    Minimum m_minimum;
    bool m_pending = false;
    bool m_applying = false;
};

} // namespace optscope::ui
