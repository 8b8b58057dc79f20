// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"

#include <QString>

#include <cstdint>
#include <utility>
#include <vector>

namespace optscope::ui {

/// Text renderings shared by the models and panels.
class Format
{
public:
    /// "3.0 KiB", "512 B"
    static QString bytes(uint64_t bytes);
    /// "[7, 6]", "[]" for a 0-dim tensor
    static QString shape(const std::vector<int64_t>& shape);
    /// "1,234,567"
    static QString count(int64_t n);
    /// "1 element", "1,234 elements"
    static QString elements(int64_t n);
    /// a number for tables: 6 significant digits, scientific when very large or small, "nan", "inf"
    static QString number(double v, int precision = 6);
    /// "r0-2", "r0, r2", "r1", "-" for none (-1 = unknown rank: "?")
    static QString ranks(const std::vector<int>& ranks);
    /// "[0:2, 0:6]" for a box at @p offsets of @p sizes
    static QString box(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes);
    static QString fromStd(const std::string& s) { return QString::fromStdString(s); }
    /// a key name or any text from a checkpoint, for display: control and text-direction characters as escapes
    /// (core's displayText), so that no label can be made to show another name than the one it has
    static QString text(const std::string& s);
    /// a path as the user would write it: relative to the working folder when inside it, "~/..." under the home
    /// folder, else absolute (status bar, summaries; tooltips and dialogs keep the absolute path)
    static QString displayPath(const QString& path);
    /// what the core opens for @p pathOrUrl: a URL (s3://, gs://, http(s)://) as it is, a path made absolute
    static QString location(const QString& pathOrUrl);
    /// @p text (a core message) with the absolute paths in it shown as displayPath would
    static QString withDisplayPaths(const std::string& text);
    /// names for two paths that tell them apart: the file or folder names, with as many parent folders as it takes
    /// when those are equal ("run1/ckpt" and "run2/ckpt"); the names alone when they differ
    static std::pair<QString, QString> distinctNames(const QString& pathA, const QString& pathB);
};

} // namespace optscope::ui
