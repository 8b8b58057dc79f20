// SPDX-License-Identifier: GPL-3.0-or-later
#include "reportexport.h"

#include "format.h"

#include "optscope/diff_report.h"
#include "optscope/verify_report.h"

#include <QFile>
#include <QSaveFile>
#include <QStringList>

namespace optscope::ui {

QString ReportExport::csvField(const QString& field)
{
    if (!field.contains(QLatin1Char(',')) && !field.contains(QLatin1Char('"')) && !field.contains(QLatin1Char('\n')))
        return field;
    QString f = field;
    f.replace(QLatin1Char('"'), QLatin1String("\"\""));
    return QLatin1Char('"') + f + QLatin1Char('"');
}

QString ReportExport::verifyCsv(const VerifyReport& report)
{
    QStringList lines;
    lines << QStringLiteral("key,type,status,rank,elements,differing,first_diff,detail");
    for (const auto& e : report.entries) {
        lines << QStringList {csvField(QString::fromStdString(e.key)), QString::fromStdString(e.type),
            QString::fromStdString(e.status), QString(), e.type == "tensor" ? QString::number(e.elements) : QString(),
            e.type == "tensor" ? QString::number(e.differing) : QString(), QString(),
            csvField(QString::fromStdString(e.detail))}
                     .join(QLatin1Char(','));
        for (const auto& r : e.ranks)
            lines << QStringList {csvField(QString::fromStdString(e.key)), QStringLiteral("rank"),
                r.differing ? QStringLiteral("different") : QStringLiteral("identical"), QString::number(r.rank),
                QString::number(r.elements), QString::number(r.differing),
                r.firstDiff >= 0 ? QString::number(r.firstDiff) : QString(), QString()}
                         .join(QLatin1Char(','));
    }
    return lines.join(QLatin1Char('\n')) + QLatin1Char('\n');
}

QString ReportExport::diffCsv(const DiffReport& report)
{
    QStringList lines;
    lines << QStringLiteral("key,key_a,key_b,type,status,reason,numel,num_diff,max_abs_diff,max_rel_diff,rms_diff,"
                            "rank,match");
    auto num = [](double v) { return QString::number(v, 'g', 17); };
    for (const auto& e : report.entries) {
        lines << QStringList {csvField(QString::fromStdString(e.key)), csvField(QString::fromStdString(e.keyA)),
            csvField(QString::fromStdString(e.keyB)), QString::fromStdString(e.type), QString::fromStdString(e.status),
            csvField(QString::fromStdString(e.reason)), QString::number(e.numel), QString::number(e.numDiff),
            num(e.maxAbsDiff), num(e.maxRelDiff), num(e.rmsDiff), QString(), csvField(QString::fromStdString(e.match))}
                     .join(QLatin1Char(','));
        for (const auto& r : e.ranks)
            lines << QStringList {csvField(QString::fromStdString(e.key)), QString(), QString(), QStringLiteral("rank"),
                r.numDiff ? QStringLiteral("changed") : QStringLiteral("equal"), QString(), QString::number(r.numel),
                QString::number(r.numDiff), num(r.maxAbsDiff), QString(), QString(), QString::number(r.rank), QString()}
                         .join(QLatin1Char(','));
    }
    return lines.join(QLatin1Char('\n')) + QLatin1Char('\n');
}

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
