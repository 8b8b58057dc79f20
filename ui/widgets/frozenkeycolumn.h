// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QObject>

class QTableView;

namespace optscope::ui {

/// Keeps a table's first column (the key) in place while the other columns scroll right: a second view over the
/// same model and selection, showing only that column, laid over the table's left edge and scrolled with it
/// vertically; shown only while the table is scrolled right. Clicks, double-clicks, context menus and sorting go to the
/// table as if they happened there.
class FrozenKeyColumn : public QObject
{
    Q_OBJECT
public:
    explicit FrozenKeyColumn(QTableView* table);

    QTableView* frozenView() const { return m_frozen; }

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void updateGeometry();
    void hideOtherColumns();

    QTableView* m_table;
    QTableView* m_frozen;
};

} // namespace optscope::ui
