// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/reshard.h"

#include <QWidget>

#include <optional>

class QCheckBox;
class QComboBox;
class QLabel;
class QPushButton;
class QSpinBox;
class QToolButton;
class QTreeView;

namespace optscope::ui {

class CheckpointContext;
class ReshardPreview;
class StatusFilterProxy;
class VerifyModel;

/// The "Reshard & verify" dock: reshard the open checkpoint to another world size and layout (on the CPU or the
/// GPUs the core reports), load it back as each rank would and compare bit for bit; per-key / per-rank results,
/// export of the report (JSON, CSV) and of the resharded checkpoint.
class ReshardPanel : public QWidget
{
    Q_OBJECT
public:
    /// reshards the checkpoint of @p context; its "Preview layout" sets @p preview's target
    ReshardPanel(CheckpointContext* context, ReshardPreview* preview, QWidget* parent = nullptr);

    VerifyModel* model() const { return m_model; }
    StatusFilterProxy* proxy() const { return m_proxy; }
    QSpinBox* worldSize() const { return m_world; }
    QComboBox* layoutCombo() const { return m_layout; }
    QComboBox* deviceCombo() const { return m_device; }
    QPushButton* stopButton() const { return m_stop; }
    QString summaryText() const;
    /// the target layout the options describe (world size, FSDP1/FSDP2)
    ReshardOptions targetOptions() const;
    /// turns the Shard layout preview of the target layout on or off (the "Preview layout" button)
    void setPreviewing(bool on);
    /// the folder the last "Reshard and save" wrote (empty before); "Open resharded" opens it
    QString lastOutput() const { return m_lastOutput; }
    /// "<checkpoint's folder>/<its name>_<N>ranks": where the save dialog starts
    QString suggestedOutput() const;

    /// verify-by-load in the background (the Verify button)
    void verify();
    /// reshard into @p outDir (a new folder), then verify the written copy against the source
    void reshardTo(const QString& outDir);
    QString exportJson(const QString& path) const;
    QString exportCsv(const QString& path) const;

Q_SIGNALS:
    void finished(bool ok);
    /// "Open resharded": the main window opens the written folder
    void openRequested(const QString& path);

private:
    void onCheckpointChanged();
    void queryDevices();
    void setBusy(bool busy);
    void showReport();

    CheckpointContext* m_context;
    ReshardPreview* m_previewed;
    QSpinBox* m_world;
    QComboBox* m_layout;
    QComboBox* m_device;
    QPushButton* m_verify;
    QPushButton* m_reshard;
    QPushButton* m_stop;
    QPushButton* m_preview;
    QPushButton* m_open;
    QString m_lastOutput;
    QToolButton* m_export;
    QCheckBox* m_problemsOnly;
    QLabel* m_summary;
    VerifyModel* m_model;
    StatusFilterProxy* m_proxy;
    QTreeView* m_view;
};

} // namespace optscope::ui
