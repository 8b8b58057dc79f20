// SPDX-License-Identifier: GPL-3.0-or-later
#include "widgets/keycolumnsizer.h"

#include <QAbstractItemView>
#include <QEvent>
#include <QHeaderView>
#include <QScrollBar>
#include <QTimer>
#include <QTreeView>

#include <algorithm>

namespace optscope::ui {

namespace {
constexpr int MaxOtherWidth = 200;
} // namespace

KeyColumnSizer::KeyColumnSizer(QAbstractItemView* view, QHeaderView* header, int keyColumn)
    : QObject(view)
    , m_view(view)
    , m_header(header)
    , m_keyColumn(keyColumn)
{
    // the last column must not take the spare width: the key column does
    m_header->setStretchLastSection(false);
    m_header->setSectionResizeMode(QHeaderView::Interactive);
    m_view->viewport()->installEventFilter(this);
    connect(m_header, &QHeaderView::sectionResized, this, [this](int logical) {
        if (logical != m_keyColumn) schedule();
    });
    if (auto* tree = qobject_cast<QTreeView*>(m_view)) {
        connect(tree, &QTreeView::expanded, this, &KeyColumnSizer::schedule);
        connect(tree, &QTreeView::collapsed, this, &KeyColumnSizer::schedule);
    }
    auto* model = m_view->model();
    if (model) {
        connect(model, &QAbstractItemModel::modelReset, this, &KeyColumnSizer::schedule);
        connect(model, &QAbstractItemModel::rowsInserted, this, &KeyColumnSizer::schedule);
        connect(model, &QAbstractItemModel::layoutChanged, this, &KeyColumnSizer::schedule);
    }
}

bool KeyColumnSizer::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m_view->viewport() && (event->type() == QEvent::Resize || event->type() == QEvent::Show)) schedule();
    return QObject::eventFilter(watched, event);
}

void KeyColumnSizer::schedule()
{
    if (m_pending || m_applying) return;
    m_pending = true;
    // coalesce the many signals of one reset or expansion into one pass after they are done
    QTimer::singleShot(0, this, [this] {
        m_pending = false;
        apply();
    });
}

void KeyColumnSizer::apply()
{
    if (!m_view->model() || m_applying) return;
    m_applying = true;
    const int columns = m_header->count();
    int others = 0;
    for (int c = 0; c < columns; ++c) {
        if (c == m_keyColumn || m_header->isSectionHidden(c)) continue;
        // content width (rows measured up to the header's precision), never narrower than the header label
        // capped: a long value or reason is elided (its tooltip has it all), the key matters more
        const int w = std::min(MaxOtherWidth, std::max(m_view->sizeHintForColumn(c), m_header->sectionSizeHint(c)));
        if (w > 0 && w != m_header->sectionSize(c)) m_header->resizeSection(c, w);
        others += m_header->sectionSize(c);
    }
    const int viewport = m_view->viewport()->width();
    const int content = std::max(m_view->sizeHintForColumn(m_keyColumn), m_header->sectionSizeHint(m_keyColumn));
    const int width = std::max(content, viewport - others);
    if (width != m_header->sectionSize(m_keyColumn)) m_header->resizeSection(m_keyColumn, width);
    m_applying = false;
}

} // namespace optscope::ui
