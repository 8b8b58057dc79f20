// SPDX-License-Identifier: GPL-3.0-or-later
#include "widgets/frozenkeycolumn.h"

#include <QEvent>
#include <QHeaderView>
#include <QScrollBar>
#include <QTableView>

namespace optscope::ui {

FrozenKeyColumn::FrozenKeyColumn(QTableView* table)
    : QObject(table)
    , m_table(table)
    , m_frozen(new QTableView(table))
{
    m_frozen->setObjectName(QStringLiteral("frozenKeyColumn"));
    m_frozen->setModel(table->model());
    m_frozen->setSelectionModel(table->selectionModel());
    m_frozen->setFocusPolicy(Qt::NoFocus);
    m_frozen->verticalHeader()->hide();
    m_frozen->horizontalHeader()->setSectionResizeMode(QHeaderView::Fixed);
    m_frozen->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_frozen->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_frozen->setVerticalScrollMode(table->verticalScrollMode());
    m_frozen->verticalHeader()->setDefaultSectionSize(table->verticalHeader()->defaultSectionSize());
    m_frozen->setSelectionBehavior(table->selectionBehavior());
    m_frozen->setSelectionMode(table->selectionMode());
    m_frozen->setEditTriggers(table->editTriggers());
    m_frozen->setAlternatingRowColors(table->alternatingRowColors());
    m_frozen->setTextElideMode(table->textElideMode());
    m_frozen->setWordWrap(table->wordWrap());
    m_frozen->setSortingEnabled(false); // the table sorts; its header's indicator is mirrored below
    m_frozen->horizontalHeader()->setSortIndicatorShown(table->horizontalHeader()->isSortIndicatorShown());
    m_frozen->setStyleSheet(QStringLiteral("QTableView { border: none; border-right: 1px solid palette(mid); }"));
    table->viewport()->stackUnder(m_frozen);
    hideOtherColumns();

    connect(
        m_frozen->verticalScrollBar(), &QScrollBar::valueChanged, table->verticalScrollBar(), &QScrollBar::setValue);
    connect(
        table->verticalScrollBar(), &QScrollBar::valueChanged, m_frozen->verticalScrollBar(), &QScrollBar::setValue);
    // only while the numbers are scrolled right: otherwise the table's own key column is in place (and an empty
    // table would show the overlay's border as a stray line)
    connect(table->horizontalScrollBar(), &QScrollBar::valueChanged, this, &FrozenKeyColumn::updateGeometry);
    connect(table->horizontalScrollBar(), &QScrollBar::rangeChanged, this, &FrozenKeyColumn::updateGeometry);
    connect(table->horizontalHeader(), &QHeaderView::sectionResized, this, [this](int logical, int, int size) {
        if (logical == 0) {
            m_frozen->setColumnWidth(0, size);
            updateGeometry();
        }
    });
    connect(table->horizontalHeader(), &QHeaderView::sortIndicatorChanged, m_frozen->horizontalHeader(),
        &QHeaderView::setSortIndicator);
    connect(m_frozen->horizontalHeader(), &QHeaderView::sectionClicked, this, [this](int logical) {
        // sort the table by the key, toggling as its own header would
        QHeaderView* h = m_table->horizontalHeader();
        const Qt::SortOrder order
            = h->sortIndicatorSection() == logical && h->sortIndicatorOrder() == Qt::AscendingOrder
            ? Qt::DescendingOrder
            : Qt::AscendingOrder;
        m_table->sortByColumn(logical, order);
    });
    connect(m_frozen, &QTableView::doubleClicked, table, &QTableView::doubleClicked);
    connect(m_frozen, &QTableView::clicked, table, &QTableView::clicked);
    m_frozen->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_frozen, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
        Q_EMIT m_table->customContextMenuRequested(
            m_table->viewport()->mapFromGlobal(m_frozen->viewport()->mapToGlobal(pos)));
    });
    if (table->model()) {
        connect(table->model(), &QAbstractItemModel::modelReset, this, &FrozenKeyColumn::hideOtherColumns);
        connect(table->model(), &QAbstractItemModel::layoutChanged, this, &FrozenKeyColumn::hideOtherColumns);
        connect(table->model(), &QAbstractItemModel::columnsInserted, this, &FrozenKeyColumn::hideOtherColumns);
    }
    table->installEventFilter(this);
    updateGeometry();
}

void FrozenKeyColumn::hideOtherColumns()
{
    const int columns = m_table->model() ? m_table->model()->columnCount() : 0;
    for (int c = 1; c < columns; ++c)
        m_frozen->setColumnHidden(c, true);
    m_frozen->setColumnWidth(0, m_table->columnWidth(0));
    updateGeometry();
}

bool FrozenKeyColumn::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m_table && (event->type() == QEvent::Resize || event->type() == QEvent::Show)) updateGeometry();
    return QObject::eventFilter(watched, event);
}

void FrozenKeyColumn::updateGeometry()
{
    const int left = m_table->verticalHeader()->isVisible() ? m_table->verticalHeader()->width() : 0;
    m_frozen->setGeometry(left + m_table->frameWidth(), m_table->frameWidth(), m_table->columnWidth(0),
        m_table->viewport()->height() + m_table->horizontalHeader()->height());
    m_frozen->horizontalHeader()->setFixedHeight(m_table->horizontalHeader()->height());
    const bool scrolled = m_table->horizontalScrollBar()->value() > 0;
    if (scrolled && m_frozen->isHidden())
        m_frozen->verticalScrollBar()->setValue(m_table->verticalScrollBar()->value());
    m_frozen->setVisible(scrolled);
}

} // namespace optscope::ui
