// SPDX-License-Identifier: GPL-3.0-or-later
#include "widgets/frozentreecolumn.h"

#include <QEvent>
#include <QHeaderView>
#include <QScrollBar>
#include <QTimer>
#include <QTreeView>

#include <algorithm>

namespace optscope::ui {

FrozenTreeColumn::FrozenTreeColumn(QTreeView* tree)
    : QObject(tree)
    , m_tree(tree)
    , m_frozen(new QTreeView(tree))
{
    m_frozen->setObjectName(QStringLiteral("frozenTreeColumn"));
    m_frozen->setModel(tree->model());
    m_frozen->setSelectionModel(tree->selectionModel());
    m_frozen->setFocusPolicy(Qt::NoFocus);
    m_frozen->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_frozen->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_frozen->setVerticalScrollMode(tree->verticalScrollMode());
    m_frozen->setUniformRowHeights(tree->uniformRowHeights());
    m_frozen->setIndentation(tree->indentation());
    m_frozen->setRootIsDecorated(tree->rootIsDecorated());
    m_frozen->setSelectionBehavior(tree->selectionBehavior());
    m_frozen->setSelectionMode(tree->selectionMode());
    m_frozen->setAllColumnsShowFocus(tree->allColumnsShowFocus());
    m_frozen->setAlternatingRowColors(tree->alternatingRowColors());
    m_frozen->setTextElideMode(Qt::ElideLeft); // FQNs differ at their end: "…1.qkv.weight"
    m_frozen->setExpandsOnDoubleClick(false); // the tree decides; its expansion is mirrored here
    m_frozen->header()->setStretchLastSection(false);
    m_frozen->header()->setSectionResizeMode(QHeaderView::Fixed);
    m_frozen->setStyleSheet(QStringLiteral("QTreeView { border: none; border-right: 1px solid palette(mid); }"));
    tree->viewport()->stackUnder(m_frozen);
    hideOtherColumns();

    connect(m_frozen->verticalScrollBar(), &QScrollBar::valueChanged, tree->verticalScrollBar(), &QScrollBar::setValue);
    connect(tree->verticalScrollBar(), &QScrollBar::valueChanged, m_frozen->verticalScrollBar(), &QScrollBar::setValue);
    connect(tree->horizontalScrollBar(), &QScrollBar::valueChanged, this, &FrozenTreeColumn::updateGeometry);
    connect(tree->horizontalScrollBar(), &QScrollBar::rangeChanged, this, &FrozenTreeColumn::updateGeometry);
    connect(tree->header(), &QHeaderView::sectionResized, this, [this](int logical) {
        if (logical == 0) updateGeometry();
    });
    // expansion both ways: the tree's signals per node, the overlay's arrows
    connect(tree, &QTreeView::expanded, this, [this](const QModelIndex& i) {
        if (!m_syncing) m_frozen->expand(i);
    });
    connect(tree, &QTreeView::collapsed, this, [this](const QModelIndex& i) {
        if (!m_syncing) m_frozen->collapse(i);
    });
    connect(m_frozen, &QTreeView::expanded, this, [this](const QModelIndex& i) {
        if (!m_syncing) m_tree->expand(i);
    });
    connect(m_frozen, &QTreeView::collapsed, this, [this](const QModelIndex& i) {
        if (!m_syncing) m_tree->collapse(i);
    });
    connect(m_frozen, &QTreeView::clicked, tree, &QTreeView::clicked);
    connect(m_frozen, &QTreeView::doubleClicked, tree, [this](const QModelIndex& i) {
        Q_EMIT m_tree->doubleClicked(i);
        if (m_tree->expandsOnDoubleClick() && m_tree->model()->hasChildren(i))
            m_tree->setExpanded(i, !m_tree->isExpanded(i));
    });
    m_frozen->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_frozen, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
        Q_EMIT m_tree->customContextMenuRequested(
            m_tree->viewport()->mapFromGlobal(m_frozen->viewport()->mapToGlobal(pos)));
    });
    if (tree->model()) {
        // a reset collapses both; expandAll / expandToDepth afterwards emit nothing per node: copy once it settles
        // once per burst: a filter that inserts rows one by one scheduled a sync (a walk of the open tree) per row
        auto later = [this] {
            if (m_syncPending) return;
            m_syncPending = true;
            QTimer::singleShot(0, this, [this] {
                m_syncPending = false;
                hideOtherColumns();
                syncExpansion();
            });
        };
        connect(tree->model(), &QAbstractItemModel::modelReset, this, later);
        connect(tree->model(), &QAbstractItemModel::layoutChanged, this, later);
        connect(tree->model(), &QAbstractItemModel::rowsInserted, this, later);
    }
    tree->installEventFilter(this);
    m_frozen->hide();
    updateGeometry();
}

void FrozenTreeColumn::hideOtherColumns()
{
    const int columns = m_tree->model() ? m_tree->model()->columnCount() : 0;
    for (int c = 1; c < columns; ++c)
        m_frozen->setColumnHidden(c, true);
    updateGeometry();
}

void FrozenTreeColumn::syncExpansion()
{
    if (!m_tree->model()) return;
    m_syncing = true;
    syncExpansion(QModelIndex());
    m_syncing = false;
}

void FrozenTreeColumn::syncExpansion(const QModelIndex& parent)
{
    // only below expanded nodes: the cost is that of the rows the tree shows, not of the whole model
    const int rows = m_tree->model()->rowCount(parent);
    for (int r = 0; r < rows; ++r) {
        const QModelIndex i = m_tree->model()->index(r, 0, parent);
        const bool open = m_tree->isExpanded(i);
        if (m_frozen->isExpanded(i) != open) m_frozen->setExpanded(i, open);
        if (open) syncExpansion(i);
    }
}

bool FrozenTreeColumn::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m_tree && (event->type() == QEvent::Resize || event->type() == QEvent::Show)) updateGeometry();
    return QObject::eventFilter(watched, event);
}

void FrozenTreeColumn::updateGeometry()
{
    const bool scrolled = m_tree->horizontalScrollBar()->value() > 0;
    if (!scrolled) {
        m_frozen->hide();
        return;
    }
    const int width = std::min(m_tree->columnWidth(0), m_tree->viewport()->width() * 55 / 100);
    m_frozen->setColumnWidth(0, width);
    m_frozen->setGeometry(m_tree->frameWidth(), m_tree->frameWidth(), width,
        m_tree->viewport()->height() + (m_tree->header()->isVisible() ? m_tree->header()->height() : 0));
    m_frozen->header()->setVisible(m_tree->header()->isVisible());
    m_frozen->header()->setFixedHeight(m_tree->header()->height());
    if (m_frozen->isHidden()) {
        syncExpansion();
        m_frozen->show();
        // the overlay lays its rows out when shown: scroll it to the tree's position once its range is known
        QTimer::singleShot(
            0, this, [this] { m_frozen->verticalScrollBar()->setValue(m_tree->verticalScrollBar()->value()); });
    }
}

} // namespace optscope::ui
