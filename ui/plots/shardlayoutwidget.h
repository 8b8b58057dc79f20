// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/shard_layout.h"

#include <QWidget>

#include <optional>

namespace optscope::ui {

/// Paints which rank holds which rows of one tensor: one lane per rank, chunks in proportion along dim 0 (and, for
/// chunks that split dim 1, the part of the lane's height they cover), FSDP padding hatched, gaps and overlaps in red.
/// Wheel zooms around the cursor, dragging pans, double-click resets; tooltips name offsets and sizes.
/// Thousands of ranks do not fit one lane each: consecutive ranks then share a lane (r0-15, r16-31, ...) labelled
/// with what the group holds, and Ctrl+wheel zooms into a range of ranks (down to one lane per rank).
class ShardLayoutWidget : public QWidget
{
    Q_OBJECT
public:
    explicit ShardLayoutWidget(QWidget* parent = nullptr);

    void setShardLayout(std::optional<ShardLayout> layout, const QString& message = {});
    const std::optional<ShardLayout>& shardLayout() const { return m_layout; }
    /// the text shown instead of a layout
    QString message() const { return m_message; }
    /// ranks drawn (max rank + 1, or 1)
    int laneCount() const;
    /// ranks shown in one lane at the current size and rank range (1 = a lane per rank)
    int ranksPerLane() const;
    /// ranks shown: [first, last]
    int firstRank() const { return m_rankFirst; }
    int lastRank() const;
    /// show ranks [first, last] only (clamped; Ctrl+wheel does the same around the cursor)
    void setRankRange(int first, int last);
    /// visible dim-0 range
    double viewStart() const { return m_viewStart; }
    double viewEnd() const { return m_viewEnd; }
    void resetView();
    /// rows of padding rank @p rank has under FSDP's torch.chunk rule (0 if the layout is not that rule)
    int64_t paddingRows(int rank) const;
    /// tooltip text at a widget position (empty if nothing there)
    QString toolTipAt(const QPoint& pos) const;

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    bool event(QEvent* event) override;

private:
    struct Geometry
    {
        QRectF plot; ///< lanes area
        double laneHeight = 0;
        double coverageTop = 0; ///< coverage lane
        int group = 1; ///< ranks per lane
        int lanes = 0; ///< lanes drawn (rank groups, plus one for unknown ranks)
    };
    Geometry geometry() const;
    double rows() const; ///< dim 0 extent (1 for 0-dim)
    double domainEnd() const; ///< rows plus FSDP padding past the end
    double toX(const Geometry& g, double row) const;
    double toRow(const Geometry& g, double x) const;
    QRectF boxRect(const Geometry& g, const TensorBox& box, double top, double height) const;
    /// the lane of @p rank, -1 when outside the rank range shown
    int laneOf(const Geometry& g, int rank) const;
    QString laneName(const Geometry& g, int lane) const;
    bool hasUnknownRank() const;
    QColor rankColor(int rank) const;
    void computePadding();

    std::optional<ShardLayout> m_layout;
    QString m_message;
    std::vector<int64_t> m_padding; ///< per rank: padded chunk [start, start + size) rows, or empty
    int64_t m_chunkRows = 0; ///< FSDP chunk size C when the layout is torch.chunk along dim 0
    int m_rankFirst = 0;
    int m_rankLast = -1; ///< -1: to the last rank
    double m_viewStart = 0;
    double m_viewEnd = 1;
    bool m_dragging = false;
    QPoint m_dragOrigin;
    double m_dragStart = 0;
};

} // namespace optscope::ui
