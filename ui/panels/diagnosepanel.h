// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/diagnosis.h"

#include <QWidget>

#include <optional>

class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QSortFilterProxyModel;
class QTreeView;
class QTextBrowser;
class QToolButton;

namespace optscope::ui {

class CheckpointContext;
class DiagnosisModel;

/// The "Diagnose" dock: checks the open optimizer checkpoint against the model it should load into (a model
/// checkpoint file or folder, or a text file of FQNs; none = self-consistency only) and, optionally, the optimizer the
/// loading code builds; shows each finding with the error PyTorch would raise and the fix, what each load path does,
/// and applies the mechanical fixes into a new checkpoint.
class DiagnosePanel : public QWidget
{
    Q_OBJECT
public:
    explicit DiagnosePanel(CheckpointContext* context, QWidget* parent = nullptr);

    DiagnosisModel* model() const { return m_model; }
    QSortFilterProxyModel* proxy() const { return m_proxy; }
    QTreeView* view() const { return m_view; }
    QLineEdit* referenceEdit() const { return m_reference; }
    QLineEdit* targetEdit() const { return m_target; }
    /// the loading run's data-parallel world size; 0 ("as saved") when not given
    QSpinBox* worldSizeBox() const { return m_worldSize; }
    QPushButton* applyButton() const { return m_apply; }
    QString summaryText() const;
    QString detailsText() const;

    /// sets the reference (a checkpoint path, a .txt FQN list, or empty for none)
    void setReference(const QString& path);
    /// sets the target optimizer: a saved optimizer.state_dict() of the loading code's optimizer (its param groups);
    /// empty: the same groups as the saved optimizer
    void setTarget(const QString& path);
    /// diagnoses in the background
    void diagnose();
    /// applies the fixes of the last diagnosis and writes them to @p output (a file for torch.save input, a new
    /// folder for DCP input)
    void applyFixesTo(const QString& output);
    QString lastFixedPath() const { return m_lastFixed; }

Q_SIGNALS:
    void finished(bool ok);
    void fixFinished(bool ok, const QString& output);
    void openRequested(const QString& path);

private:
    /// what a fix did, in the panel's words (the CLI's fix prints the same DiagnosisChange)
    static QString changeText(const DiagnosisChange& change);
    void chooseReference(int kind);
    void onCurrentChanged();
    void setBusy(bool busy);
    void updateApply();

    CheckpointContext* m_context;
    QLineEdit* m_reference;
    QToolButton* m_browse;
    QLineEdit* m_target;
    QPushButton* m_targetBrowse;
    QSpinBox* m_worldSize;
    QPushButton* m_run;
    QPushButton* m_apply;
    QPushButton* m_openFixed;
    QLabel* m_summary;
    DiagnosisModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QTreeView* m_view;
    QTextBrowser* m_details;
    QString m_lastFixed;
    std::optional<Diagnosis> m_beforeFix; ///< the diagnosis the last fix was made from
    QString m_checkpointPath; ///< the checkpoint the reference was chosen for
    bool m_busy = false;
};

} // namespace optscope::ui
