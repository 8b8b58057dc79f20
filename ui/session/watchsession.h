// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/run_follower.h"
#include "optscope/model/checkpoint.h"

#include <QObject>
#include <QString>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

class QFileSystemWatcher;
class QTimer;

namespace optscope::ui {

class CheckpointContext;
class ComparisonSession;

/// The training run the app watches, apart from any widget (as the comparison is): the folder, the core's RunFollower
/// (which step is next, what each changed: optscope-cli watch uses the same), the background read of each new step,
/// and, when following, the window on the newest step compared with the one before (through the checkpoint context
/// and the comparison). The Watch panel shows its steps and series.
class WatchSession : public QObject
{
    Q_OBJECT
public:
    /// one step of the run as read (or skipped)
    struct Step
    {
        int64_t step = -1; ///< -1: unknown
        QString name;
        QString status; ///< what happened (RunStepSummary::statusText)
        QString path; ///< empty for a skipped step: nothing to open
    };

    WatchSession(CheckpointContext* context, ComparisonSession* comparison, QObject* parent = nullptr);
    ~WatchSession() override;

    /// starts following @p folder (a local folder or a URL prefix); the checkpoints already there are read in order
    void watch(const QString& folder);
    void stop();
    bool isWatching() const { return !m_folder.isEmpty(); }
    QString folder() const { return m_folder; }
    /// looks at the folder now (also done on a timer and, for a local folder, when it changes)
    void pollNow();
    /// why the next step is waited for ("still being written", ...); empty when not waiting
    QString waiting() const { return m_waiting; }

    const std::vector<Step>& steps() const { return m_steps; }
    /// max |Δ| per key between consecutive steps: (step, value) per comparison, the newer step's
    const std::map<std::string, std::vector<std::pair<int64_t, double>>>& series() const;
    /// the newest step read (the one the next is compared with)
    CheckpointPtr latestCheckpoint() const { return m_follower ? m_follower->previous() : nullptr; }

    /// whether the window opens the newest step and shows its comparison with the one before
    void setFollow(bool on) { m_follow = on; }
    bool follows() const { return m_follow; }
    /// how many of the most changed keys start a series at each step (32); applies from the next watch()
    void setTrackedPerStep(int keys);

Q_SIGNALS:
    /// watch() started or stop() ended a watch
    void watchingChanged();
    /// waiting() changed
    void waitingChanged();
    /// steps() grew by one (read or skipped); series() may have changed
    void stepAdded(const QString& name);

private:
    void addStep(const RunStepSummary& s, const QString& name, const QString& path);
    void setWaiting(const QString& reason);

    CheckpointContext* m_context;
    ComparisonSession* m_comparison;
    QFileSystemWatcher* m_watcher;
    QTimer* m_poll;
    QString m_folder;
    QString m_waiting;
    quint64 m_generation = 0; ///< bumped by watch()/stop(): results of an older watch are dropped
    bool m_busy = false;
    bool m_follow = true;
    int m_trackedPerStep = 32;
    std::unique_ptr<RunFollower> m_follower;
    std::vector<Step> m_steps;
};

} // namespace optscope::ui
