// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/reportexport.h"

#include "common/format.h"

#include "optscope/analysis/diff_report.h"
#include "optscope/analysis/verify_report.h"

#include <QFile>
#include <QSaveFile>
#include <QStringList>
#include <nlohmann/json.hpp>

namespace optscope::ui {

QString ReportExport::json(const nlohmann::ordered_json& json)
{
    return QString::fromStdString(json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace))
        + QLatin1Char('\n');
}

QString ReportExport::write(const QString& path, const QString& text)
{
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly)) return f.errorString();
    f.write(text.toUtf8());
    if (!f.commit()) return f.errorString();
    return {};
}

} // namespace optscope::ui
