// SPDX-License-Identifier: GPL-3.0-or-later
#include "session/jobrunner.h"

#include "optscope/base/error.h"

#include <QElapsedTimer>
#include <QMetaObject>
#include <QRunnable>

#include <atomic>
#include <mutex>

namespace optscope::ui {

struct JobRunner::Job
{
    quint64 id = 0;
    QString channel;
    QString label;
    std::atomic<bool> cancelled {false};
    std::mutex progressMutex;
    QElapsedTimer sinceReport;
    bool reportedOnce = false;
};

namespace {
constexpr qint64 ProgressIntervalMs = 100;
} // namespace

JobRunner::JobRunner(QObject* parent)
    : QObject(parent)
{
    // jobs are mostly I/O plus ATen ops that use their own intra-op threads: two at a time keep the UI snappy
    m_pool.setMaxThreadCount(2);
}

JobRunner::~JobRunner()
{
    cancelAll();
    m_pool.waitForDone();
}

quint64 JobRunner::start(const QString& channel, const QString& label, QObject* context, Task task, ErrorHandler failed)
{
    cancel(channel);
    auto job = std::make_shared<Job>();
    job->id = m_nextId++;
    job->channel = channel;
    job->label = label;
    job->sinceReport.start();
    m_jobs.insert(channel, job);
    m_latest.insert(channel, job->id);
    m_lastStarted = job->id;
    Q_EMIT jobStarted(job->id, label);

    QPointer<JobRunner> self(this);
    QPointer<QObject> target(context);
    auto body = [self, target, job, task = std::move(task), failed = std::move(failed)]() {
        Progress progress;
        progress.cancelled = [job]() { return job->cancelled.load(std::memory_order_relaxed); };
        progress.report = [self, job](double fraction, std::string_view stage) {
            std::lock_guard<std::mutex> lock(job->progressMutex);
            if (job->reportedOnce && job->sinceReport.elapsed() < ProgressIntervalMs && fraction < 1.0) return;
            job->reportedOnce = true;
            job->sinceReport.restart();
            const QString stageText = QString::fromUtf8(stage.data(), static_cast<qsizetype>(stage.size()));
            QMetaObject::invokeMethod(
                self.data(),
                [self, job, fraction, stageText]() {
                    if (self && self->m_jobs.value(job->channel) == job)
                        Q_EMIT self->progress(job->label, fraction, stageText);
                },
                Qt::QueuedConnection);
        };
        // the result (or the error) travels back to the UI thread as a queued call on the runner, which outlives
        // every job (its destructor drains the pool); the context is checked there, on its own thread
        Delivery deliver;
        QString error;
        bool cancelled = false;
        try {
            const CancelScope scope(progress); // cancelling the job also ends its waits on remote storage
            deliver = task(progress);
        } catch (const Error& e) {
            cancelled = e.kind() == ErrorKind::Cancelled;
            error = QString::fromStdString(e.what());
        } catch (const std::exception& e) {
            error = QString::fromStdString(unexpectedErrorText(e));
        }
        if (job->cancelled.load()) cancelled = true;
        QMetaObject::invokeMethod(
            self.data(),
            [self, target, job, deliver = std::move(deliver), error, cancelled, failed]() {
                if (!self) return;
                const bool current = self->m_jobs.value(job->channel) == job;
                if (current) self->finish(job, deliver && !cancelled);
                // a superseded job is dropped silently; the latest one of its channel reports, even if cancelled
                if (!target || self->m_latest.value(job->channel) != job->id) return;
                // no longer current but still the latest: cancel() took it after its work was done
                const bool wasCancelled = cancelled || !current;
                if (deliver && !wasCancelled)
                    deliver();
                else if (failed)
                    failed(wasCancelled ? tr("Cancelled") : error, wasCancelled);
            },
            Qt::QueuedConnection);
    };
    m_pool.start(std::move(body));
    return job->id;
}

void JobRunner::finish(const std::shared_ptr<Job>& job, bool ok)
{
    m_jobs.remove(job->channel);
    Q_EMIT jobFinished(job->id, job->label, ok);
    if (m_jobs.isEmpty()) Q_EMIT idle();
}

void JobRunner::cancel(const QString& channel)
{
    auto it = m_jobs.find(channel);
    if (it == m_jobs.end()) return;
    const auto job = it.value();
    job->cancelled = true;
    m_jobs.erase(it);
    Q_EMIT jobFinished(job->id, job->label, false);
    if (m_jobs.isEmpty()) Q_EMIT idle();
}

void JobRunner::cancelAll()
{
    const auto channels = m_jobs.keys();
    for (const auto& c : channels)
        cancel(c);
}

QString JobRunner::currentLabel() const
{
    std::shared_ptr<Job> latest;
    for (const auto& j : m_jobs)
        if (!latest || j->id > latest->id) latest = j;
    return latest ? latest->label : QString();
}

void JobRunner::waitForDone()
{
    m_pool.waitForDone();
}

} // namespace optscope::ui
