// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/run_follower.h"
#include "optscope/formats/run_folder.h"
#include "optscope/model/checkpoint.h"

#include <QWidget>

#include <algorithm>
#include <map>
#include <memory>
#include <utility>
#include <vector>

class QCheckBox;
class QCustomPlot;
class QFileSystemWatcher;
class QLabel;
class QPushButton;
class QTableWidget;
class QTimer;

namespace optscope::ui {

class CheckpointContext;
class ComparisonSession;

/// The "Watch" dock (File > Watch folder…): follows a training run's checkpoint folder (step_100/, step_200/, ...),
/// opens each new checkpoint once it is complete (its files stopped changing and it opens), compares it with the one
/// before and charts max |Δ| of each key across the steps. With "Follow" the newest step is also opened in the
/// window and compared with the one before in the Diff panel.
class WatchPanel : public QWidget
{
    Q_OBJECT
public:
    WatchPanel(CheckpointContext* context, ComparisonSession* comparison, QWidget* parent = nullptr);

    /// starts following @p folder (the checkpoints already there are read in order)
    void watch(const QString& folder);
    void stop();
    bool isWatching() const { return !m_folder.isEmpty(); }
    QString folder() const { return m_folder; }
    /// looks at the folder now (also done on a timer and when the folder changes)
    void pollNow();
    /// the steps read so far, in order: name and what happened
    std::vector<std::pair<QString, QString>> steps() const;
    /// max |Δ| of @p key between consecutive steps: (step, value) per comparison, the step being the newer one. Kept
    /// for the keys that were among the 32 most changed at some step (from then on)
    std::vector<std::pair<int64_t, double>> series(const QString& key) const;
    /// the keys drawn in the chart: the largest max |Δ| at the newest step
    QStringList chartedKeys() const { return m_charted; }
    /// the chart (tests: its axes and legend)
    QCustomPlot* chart() const { return m_chart; }
    /// the newest step read (the one the next is compared with)
    CheckpointPtr latestCheckpoint() const { return m_follower ? m_follower->previous() : nullptr; }
    void setFollow(bool on);
    /// opens the step of row @p row in the window (double-click or Enter on a row); a skipped step has nothing to open
    void openStep(int row);
    /// how many of the most changed keys start a series at each step (32)
    void setTrackedPerStep(int keys) { m_trackedPerStep = std::max(1, keys); }

Q_SIGNALS:
    /// a step was read (and compared with the one before, when there is one)
    void stepRead(const QString& name);

private:
    void updateChart();
    void addStepRow(int64_t step, const QString& name, const QString& status, const QString& path);

    CheckpointContext* m_context;
    ComparisonSession* m_comparison;
    QLabel* m_title;
    QCheckBox* m_follow;
    QPushButton* m_stopButton = nullptr;
    QTableWidget* m_steps;
    QCustomPlot* m_chart;
    QFileSystemWatcher* m_watcher;
    QTimer* m_poll;
    QString m_folder;
    quint64 m_generation = 0; ///< bumped by watch()/stop(): results of an older watch are dropped
    bool m_busy = false;
    /// which step is next and what each changed: the core's RunFollower, as optscope-cli watch uses it
    std::unique_ptr<RunFollower> m_follower;
    QStringList m_charted;
    int m_trackedPerStep = 32;
};

} // namespace optscope::ui
