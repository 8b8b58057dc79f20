// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/reshard.h"

#include <QWidget>

#include <optional>

class QLabel;
class QScrollArea;

namespace optscope::ui {

class CheckpointContext;
class ReshardPreview;
class ShardLayoutWidget;

/// The "Shard layout" dock: the selected tensor's chunks per rank (ShardLayout), with what is wrong with them.
class ShardLayoutPanel : public QWidget
{
    Q_OBJECT
public:
    /// draws the selected tensor of @p context, or as @p preview's target layout would lay it out while one is set
    ShardLayoutPanel(CheckpointContext* context, ReshardPreview* preview, QWidget* parent = nullptr);

    ShardLayoutWidget* layoutWidget() const { return m_widget; }
    QString summaryText() const;
    QString titleText() const;
    bool isPreviewing() const;
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
    ReshardPreview* m_preview;
    bool m_needsRoom = true; ///< the default layout gives the panel its room
};

} // namespace optscope::ui
