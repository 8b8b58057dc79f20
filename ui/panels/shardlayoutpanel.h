// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/reshard.h"

#include <QWidget>

#include <optional>

class QLabel;
class QScrollArea;

namespace optscope::ui {

class CheckpointContext;
class ShardLayoutWidget;

/// The "Shard layout" dock: the selected tensor's chunks per rank (ShardLayout), with what is wrong with them.
class ShardLayoutPanel : public QWidget
{
    Q_OBJECT
public:
    explicit ShardLayoutPanel(CheckpointContext* context, QWidget* parent = nullptr);

    ShardLayoutWidget* layoutWidget() const { return m_widget; }
    QString summaryText() const;
    QString titleText() const;
    /// shows the selected tensor as a reshard with @p options would lay it out (nullopt: as it is); the Reshard
    /// panel's preview
    void setPreview(std::optional<ReshardOptions> options);
    bool isPreviewing() const { return m_preview.has_value(); }
    /// the preview's layout was written to @p outDir (Reshard and save): the title says so instead of "nothing
    /// written yet"; a preview of other options clears it
    void setPreviewWritten(const QString& outDir, const ReshardOptions& options);
    /// whether the open checkpoint gives this panel something to show (its tensors are split over ranks, or a
    /// reshard is previewed); an unsharded file's panel gives its height to the others
    bool needsRoom() const { return m_needsRoom; }

Q_SIGNALS:
    void needsRoomChanged(bool needsRoom);

private:
    void onSelectionChanged();
    void updateNeedsRoom();

    CheckpointContext* m_context;
    QLabel* m_title;
    ShardLayoutWidget* m_widget;
    QScrollArea* m_lanes; ///< m_widget, scrolled when the dock is short
    QWidget* m_legend;
    QLabel* m_summary;
    std::optional<ReshardOptions> m_preview;
    QString m_previewWrittenTo;
    bool m_needsRoom = true; ///< the default layout gives the panel its room
};

} // namespace optscope::ui
