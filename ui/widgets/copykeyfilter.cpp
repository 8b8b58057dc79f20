// SPDX-License-Identifier: GPL-3.0-or-later
#include "widgets/copykeyfilter.h"

#include <QAbstractItemView>
#include <QClipboard>
#include <QGuiApplication>
#include <QKeyEvent>

namespace optscope::ui {

CopyKeyFilter::CopyKeyFilter(QAbstractItemView* view, KeyOf keyOf)
    : QObject(view)
    , m_view(view)
    , m_keyOf(std::move(keyOf))
{
    view->installEventFilter(this);
}

void CopyKeyFilter::copyCurrentKey() const
{
    const QModelIndex current = m_view->currentIndex();
    if (current.isValid()) QGuiApplication::clipboard()->setText(m_keyOf(current));
}

bool CopyKeyFilter::eventFilter(QObject* watched, QEvent* event)
{
    // the shortcut is overridden as well as the key handled: the view's own Copy action must not see it
    if (watched == m_view && (event->type() == QEvent::KeyPress || event->type() == QEvent::ShortcutOverride)
        && static_cast<QKeyEvent*>(event)->matches(QKeySequence::Copy)) {
        if (event->type() == QEvent::KeyPress) copyCurrentKey();
        event->accept();
        return true;
    }
    return QObject::eventFilter(watched, event);
}

} // namespace optscope::ui
