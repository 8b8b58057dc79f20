// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QString>

class QWidget;

namespace optscope::ui {

/// A modal warning whose text is shown as plain text: error messages carry paths, URLs and key names, which
/// QMessageBox's default (Qt::AutoText) would render as rich text when they look like HTML ("<b>", "<img src=…>").
void showWarning(QWidget* parent, const QString& title, const QString& text);

} // namespace optscope::ui
