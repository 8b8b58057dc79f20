// SPDX-License-Identifier: GPL-3.0-or-later
#include "screenshotdriver.h"

#include "mainwindow.h"
#include "panels/diagnosepanel.h"
#include "panels/diffpanel.h"
#include "panels/reshardpanel.h"
#include "panels/watchpanel.h"
#include "plots/qcp.h"
#include "session/checkpointcontext.h"
#include "session/jobrunner.h"

#include "optscope/formats/run_folder.h"
#include "optscope/model/checkpoint.h"

#include <QCoreApplication>
#include <QDockWidget>
#include <QPixmap>
#include <QSpinBox>
#include <QTimer>

#include <cstdio>

namespace optscope::app {

namespace {
constexpr int PollMs = 100;
} // namespace

ScreenshotDriver::ScreenshotDriver(ui::MainWindow* window, Options options, QObject* parent)
    : QObject(parent)
    , m_window(window)
    , m_options(std::move(options))
{ }

void ScreenshotDriver::start(const QString& path)
{
    auto* context = m_window->context();
    connect(context, &ui::CheckpointContext::checkpointChanged, this, &ScreenshotDriver::onLoaded,
        Qt::SingleShotConnection);
    connect(context, &ui::CheckpointContext::loadFailed, this, [this](const QString& p, const QString& message) {
        fail(QStringLiteral("cannot open %1: %2").arg(p, message));
    });
    QTimer::singleShot(m_options.timeoutMs, this, [this] { fail(QStringLiteral("timed out")); });
    connect(
        context, &ui::CheckpointContext::loadPreview, this,
        [this](const CheckpointPtr& preview) {
            std::fprintf(stderr, "optscope: first %zu key(s) shown after %.2f s\n", preview->entries.size(),
                m_clock.elapsed() / 1000.0);
        },
        Qt::SingleShotConnection);
    m_clock.start();
    m_window->openPath(path);
}

void ScreenshotDriver::startWatch(const QString& folder)
{
    m_watchSteps = scanRunFolder(folder.toStdString()).size();
    if (m_watchSteps == 0) {
        fail(QStringLiteral("%1 holds no checkpoint named with a step (step_100/, checkpoint-200/, ckpt_300.pt, ...)")
                 .arg(folder));
        return;
    }
    ui::WatchPanel* watch = m_window->watchPanel();
    connect(watch, &ui::WatchPanel::stepRead, this, [this, watch](const QString& name) {
        const auto steps = watch->steps();
        std::fprintf(stderr, "optscope: step %zu of %zu, %s, read after %.2f s: %s\n", steps.size(), m_watchSteps,
            qPrintable(name), m_clock.elapsed() / 1000.0, qPrintable(steps.back().second));
    });
    // the newest step is opened in the window (Follow) once the watch has read it
    connect(m_window->context(), &ui::CheckpointContext::checkpointChanged, this, &ScreenshotDriver::onLoaded,
        Qt::SingleShotConnection);
    QTimer::singleShot(m_options.timeoutMs, this, [this] { fail(QStringLiteral("timed out")); });
    m_clock.start();
    watch->setFollow(true);
    m_window->watchFolder(folder);
}

void ScreenshotDriver::onLoaded()
{
    auto* context = m_window->context();
    std::fprintf(stderr, "optscope: checkpoint shown after %.2f s\n", m_clock.elapsed() / 1000.0);
    const QString& panel = m_options.panel;
    // what the app does with the same options, then what a screenshot of a panel needs besides
    ui::MainWindow::StartRequest request;
    request.select = m_options.select.isEmpty() ? context->representativeKey() : m_options.select;
    request.compare = m_options.compare;
    request.reference = m_options.reference;
    request.worldSize = m_options.worldSize;
    m_window->applyStart(request);
    if (panel == QLatin1String("diagnose") && m_options.reference.isEmpty()) m_window->diagnosePanel()->diagnose();
    if (panel == QLatin1String("reshard")) m_window->reshardPanel()->verify();
    if (!panel.isEmpty()) m_window->raisePanel(panel);
    waitUntilIdle();
}

void ScreenshotDriver::waitUntilIdle()
{
    // idle for a few polls in a row: results delivered, follow-up jobs (preview after stats, ...) finished too
    const bool watchDone = m_watchSteps == 0 || m_window->watchPanel()->steps().size() >= m_watchSteps;
    m_idlePolls = m_window->context()->runner()->isIdle() && watchDone ? m_idlePolls + 1 : 0;
    if (m_idlePolls >= 3) {
        capture();
        return;
    }
    m_waitedMs += PollMs;
    QTimer::singleShot(PollMs, this, &ScreenshotDriver::waitUntilIdle);
}

void ScreenshotDriver::capture()
{
    if (m_done) return;
    QWidget* target = m_window;
    if (!m_options.panel.isEmpty()) {
        QDockWidget* dock = m_window->dock(m_options.panel);
        if (!dock) {
            fail(QStringLiteral("no panel named %1").arg(m_options.panel));
            return;
        }
        target = dock->widget();
        target->resize(m_options.size.isValid() ? m_options.size : QSize(1100, 680));
        // what follows a resize (column sizers, lane layout) runs from the event loop: let it, then grab
        for (int i = 0; i < 3; ++i)
            QCoreApplication::processEvents();
    }
    // plots repaint from a buffer: render them at their final size before grabbing
    for (QCustomPlot* plot : target->findChildren<QCustomPlot*>())
        plot->replot(QCustomPlot::rpImmediateRefresh);
    const QPixmap pixmap = target->grab();
    if (pixmap.isNull() || !pixmap.save(m_options.output, "PNG")) {
        fail(QStringLiteral("cannot write %1").arg(m_options.output));
        return;
    }
    m_done = true;
    std::fprintf(stderr, "optscope: wrote %s (%dx%d) after %.2f s\n", qPrintable(m_options.output), pixmap.width(),
        pixmap.height(), m_clock.elapsed() / 1000.0);
    Q_EMIT finished(0);
}

void ScreenshotDriver::fail(const QString& message)
{
    if (m_done) return;
    m_done = true;
    std::fprintf(stderr, "optscope --screenshot: %s\n", qPrintable(message));
    Q_EMIT finished(2);
}

} // namespace optscope::app
