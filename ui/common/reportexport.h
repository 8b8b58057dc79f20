// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <QString>

namespace optscope {
struct VerifyReport;
struct DiffReport;
} // namespace optscope

namespace optscope::ui {

/// Reports as files: JSON (the core's toJson) and CSV (one row per key and per rank).
class ReportExport
{
public:
    static QString json(const nlohmann::ordered_json& json);
    /// writes @p text as UTF-8; returns an error message, empty on success
    static QString write(const QString& path, const QString& text);
};

} // namespace optscope::ui
