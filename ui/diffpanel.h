// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

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

/// The "Diff" dock: compares the open checkpoint (A) with a second one (B), or two ranks of it; a sortable table of
/// keys with status and numbers, a heatmap of max |Δ| per key × rank and the histogram of Δ of the selected key.
class DiffPanel : public QWidget
{
    Q_OBJECT
public:
    static constexpr int HistogramBins = 48;

    explicit DiffPanel(CheckpointContext* context, QWidget* parent = nullptr);

    DiffModel* model() const { return m_model; }
    StatusFilterProxy* proxy() const { return m_proxy; }
    QTableView* view() const { return m_view; }
    DiffHeatmap* heatmap() const { return m_heatmap; }
    HistogramPlot* histogram() const { return m_histogram; }
    /// A | B | Δ of the current row's values (the first rows of both tensors)
    ValueCompareModel* valuesModel() const { return m_values; }
    QString valuesInfo() const;
    QString summaryText() const;
    QString pathB() const { return m_pathB; }
    /// "step 3 → 4" when the compared checkpoints' optimizer steps differ, empty otherwise
    QString stepChange() const { return m_stepChange; }

    /// compares the open checkpoint with @p path in the background
    void compareWith(const QString& path);
    /// the options a comparison started now uses: the tolerances as typed, the histogram bins
    DiffOptions comparisonOptions() const;
    /// shows a comparison made elsewhere with comparisonOptions() (File > Watch folder: the step just read, now the
    /// open checkpoint, against the one before, @p b at @p pathB): nothing is read or compared again; the step change
    /// reads in training order ("step 3 → 4", B to A)
    void showComparison(const QString& pathB, const CheckpointPtr& b, DiffReport report, const DiffOptions& options);
    /// compares two ranks of the open checkpoint; a checkpoint comparison shown before stays one click away
    void compareRanks(int rankA, int rankB);
    /// whether the table shows a comparison of two ranks (else of two checkpoints, or nothing)
    bool showingRanks() const { return m_shown.rankA >= 0; }
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
    /// copies the current row's full key (Ctrl+C), whichever cell is current
    void copyCurrentKey();
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
    /// the checkpoint B of the finished comparison; null when there is none (or two ranks were compared)
    void comparisonChanged(optscope::CheckpointPtr b);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    /// one comparison as shown: its report and where it came from
    struct Comparison
    {
        DiffReport report;
        QString steps;
        CheckpointPtr b;
        QString label;
        QString pathB;
        int rankA = -1;
        int rankB = -1;
        double rtol = 0;
        double atol = 0;
    };
    void run(const QString& label, const QString& pathB, int rankA, int rankB);
    void show(Comparison comparison);
    /// the tolerances changed: the shown comparison is run again with them
    void rerun();
    void onCurrentChanged();
    void showEntry(int entryIndex);
    void updateFilter();
    void startValues(const DiffEntry& entry);
    void setBusy(bool busy);

    CheckpointContext* m_context;
    QPushButton* m_openB;
    QSpinBox* m_rankA;
    QSpinBox* m_rankB;
    QPushButton* m_compareRanks;
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
    QString m_pathB;
    QString m_stepChange;
    int m_histogramFor = -1; ///< the entry whose histogram is being read (a later selection drops the result)
    CheckpointPtr m_checkpointB; ///< B of a checkpoint comparison (null for ranks), for one-element values
    QMenu* m_compareMenu;
    QPushButton* m_back;
    QTimer* m_tolTimer;
    ValueCompareModel* m_values;
    QTableView* m_valuesView;
    QLabel* m_valuesInfo;
    QTabWidget* m_rightTabs;
    /// rows of the running comparison, handed over from its worker threads and shown every few hundred ms
    struct PendingRows;
    std::shared_ptr<PendingRows> m_pending;
    QTimer* m_drain;
    QString m_shownLabelPending; ///< the running comparison's label
    Comparison m_shown; ///< without its report (the model holds it): what to run again when the tolerances change
    std::optional<Comparison> m_savedCheckpointDiff; ///< replaced by a rank comparison
};

} // namespace optscope::ui
