// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "session/comparisonsession.h"

#include "optscope/analysis/diff_report.h"
#include "optscope/model/checkpoint.h"

#include <memory>
#include <optional>

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QMenu;
class QModelIndex;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTimer;
class QTableView;
class QToolButton;

namespace optscope::ui {

class CheckpointContext;
class DiffHeatmap;
class DiffModel;
class HistogramPlot;
class StatusFilterProxy;
class ValueCompareModel;

/// The "Diff" dock: shows the ComparisonSession (the open checkpoint and a second one in training order, A the later,
/// or two ranks of it): a sortable table of keys with status and numbers, a heatmap of max |Δ| per key × rank, the
/// histogram of Δ and the values side by side of the selected key.
class DiffPanel : public QWidget
{
    Q_OBJECT
public:
    static constexpr int HistogramBins = ComparisonSession::HistogramBins;
    /// elements of A | B | Δ values shown at a time
    static constexpr int64_t ValuesPage = 1024;

    DiffPanel(CheckpointContext* context, ComparisonSession* session, QWidget* parent = nullptr);

    DiffModel* model() const { return m_model; }
    StatusFilterProxy* proxy() const { return m_proxy; }
    QTableView* view() const { return m_view; }
    DiffHeatmap* heatmap() const { return m_heatmap; }
    HistogramPlot* histogram() const { return m_histogram; }
    /// A | B | Δ of the current row's values (the first rows of both tensors)
    ValueCompareModel* valuesModel() const { return m_values; }
    QString valuesInfo() const;
    QString summaryText() const;
    /// where B is, for a comparison of two checkpoints
    QString pathB() const;
    /// "step 3 → 4" (from B to A) when the compared checkpoints' optimizer steps differ, empty otherwise
    QString stepChange() const;

    /// compares the open checkpoint with @p path in the background (the session's compareWith)
    void compareWith(const QString& path);
    /// compares two ranks of the open checkpoint; a checkpoint comparison shown before stays one click away
    void compareRanks(int rankA, int rankB);
    /// the shown checkpoint comparison the other way round (the Swap button)
    void swap();
    /// whether the table shows a comparison of two ranks (else of two checkpoints, or nothing)
    bool showingRanks() const;
    /// back from a rank comparison to the checkpoint comparison it replaced; false if there is none
    bool showCheckpointDiff();
    /// File… and DCP folder… pickers for B, starting beside the open checkpoint (the panel's button and the main
    /// window's File > Compare with… show the same menu)
    QMenu* compareMenu() const { return m_compareMenu; }
    /// shows the Δ histogram of a key of the report (the table selection follows)
    void showKey(const QString& key);
    /// the context menu of a row: Copy full key, Copy value (scalars, A's), Show in shard layout, Inspect in Tensor
    /// details; its actions are named copyKey, copyValue, showShards, inspect. The caller owns it.
    QMenu* contextMenu(const QModelIndex& index);
    /// whether a report with keys is shown
    bool hasReport() const;
    QString exportJson(const QString& path) const;
    QString exportCsv(const QString& path) const;

Q_SIGNALS:
    void finished(bool ok);
    /// the user asked to inspect a key of A: the main window raises Tensor details
    void jumpRequested(const QString& key);
    void showInShardLayoutRequested(const QString& key);
    /// the A | B | Δ values of the current row arrived
    void valuesReady();
    /// the Δ histogram of the current row, read when it was selected, is shown
    void histogramShown();

private:
    /// a comparison is shown: the summary, the heatmap, the first row
    void onShown();
    void onCurrentChanged();
    void showEntry(int entryIndex);
    void updateFilter();
    /// reads the page of A | B | Δ values holding element @p first of @p entry
    void startValues(const DiffEntry& entry, int64_t first);
    void showValuesPage(int64_t first);
    void setBusy(bool busy);

    CheckpointContext* m_context;
    ComparisonSession* m_session;
    QPushButton* m_openB;
    QSpinBox* m_rankA;
    QSpinBox* m_rankB;
    QPushButton* m_compareRanks;
    QPushButton* m_swap;
    QPushButton* m_stop;
    QLineEdit* m_rtol;
    QLineEdit* m_atol;
    QComboBox* m_statusFilter;
    QLineEdit* m_search;
    QToolButton* m_export;
    QLabel* m_summary;
    DiffModel* m_model;
    StatusFilterProxy* m_proxy;
    QTableView* m_view;
    DiffHeatmap* m_heatmap;
    HistogramPlot* m_histogram;
    QCheckBox* m_logScale;
    QLabel* m_histTitle;
    int m_histogramFor = -1; ///< the entry whose histogram is being read (a later selection drops the result)
    QMenu* m_compareMenu;
    QPushButton* m_back;
    QTimer* m_tolTimer;
    ValueCompareModel* m_values;
    QTableView* m_valuesView;
    QLabel* m_valuesInfo;
    QToolButton* m_valuesPrev;
    QToolButton* m_valuesNext;
    int m_valuesEntry = -1; ///< the report entry whose values are shown
    int64_t m_valuesFirst = 0; ///< the first element of the page shown
    QTabWidget* m_rightTabs;
    QString m_running; ///< what the running comparison compares, for its progress
};

} // namespace optscope::ui
