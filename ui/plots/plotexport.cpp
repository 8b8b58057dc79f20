// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/plotexport.h"

#include "common/warning.h"
#include "plots/qcp.h"

#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QImage>
#include <QMenu>
#include <QMessageBox>
#include <QPainter>
#include <QPdfWriter>
#include <QPixmap>
#include <QSvgGenerator>
#include <QTemporaryFile>

#include <cstdio>

namespace optscope::ui {

namespace {

QString writeTo(QWidget* plot, const QString& path, const QString& suffix)
{
    const QSize size = plot->size().isEmpty() ? QSize(800, 500) : plot->size();
    auto* qcp = qobject_cast<QCustomPlot*>(plot);
    if (suffix == QLatin1String("png")) {
        if (qcp)
            return qcp->savePng(path, size.width(), size.height(), 2.0) ? QString() : QStringLiteral("cannot write");
        QPixmap image(size * 2);
        image.setDevicePixelRatio(2.0);
        image.fill(Qt::white);
        plot->render(&image);
        return image.save(path, "PNG") ? QString() : QStringLiteral("cannot write");
    }
    if (suffix == QLatin1String("pdf") && qcp)
        return qcp->savePdf(path, size.width(), size.height()) ? QString() : QStringLiteral("cannot write");
    if (suffix == QLatin1String("pdf")) {
        QPdfWriter pdf(path);
        pdf.setPageSize(QPageSize(QSizeF(size), QPageSize::Point));
        pdf.setPageMargins(QMarginsF());
        pdf.setResolution(72);
        QPainter painter;
        if (!painter.begin(&pdf)) return QStringLiteral("cannot write");
        plot->render(&painter);
        return painter.end() ? QString() : QStringLiteral("cannot write");
    }
    // svg
    QSvgGenerator svg;
    svg.setFileName(path);
    svg.setSize(size);
    svg.setViewBox(QRect(QPoint(0, 0), size));
    svg.setTitle(plot->windowTitle().isEmpty() ? QStringLiteral("OptScope plot") : plot->windowTitle());
    if (qcp) {
        QCPPainter painter;
        if (!painter.begin(&svg)) return QStringLiteral("cannot write");
        qcp->toPainter(&painter, size.width(), size.height());
        return painter.end() ? QString() : QStringLiteral("cannot write");
    }
    QPainter painter;
    if (!painter.begin(&svg)) return QStringLiteral("cannot write");
    plot->render(&painter);
    return painter.end() ? QString() : QStringLiteral("cannot write");
}

} // namespace

QString PlotExport::fileFilter()
{
    return QObject::tr("PNG image (*.png);;SVG image (*.svg);;PDF document (*.pdf)");
}

QString PlotExport::save(QWidget* plot, const QString& path)
{
    const QFileInfo target(path);
    const QString suffix = target.suffix().toLower();
    if (suffix != QLatin1String("png") && suffix != QLatin1String("svg") && suffix != QLatin1String("pdf"))
        return QObject::tr("%1: unknown image type '.%2' (use .png, .svg or .pdf)").arg(path, suffix);
    // a temporary name beside the target, renamed when complete: a failed write leaves no partial image
    QTemporaryFile tmp(target.absolutePath() + QStringLiteral("/.optscope-XXXXXX.") + suffix);
    if (!tmp.open()) return QObject::tr("%1: cannot write there (%2)").arg(path, tmp.errorString());
    const QString tmpPath = tmp.fileName();
    tmp.close();
    if (const QString err = writeTo(plot, tmpPath, suffix); !err.isEmpty()) return QObject::tr("%1: %2").arg(path, err);
    if (QFileInfo(tmpPath).size() == 0) return QObject::tr("%1: nothing was written").arg(path);
    if (std::rename(QFile::encodeName(tmpPath).constData(), QFile::encodeName(target.absoluteFilePath()).constData())
        != 0)
        return QObject::tr("%1: cannot rename the finished image into place").arg(path);
    tmp.setAutoRemove(false); // renamed away
    return {};
}

void PlotExport::install(QWidget* plot, std::function<QString()> startDir, const QString& baseName)
{
    plot->setContextMenuPolicy(Qt::CustomContextMenu);
    QObject::connect(plot, &QWidget::customContextMenuRequested, plot, [plot, startDir, baseName](const QPoint& pos) {
        auto* menu = new QMenu(plot);
        menu->setAttribute(Qt::WA_DeleteOnClose);
        QAction* saveAction = menu->addAction(QObject::tr("Save image…"), plot, [plot, startDir, baseName] {
            const QString dir = startDir ? startDir() : QString();
            const QString path = QFileDialog::getSaveFileName(plot, QObject::tr("Save image"),
                QDir(dir.isEmpty() ? QDir::homePath() : dir).filePath(baseName + QStringLiteral(".png")), fileFilter());
            if (path.isEmpty()) return;
            if (const QString err = PlotExport::save(plot, path); !err.isEmpty())
                showWarning(plot, QObject::tr("Save image"), err);
        });
        saveAction->setObjectName(QStringLiteral("saveImage"));
        menu->popup(plot->mapToGlobal(pos));
    });
}

} // namespace optscope::ui
