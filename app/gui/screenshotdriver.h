// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QSize>
#include <QString>

#include <cstddef>

namespace optscope::ui {
class MainWindow;
}

namespace optscope::app {

/// `optscope --screenshot FILE.png [--panel NAME] [PATH]`: opens the checkpoint, selects a tensor, runs what the
/// panel shows (diff, diagnose, verify) and waits for every background job before rendering the window, or one
/// panel, to a PNG with QWidget::grab. Works on the offscreen platform.
class ScreenshotDriver : public QObject
{
    Q_OBJECT
public:
    struct Options
    {
        QString output;
        QString panel; ///< empty: the whole window
        QString select; ///< key to select; empty: CheckpointContext::representativeKey()
        QString compare; ///< Diff: checkpoint B
        QString reference; ///< Diagnose: model / FQN list
        int worldSize = 0; ///< Reshard & verify: target world size (0: the panel's default)
        QString watch; ///< startWatch(): the run folder
        QSize size; ///< window or panel size; empty: a default
        int timeoutMs = 120000;
    };

    ScreenshotDriver(ui::MainWindow* window, Options options, QObject* parent = nullptr);

    /// opens @p path and emits finished(exit code) once the PNG is written (or failed)
    void start(const QString& path);
    /// `--watch FOLDER`: follows the run folder, prints when each step is read, and emits finished(exit code) once
    /// every step there at the start is read and the newest is shown (the watch bench times this)
    void startWatch(const QString& folder);

Q_SIGNALS:
    void finished(int exitCode);

private:
    void onLoaded();
    void waitUntilIdle();
    void capture();
    void fail(const QString& message);

    ui::MainWindow* m_window;
    Options m_options;
    int m_idlePolls = 0;
    QElapsedTimer m_clock; ///< from start(): the times printed for the scale bench
    int m_waitedMs = 0;
    size_t m_watchSteps = 0; ///< startWatch(): the steps in the folder at the start
    bool m_done = false;
};

} // namespace optscope::app
