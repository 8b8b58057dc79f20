// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/base/progress.h"

#include <QHash>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QThreadPool>

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace optscope::ui {

/// Runs core work off the UI thread. Every job belongs to a channel ("load", "stats", "diff", ...): starting a job
/// cancels the one still running in the same channel (its Progress::cancelled turns true and its result is dropped),
/// so a fast series of selections only ever delivers the last one. Results are delivered on the UI thread, queued,
/// and only while the context object still exists. Progress is throttled to a few updates per second.
class JobRunner : public QObject
{
    Q_OBJECT
public:
    using ErrorHandler = std::function<void(const QString& message, bool cancelled)>;

    explicit JobRunner(QObject* parent = nullptr);
    ~JobRunner() override;

    /// Starts @p work(progress) on the pool; @p done(result) then runs on the UI thread if the job is still the
    /// current one of @p channel and @p context still lives. @p failed gets the message of a thrown Error/exception
    /// (cancelled = true when the job was cancelled or superseded). Returns the job id.
    template<typename Work, typename Done>
    quint64 run(
        const QString& channel, const QString& label, QObject* context, Work work, Done done, ErrorHandler failed = {})
    {
        using Result = std::invoke_result_t<Work, const Progress&>;
        Task task = [work = std::move(work), done = std::move(done)](const Progress& progress) -> Delivery {
            auto result = std::make_shared<Result>(work(progress));
            return [done, result]() { done(std::move(*result)); };
        };
        return start(channel, label, context, std::move(task), std::move(failed));
    }

    /// cancels the running job of @p channel, if any
    void cancel(const QString& channel);
    /// cancels every running job
    void cancelAll();
    bool isIdle() const { return m_jobs.isEmpty(); }
    bool isRunning(const QString& channel) const { return m_jobs.contains(channel); }
    /// the label of the most recently started running job (for the status bar)
    QString currentLabel() const;
    /// blocks until the pool is drained (tests and shutdown only)
    void waitForDone();

Q_SIGNALS:
    void jobStarted(quint64 id, const QString& label);
    void jobFinished(quint64 id, const QString& label, bool ok);
    /// throttled; fraction in [0, 1]
    void progress(const QString& label, double fraction, const QString& stage);
    /// no job is running any more
    void idle();

private:
    using Delivery = std::function<void()>;
    using Task = std::function<Delivery(const Progress&)>;
    struct Job;

    quint64 start(const QString& channel, const QString& label, QObject* context, Task task, ErrorHandler failed);
    void finish(const std::shared_ptr<Job>& job, bool ok);

    QThreadPool m_pool;
    QHash<QString, std::shared_ptr<Job>> m_jobs; ///< running job per channel
    QHash<QString, quint64> m_latest; ///< id of the last job started per channel
    quint64 m_nextId = 1;
    quint64 m_lastStarted = 0;
};

} // namespace optscope::ui
