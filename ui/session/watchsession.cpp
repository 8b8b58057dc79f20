// SPDX-License-Identifier: GPL-3.0-or-later
#include "session/watchsession.h"

#include "session/checkpointcontext.h"
#include "session/comparisonsession.h"
#include "session/jobrunner.h"

#include "optscope/analysis/diff_report.h"
#include "optscope/io/storage.h"

#include <QFileInfo>
#include <QFileSystemWatcher>
#include <QTimer>

#include <algorithm>

namespace optscope::ui {

WatchSession::WatchSession(CheckpointContext* context, ComparisonSession* comparison, QObject* parent)
    : QObject(parent)
    , m_context(context)
    , m_comparison(comparison)
    , m_watcher(new QFileSystemWatcher(this))
    , m_poll(new QTimer(this))
{
    m_poll->setInterval(1500);
    connect(m_poll, &QTimer::timeout, this, &WatchSession::pollNow);
    connect(m_watcher, &QFileSystemWatcher::directoryChanged, this,
        [this] { QTimer::singleShot(300, this, &WatchSession::pollNow); });
}

WatchSession::~WatchSession() = default;

void WatchSession::setTrackedPerStep(int keys)
{
    m_trackedPerStep = std::max(1, keys);
}

const std::map<std::string, std::vector<std::pair<int64_t, double>>>& WatchSession::series() const
{
    static const std::map<std::string, std::vector<std::pair<int64_t, double>>> none;
    return m_follower ? m_follower->series() : none;
}

void WatchSession::watch(const QString& folder)
{
    stop();
    const bool remote = optscope::isUrl(folder.toStdString());
    m_folder = remote ? folder : QFileInfo(folder).absoluteFilePath();
    ++m_generation;
    if (!remote) m_watcher->addPath(m_folder); // a bucket prefix is only polled
    m_follower = std::make_unique<RunFollower>(
        m_folder.toStdString(), m_comparison->options(), static_cast<size_t>(m_trackedPerStep));
    Q_EMIT watchingChanged();
    m_poll->start();
    pollNow();
}

void WatchSession::stop()
{
    if (!m_watcher->directories().isEmpty()) m_watcher->removePaths(m_watcher->directories());
    m_poll->stop();
    m_context->runner()->cancel(QStringLiteral("watch"));
    ++m_generation;
    m_busy = false;
    const bool was = isWatching() || !m_steps.empty();
    m_folder.clear();
    m_follower.reset();
    m_steps.clear();
    m_waiting.clear();
    if (was) Q_EMIT watchingChanged();
}

void WatchSession::setWaiting(const QString& reason)
{
    if (reason == m_waiting) return;
    m_waiting = reason;
    Q_EMIT waitingChanged();
}

void WatchSession::addStep(const RunStepSummary& s, const QString& name, const QString& path)
{
    m_steps.push_back({s.step, name, QString::fromStdString(s.statusText()), path});
    Q_EMIT stepAdded(name);
}

void WatchSession::pollNow()
{
    if (!isWatching() || m_busy || !m_follower) return;
    const RunFollower::Next next = m_follower->poll();
    // a step still being written (or not opening yet) is waited for, and the panel says so
    setWaiting(next.kind == RunFollower::Next::Wait ? QString::fromStdString(next.reason) : QString());
    if (next.kind == RunFollower::Next::Wait) return;
    if (next.kind == RunFollower::Next::Skip) {
        const RunStepSummary s = m_follower->skip(next);
        addStep(s, QString::fromStdString(s.name), QString());
        QTimer::singleShot(0, this, &WatchSession::pollNow);
        return;
    }
    m_busy = true;
    const RunCheckpoint entry = next.entry;
    const CheckpointPtr previous = m_follower->previous();
    const QString name = QString::fromStdString(entry.name);
    const bool newest = next.newest;
    const quint64 generation = m_generation;
    // the new step is A and the one before B, with the comparison's options: followed, the window shows this very
    // comparison and this very checkpoint, neither read nor compared again
    const DiffOptions options = m_follower->options();
    m_context->runner()->run(
        QStringLiteral("watch"), tr("Watch: reading %1").arg(name), this,
        [previous, next, options](
            const Progress& progress) { return RunFollower::readStep(next, previous, options, progress); },
        [this, entry, name, newest, generation, options](RunFollower::StepRead read) {
            if (generation != m_generation || !m_follower) return;
            m_busy = false;
            // what it was compared with (the step read before, or the one before a step its run rewrote)
            const QString previousPath = QString::fromStdString(read.previousPath);
            const CheckpointPtr previousCheckpoint = read.previous;
            const RunStepSummary s = m_follower->accept(entry, read);
            // the window follows the newest step only (catching up on a run's past steps opens nothing)
            if (m_follow && newest) {
                const QString newPath = QString::fromStdString(entry.path);
                auto* once = new QObject(this);
                auto report = std::make_shared<DiffReport>(std::move(read.report));
                const bool compared = read.compared;
                connect(m_context, &CheckpointContext::checkpointChanged, once,
                    [this, once, newPath, previousPath, previousCheckpoint, report, compared, options] {
                        const bool same = optscope::isUrl(newPath.toStdString())
                            ? m_context->path() == newPath
                            : QFileInfo(m_context->path()) == QFileInfo(newPath);
                        if (same && compared && previousCheckpoint)
                            m_comparison->showComparison(previousPath, previousCheckpoint, std::move(*report), options);
                        once->deleteLater();
                    });
                m_context->adopt(newPath, read.checkpoint);
            }
            addStep(s, name, QString::fromStdString(entry.path));
            QTimer::singleShot(0, this, &WatchSession::pollNow);
        },
        [this, entry, generation](const QString& message, bool cancelled) {
            if (generation != m_generation || !m_follower) return;
            m_busy = false;
            // not complete yet, or broken: retried when its files change; skipped once a later step is complete
            if (!cancelled) m_follower->failed(entry, message.toStdString());
        });
}

} // namespace optscope::ui
