// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/format.h"
#include "optscope/io/storage.h"

#include "optscope/base/display_text.h"

#include <QDir>
#include <QFileInfo>
#include <QStringList>

#include <algorithm>

#include <cmath>

namespace optscope::ui {

QString Format::bytes(uint64_t bytes)
{
    static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) return QStringLiteral("%1 B").arg(bytes);
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    return QStringLiteral("%1 %2").arg(v, 0, 'f', v < 10 ? 1 : 0).arg(QLatin1String(units[u]));
}

QString Format::shape(const std::vector<int64_t>& shape)
{
    QStringList parts;
    parts.reserve(static_cast<qsizetype>(shape.size()));
    for (auto d : shape)
        parts << QString::number(d);
    return QLatin1Char('[') + parts.join(QLatin1String(", ")) + QLatin1Char(']');
}

QString Format::count(int64_t n)
{
    QString digits = QString::number(n < 0 ? -n : n);
    for (qsizetype i = digits.size() - 3; i > 0; i -= 3)
        digits.insert(i, QLatin1Char(','));
    return n < 0 ? QLatin1Char('-') + digits : digits;
}

QString Format::elements(int64_t n)
{
    return n == 1 ? QStringLiteral("1 element") : count(n) + QStringLiteral(" elements");
}

QString Format::number(double v, int precision)
{
    if (std::isnan(v)) return QStringLiteral("nan");
    if (std::isinf(v)) return v > 0 ? QStringLiteral("inf") : QStringLiteral("-inf");
    if (v == 0.0) return QStringLiteral("0");
    const double a = std::abs(v);
    if (a >= 1e6 || a < 1e-4) return QString::number(v, 'e', precision - 1);
    return QString::number(v, 'g', precision);
}

QString Format::ranks(const std::vector<int>& ranks)
{
    if (ranks.empty()) return QStringLiteral("-");
    // a rank below 0: the file records none (a torch.save file holds each tensor whole)
    if (ranks.size() == 1) return ranks[0] < 0 ? QStringLiteral("—") : QStringLiteral("r%1").arg(ranks[0]);
    bool contiguous = ranks.front() >= 0;
    for (size_t i = 1; i < ranks.size(); ++i)
        contiguous = contiguous && ranks[i] == ranks[i - 1] + 1;
    if (contiguous) return QStringLiteral("r%1-%2").arg(ranks.front()).arg(ranks.back());
    QStringList parts;
    for (int r : ranks)
        parts << (r < 0 ? QStringLiteral("—") : QStringLiteral("r%1").arg(r));
    return parts.join(QLatin1String(", "));
}

QString Format::box(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes)
{
    QStringList parts;
    for (size_t d = 0; d < offsets.size() && d < sizes.size(); ++d)
        parts << QStringLiteral("%1:%2").arg(offsets[d]).arg(offsets[d] + sizes[d]);
    return QLatin1Char('[') + parts.join(QLatin1String(", ")) + QLatin1Char(']');
}

std::pair<QString, QString> Format::distinctNames(const QString& pathA, const QString& pathB)
{
    const QStringList a
        = QDir::cleanPath(QDir::fromNativeSeparators(pathA)).split(QLatin1Char('/'), Qt::SkipEmptyParts);
    const QStringList b
        = QDir::cleanPath(QDir::fromNativeSeparators(pathB)).split(QLatin1Char('/'), Qt::SkipEmptyParts);
    auto tail = [](const QStringList& parts, int n) {
        return parts.mid(std::max(0, int(parts.size()) - n)).join(QLatin1Char('/'));
    };
    const int most = int(std::max(a.size(), b.size()));
    for (int n = 1; n <= most; ++n) {
        const QString ta = tail(a, n), tb = tail(b, n);
        if (ta != tb) return {ta, tb};
    }
    return {tail(a, 1), tail(b, 1)}; // the same path twice
}

QString Format::text(const std::string& s)
{
    return QString::fromStdString(displayText(s));
}

QString Format::location(const QString& pathOrUrl)
{
    return optscope::isUrl(pathOrUrl.toStdString()) ? pathOrUrl : QFileInfo(pathOrUrl).absoluteFilePath();
}

QString Format::displayPath(const QString& path)
{
    if (path.isEmpty()) return path;
    if (optscope::isUrl(path.toStdString()))
        return QString::fromStdString(optscope::displayLocation(path.toStdString())); // no presigned query
    const QString abs = QDir::cleanPath(QFileInfo(path).absoluteFilePath());
    auto under = [&abs](const QString& dir) {
        const QString d = QDir::cleanPath(dir);
        return d.size() > 1 && abs.startsWith(d + QLatin1Char('/')) ? abs.mid(d.size() + 1) : QString();
    };
    if (const QString rel = under(QDir::currentPath()); !rel.isEmpty()) return rel;
    if (const QString rel = under(QDir::homePath()); !rel.isEmpty()) return QStringLiteral("~/") + rel;
    return abs;
}

QString Format::withDisplayPaths(const std::string& text)
{
    QString t = QString::fromStdString(displayText(text, true)); // a message quotes keys: escaped as they are
    const QString cwd = QDir::cleanPath(QDir::currentPath());
    const QString home = QDir::cleanPath(QDir::homePath());
    if (cwd.size() > 1) t.replace(cwd + QLatin1Char('/'), QString());
    if (home.size() > 1) t.replace(home + QLatin1Char('/'), QStringLiteral("~/"));
    return t;
}

} // namespace optscope::ui
