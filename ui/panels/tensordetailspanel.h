// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"
#include "optscope/optim/optimizer_view.h"

#include <QWidget>

#include <vector>

class QCheckBox;
class QLabel;
class QPlainTextEdit;
class QSpinBox;
class QStackedWidget;
class QTableView;
class QTabWidget;

namespace optscope::ui {

class CheckpointContext;
class ChunkListModel;
class HistogramPlot;
class ParamGroupsModel;
class TensorStatsModel;
class ValuesPreviewModel;

/// The "Tensor details" dock: statistics and histogram of the selected tensor (computed in the background), a
/// window of its values from a chosen row, and the chunks each rank holds. Values show their Python repr.
class TensorDetailsPanel : public QWidget
{
    Q_OBJECT
public:
    static constexpr int HistogramBins = 64;
    static constexpr int PreviewRows = 100;
    static constexpr int PreviewColumns = 32;

    explicit TensorDetailsPanel(CheckpointContext* context, QWidget* parent = nullptr);

    TensorStatsModel* statsModel() const { return m_statsModel; }
    ValuesPreviewModel* previewModel() const { return m_previewModel; }
    ChunkListModel* chunkModel() const { return m_chunkModel; }
    HistogramPlot* histogram() const { return m_histogram; }
    QSpinBox* rowOffset() const { return m_rowOffset; }
    QCheckBox* logScale() const { return m_logScale; }
    QString statusText() const;
    /// the value page's text (a value, or a one-element tensor's value) when it is shown, empty otherwise
    QString valueText() const;
    /// the param_groups table (groups × hyperparameters) shown when param_groups or a group is selected
    ParamGroupsModel* paramGroupsModel() const { return m_groupsModel; }
    /// the checkpoint compared with (Diff): param_groups cells that differ from it are marked; null for none
    void setComparison(CheckpointPtr b);

Q_SIGNALS:
    /// the statistics of the selected tensor arrived (for tests and the screenshot mode)
    void statsReady();
    void previewReady();

private:
    void onSelectionChanged();
    void startPreview();

    CheckpointContext* m_context;
    QLabel* m_title;
    QStackedWidget* m_stack;
    QLabel* m_placeholder;
    QPlainTextEdit* m_valueText;
    ParamGroupsModel* m_groupsModel;
    QLabel* m_groupsTitle;
    CheckpointPtr m_compare;
    std::vector<OptimizerView> m_compareOptimizers;
    TensorStatsModel* m_statsModel;
    QTableView* m_statsView;
    HistogramPlot* m_histogram;
    QCheckBox* m_logScale;
    QLabel* m_status;
    QTabWidget* m_tabs;
    ValuesPreviewModel* m_previewModel;
    QTableView* m_previewView;
    QSpinBox* m_rowOffset;
    QLabel* m_previewInfo;
    ChunkListModel* m_chunkModel;
    QTableView* m_chunkView;
};

} // namespace optscope::ui
