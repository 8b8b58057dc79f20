// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QString>

#include <functional>

class QWidget;

namespace optscope::ui {

/// Plots as image files. The format follows the file's suffix: .png (raster, at twice the screen size), .svg and .pdf
/// (vector for QCustomPlot plots, whose items are drawn again on the file's painter; other widgets render as drawn).
/// Written to a temporary name beside the target and renamed when complete.
class PlotExport
{
public:
    /// "PNG image (*.png);;SVG image (*.svg);;PDF document (*.pdf)"
    static QString fileFilter();
    /// saves @p plot to @p path; returns an error message, empty on success
    static QString save(QWidget* plot, const QString& path);
    /// gives @p plot a context menu with "Save image…" (the dialog starts in @p startDir(), proposing @p baseName.png)
    static void install(QWidget* plot, std::function<QString()> startDir, const QString& baseName);
};

} // namespace optscope::ui
