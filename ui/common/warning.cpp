// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/warning.h"

#include <QMessageBox>

namespace optscope::ui {

void showWarning(QWidget* parent, const QString& title, const QString& text)
{
    QMessageBox box(QMessageBox::Warning, title, text, QMessageBox::Ok, parent);
    box.setTextFormat(Qt::PlainText);
    box.exec();
}

} // namespace optscope::ui
