// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"

#include <QWidget>

#include <cstdint>
#include <utility>
#include <vector>

class QCheckBox;
class QCustomPlot;
class QLabel;
class QPushButton;
class QTableWidget;

namespace optscope::ui {

class CheckpointContext;
class WatchSession;

/// The "Watch" dock (File > Watch folder…): shows the watched training run (WatchSession: the folder's steps, each
/// new checkpoint read once it is complete and compared with the one before) as a table of steps and a chart of max
/// |Δ| of the most changed keys across the steps. With "Follow" the newest step is also opened in the window and
/// compared with the one before in the Diff panel.
class WatchPanel : public QWidget
{
    Q_OBJECT
public:
    WatchPanel(CheckpointContext* context, WatchSession* session, QWidget* parent = nullptr);

    /// starts following @p folder (the checkpoints already there are read in order): the session's watch()
    void watch(const QString& folder);
    void stop();
    bool isWatching() const;
    QString folder() const;
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
    CheckpointPtr latestCheckpoint() const;
    void setFollow(bool on);
    /// opens the step of row @p row in the window (double-click or Enter on a row); a skipped step has nothing to open
    void openStep(int row);
    /// how many of the most changed keys start a series at each step (32)
    void setTrackedPerStep(int keys);

Q_SIGNALS:
    /// a step was read (and compared with the one before, when there is one)
    void stepRead(const QString& name);

private:
    void updateChart();
    void updateTitle();
    void addStepRow(int64_t step, const QString& name, const QString& status, const QString& path);
    void onWatchingChanged();
    void onStepAdded(const QString& name);

    CheckpointContext* m_context;
    WatchSession* m_session;
    QLabel* m_title;
    QCheckBox* m_follow;
    QPushButton* m_stopButton = nullptr;
    QTableWidget* m_steps;
    QCustomPlot* m_chart;
    QStringList m_charted;
};

} // namespace optscope::ui
