// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/shardlayoutwidget.h"

#include "optscope/model/flat_param_layout.h"

#include "common/format.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>
#include <set>

namespace optscope::ui {

namespace {
constexpr int LeftMargin = 96;
constexpr int RightMargin = 12;
constexpr int TopMargin = 8;
constexpr int AxisHeight = 34;
constexpr int CoverageHeight = 14;
constexpr double MaxLane = 96;
constexpr double MinLane = 12; ///< the thinnest lane drawn: ranks share a lane rather than get less
/// up to this many lanes the widget asks for the height of one lane per rank (its panel scrolls when the dock is
/// lower): ranks share lanes only past a few dozen, never at 3 because the dock is short
constexpr int LanesBeforeMerging = 32;

const QColor kGap(0xd6, 0x27, 0x28);
} // namespace

ShardLayoutWidget::ShardLayoutWidget(QWidget* parent)
    : QWidget(parent)
{
    setMouseTracking(true);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setFocusPolicy(Qt::StrongFocus);
}

QSize ShardLayoutWidget::sizeHint() const
{
    // past 8 ranks lanes shrink (and group) rather than ask for a taller widget
    return {
        640, TopMargin + CoverageHeight + 8 + static_cast<int>(MaxLane) * std::clamp(laneCount(), 2, 8) + AxisHeight};
}

QSize ShardLayoutWidget::minimumSizeHint() const
{
    if (!m_layout) return {240, 40}; // a message: one line
    const int shown = lastRank() - m_rankFirst + 1 + (hasUnknownRank() ? 1 : 0);
    return {240,
        TopMargin + CoverageHeight + 8 + static_cast<int>(MinLane) * std::clamp(shown, 1, LanesBeforeMerging)
            + AxisHeight};
}

int ShardLayoutWidget::laneCount() const
{
    if (!m_layout) return 0;
    int maxRank = -1; // a torch.save file's chunks have no rank: one "no rank" lane, not an empty "rank 0" above it
    for (int r : m_layout->ranks)
        maxRank = std::max(maxRank, r);
    return maxRank + 1 + (std::count(m_layout->ranks.begin(), m_layout->ranks.end(), -1) > 0 ? 1 : 0);
}

bool ShardLayoutWidget::hasUnknownRank() const
{
    return m_layout && std::count(m_layout->ranks.begin(), m_layout->ranks.end(), -1) > 0;
}

int ShardLayoutWidget::lastRank() const
{
    const int world = laneCount() - (hasUnknownRank() ? 1 : 0);
    return m_rankLast < 0 ? world - 1 : std::min(m_rankLast, world - 1);
}

void ShardLayoutWidget::setRankRange(int first, int last)
{
    const int world = laneCount() - (hasUnknownRank() ? 1 : 0);
    m_rankFirst = std::clamp(first, 0, std::max(world - 1, 0));
    m_rankLast = std::clamp(last, m_rankFirst, std::max(world - 1, 0));
    if (m_rankFirst == 0 && m_rankLast == world - 1) m_rankLast = -1;
    updateGeometry();
    update();
}

int ShardLayoutWidget::ranksPerLane() const
{
    return geometry().group;
}

int ShardLayoutWidget::laneOf(const Geometry& g, int rank) const
{
    if (rank < 0) return hasUnknownRank() ? g.lanes - 1 : -1; // unknown rank: the last lane
    if (rank < m_rankFirst || rank > lastRank()) return -1;
    return (rank - m_rankFirst) / g.group;
}

QString ShardLayoutWidget::laneName(const Geometry& g, int lane) const
{
    if (hasUnknownRank() && lane == g.lanes - 1) return tr("no rank");
    const int first = m_rankFirst + lane * g.group;
    const int last = std::min(first + g.group - 1, lastRank());
    return first == last ? tr("rank %1").arg(first) : tr("r%1–%2").arg(first).arg(last);
}

void ShardLayoutWidget::setShardLayout(std::optional<ShardLayout> layout, const QString& message)
{
    m_layout = std::move(layout);
    m_message = message;
    m_rankFirst = 0;
    m_rankLast = -1;
    computePadding();
    resetView();
    updateGeometry();
}

void ShardLayoutWidget::computePadding()
{
    m_padding.clear();
    m_chunkRows = 0;
    if (!m_layout || m_layout->shape.empty() || m_layout->chunks.empty()) return;
    // FSDP shards dim 0 with torch.chunk and pads every chunk to ceil(n / world) rows (the core's one dim-0 rule)
    const int world = laneCount();
    std::vector<std::vector<int64_t>> offsets, sizes;
    for (const auto& b : m_layout->chunks) {
        offsets.push_back(b.offsets);
        sizes.push_back(b.sizes);
    }
    m_padding = dim0PaddingRows(m_layout->shape, m_layout->ranks, offsets, sizes, world);
    if (!m_padding.empty()) m_chunkRows = chunkDim0(m_layout->shape[0], world, 0).size;
}

int64_t ShardLayoutWidget::paddingRows(int rank) const
{
    return rank >= 0 && static_cast<size_t>(rank) < m_padding.size() ? m_padding[static_cast<size_t>(rank)] : 0;
}

double ShardLayoutWidget::rows() const
{
    if (!m_layout || m_layout->shape.empty()) return 1.0;
    return std::max<double>(static_cast<double>(m_layout->shape[0]), 1.0);
}

double ShardLayoutWidget::domainEnd() const
{
    double end = rows();
    if (m_chunkRows > 0) end = std::max(end, static_cast<double>(m_chunkRows) * laneCount());
    if (m_layout && !m_layout->shape.empty())
        for (const auto& b : m_layout->chunks)
            if (!b.offsets.empty()) end = std::max(end, static_cast<double>(b.offsets[0] + b.sizes[0]));
    return end;
}

void ShardLayoutWidget::resetView()
{
    m_viewStart = 0;
    m_viewEnd = domainEnd();
    update();
}

ShardLayoutWidget::Geometry ShardLayoutWidget::geometry() const
{
    Geometry g;
    g.coverageTop = TopMargin;
    const double top = TopMargin + CoverageHeight + 8;
    const double available = std::max(MinLane, height() - top - AxisHeight);
    // as many ranks per lane as it takes to give each lane 12 px: 1, 2, 4, 8, ... (round numbers read better)
    const int shown = m_layout ? lastRank() - m_rankFirst + 1 : 1;
    const int unknown = hasUnknownRank() ? 1 : 0;
    const int fit = std::max(1, static_cast<int>(available / MinLane) - unknown);
    g.group = 1;
    while ((shown + g.group - 1) / g.group > fit)
        g.group *= 2;
    g.lanes = std::max(1, (shown + g.group - 1) / g.group + unknown);
    g.laneHeight = std::clamp(available / g.lanes, MinLane, MaxLane);
    g.plot = QRectF(LeftMargin, top, std::max(10, width() - LeftMargin - RightMargin), g.laneHeight * g.lanes);
    return g;
}

double ShardLayoutWidget::toX(const Geometry& g, double row) const
{
    return g.plot.left() + (row - m_viewStart) / (m_viewEnd - m_viewStart) * g.plot.width();
}

double ShardLayoutWidget::toRow(const Geometry& g, double x) const
{
    return m_viewStart + (x - g.plot.left()) / g.plot.width() * (m_viewEnd - m_viewStart);
}

QRectF ShardLayoutWidget::boxRect(const Geometry& g, const TensorBox& box, double top, double height) const
{
    double r0 = 0, r1 = 1, f0 = 0, f1 = 1;
    if (!box.offsets.empty() && m_layout && !m_layout->shape.empty()) {
        r0 = static_cast<double>(box.offsets[0]);
        r1 = r0 + static_cast<double>(box.sizes[0]);
        if (box.offsets.size() >= 2 && m_layout->shape.size() >= 2 && m_layout->shape[1] > 0) {
            const double d1 = static_cast<double>(m_layout->shape[1]);
            f0 = static_cast<double>(box.offsets[1]) / d1;
            f1 = static_cast<double>(box.offsets[1] + box.sizes[1]) / d1;
        }
    }
    const double inner = height - 6;
    return QRectF(QPointF(toX(g, r0), top + 3 + f0 * inner), QPointF(toX(g, r1), top + 3 + f1 * inner));
}

QColor ShardLayoutWidget::rankColor(int rank) const
{
    static const QColor colors[]
        = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0x59, 0xa1, 0x4f), QColor(0xb0, 0x7a, 0xa1),
            QColor(0x76, 0xb7, 0xb2), QColor(0xed, 0xc9, 0x48), QColor(0x9c, 0x75, 0x5f), QColor(0xff, 0x9d, 0xa7)};
    return rank < 0 ? QColor(Qt::gray) : colors[rank % 8];
}

void ShardLayoutWidget::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    p.fillRect(rect(), palette().color(QPalette::Base));
    const QColor text = palette().color(QPalette::Text);
    const QColor mid = palette().color(QPalette::Mid);
    if (!m_layout) {
        p.setPen(palette().color(QPalette::PlaceholderText));
        p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, m_message);
        return;
    }
    p.setRenderHint(QPainter::Antialiasing, false);
    const Geometry g = geometry();
    const int lanes = g.lanes;
    const double end = rows();
    p.setClipRect(QRectF(0, 0, width(), height()));

    // what each lane holds, in one pass over the chunks
    std::vector<int64_t> held(static_cast<size_t>(lanes), 0);
    std::vector<int64_t> chunkCount(static_cast<size_t>(lanes), 0);
    for (size_t i = 0; i < m_layout->chunks.size(); ++i) {
        const int l = laneOf(g, m_layout->ranks[i]);
        if (l < 0 || l >= lanes) continue;
        held[static_cast<size_t>(l)] += m_layout->chunks[i].numel();
        ++chunkCount[static_cast<size_t>(l)];
    }
    // lane backgrounds and labels
    for (int l = 0; l < lanes; ++l) {
        const double top = g.plot.top() + l * g.laneHeight;
        p.fillRect(QRectF(g.plot.left(), top, g.plot.width(), g.laneHeight),
            l % 2 ? palette().color(QPalette::AlternateBase) : palette().color(QPalette::Base));
        p.setPen(text);
        const QString name = laneName(g, l);
        if (g.laneHeight >= 2.2 * fontMetrics().height()) {
            QFont bold = font();
            bold.setBold(true);
            p.setFont(bold);
            p.drawText(QRectF(4, top, LeftMargin - 10, g.laneHeight / 2), Qt::AlignRight | Qt::AlignBottom, name);
            p.setFont(font());
            p.setPen(palette().color(QPalette::PlaceholderText));
            const QString summary = g.group > 1 ? tr("%1 chunks, %2")
                                                      .arg(chunkCount[static_cast<size_t>(l)])
                                                      .arg(Format::count(held[static_cast<size_t>(l)]))
                                                : Format::elements(held[static_cast<size_t>(l)]);
            p.drawText(QRectF(4, top + g.laneHeight / 2, LeftMargin - 10, g.laneHeight / 2),
                Qt::AlignRight | Qt::AlignTop, summary);
        } else {
            p.drawText(QRectF(4, top, LeftMargin - 10, g.laneHeight), Qt::AlignRight | Qt::AlignVCenter, name);
        }
    }
    // the region past the tensor's end (only FSDP padding lives there)
    if (domainEnd() > end) {
        const double x0 = std::max(toX(g, end), g.plot.left());
        p.fillRect(
            QRectF(QPointF(x0, g.plot.top()), QPointF(g.plot.right(), g.plot.bottom())), QColor(128, 128, 128, 30));
    }

    p.save();
    p.setClipRect(g.plot.adjusted(0, -CoverageHeight - 8, 0, 0));
    // padding, hatched
    if (m_chunkRows > 0) {
        for (int r = m_rankFirst; r <= lastRank(); ++r) {
            const int64_t pad = paddingRows(r);
            if (pad <= 0) continue;
            const double padEnd = static_cast<double>((r + 1) * m_chunkRows);
            const double padStart = padEnd - static_cast<double>(pad);
            const double top = g.plot.top() + laneOf(g, r) * g.laneHeight;
            const QRectF rr(QPointF(toX(g, padStart), top + 3), QPointF(toX(g, padEnd), top + g.laneHeight - 3));
            QColor c = rankColor(r);
            p.fillRect(rr, QBrush(c.lighter(150), Qt::BDiagPattern));
            p.setPen(QPen(c, 1, Qt::DashLine));
            p.drawRect(rr);
        }
    }
    // chunks
    std::set<size_t> bad(m_layout->outOfBounds.begin(), m_layout->outOfBounds.end());
    for (size_t i = 0; i < m_layout->chunks.size(); ++i) {
        const int rank = m_layout->ranks[i];
        if (laneOf(g, rank) < 0) continue;
        const double top = g.plot.top() + laneOf(g, rank) * g.laneHeight;
        QRectF rr = boxRect(g, m_layout->chunks[i], top, g.laneHeight);
        const QColor c = rankColor(rank);
        if (m_layout->chunks[i].empty()) {
            // an empty chunk: a thin marker at its offset
            p.setPen(QPen(c.darker(130), 2));
            p.drawLine(QPointF(rr.left(), top + 4), QPointF(rr.left(), top + g.laneHeight - 4));
            continue;
        }
        if (rr.width() < 1) rr.setWidth(1);
        QColor fill = c;
        fill.setAlpha(210);
        p.fillRect(rr, fill);
        p.setPen(QPen(bad.count(i) ? kGap : c.darker(140), bad.count(i) ? 2 : 1));
        p.drawRect(rr);
        // size label when it fits
        const QString label = Format::box(m_layout->chunks[i].offsets, m_layout->chunks[i].sizes);
        if (p.fontMetrics().horizontalAdvance(label) + 8 < rr.width() && rr.height() > p.fontMetrics().height()) {
            p.setPen(Qt::white);
            p.drawText(rr, Qt::AlignCenter, label);
        }
    }
    // overlaps: red cross-hatch on both chunks' lanes
    for (const auto& o : m_layout->overlaps) {
        for (size_t idx : {o.first, o.second}) {
            if (laneOf(g, m_layout->ranks[idx]) < 0) continue;
            const double top = g.plot.top() + laneOf(g, m_layout->ranks[idx]) * g.laneHeight;
            const QRectF rr = boxRect(g, o.region, top, g.laneHeight);
            p.fillRect(rr, QBrush(kGap, Qt::DiagCrossPattern));
            p.setPen(QPen(kGap, 2));
            p.drawRect(rr);
        }
    }
    // coverage lane: green where covered, red gaps (also marked across every lane)
    const QRectF coverage(g.plot.left(), g.coverageTop, g.plot.width(), CoverageHeight);
    const QRectF covered(QPointF(toX(g, 0), g.coverageTop), QPointF(toX(g, end), g.coverageTop + CoverageHeight));
    p.fillRect(covered, QColor(0x59, 0xa1, 0x4f, 120));
    for (const auto& gap : m_layout->gaps) {
        const QRectF rr = boxRect(g, gap, g.coverageTop - 3, CoverageHeight + 6);
        p.fillRect(QRectF(rr.left(), g.coverageTop, std::max(rr.width(), 2.0), CoverageHeight), kGap);
        QColor band = kGap;
        band.setAlpha(45);
        p.fillRect(QRectF(rr.left(), g.plot.top(), std::max(rr.width(), 2.0), g.plot.height()), band);
    }
    for (const auto& o : m_layout->overlaps) {
        const QRectF rr = boxRect(g, o.region, g.coverageTop - 3, CoverageHeight + 6);
        p.fillRect(QRectF(rr.left(), g.coverageTop, std::max(rr.width(), 2.0), CoverageHeight),
            QBrush(kGap, Qt::DiagCrossPattern));
    }
    p.restore();
    p.setPen(mid);
    p.drawRect(coverage);
    p.setPen(text);
    p.drawText(QRectF(4, g.coverageTop - 2, LeftMargin - 10, CoverageHeight + 4), Qt::AlignRight | Qt::AlignVCenter,
        tr("cover"));
    p.setPen(mid);
    p.drawRect(g.plot);

    // axis: dim-0 ticks
    p.setPen(text);
    const double span = m_viewEnd - m_viewStart;
    const double rawStep = span / std::max(1.0, g.plot.width() / 80.0);
    const double mag = std::pow(10.0, std::floor(std::log10(std::max(rawStep, 1e-9))));
    double step = mag;
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (mag * m >= rawStep) {
            step = mag * m;
            break;
        }
    step = std::max(step, 1.0);
    const double axisY = g.plot.bottom();
    for (double t = std::ceil(m_viewStart / step) * step; t <= m_viewEnd + 1e-9; t += step) {
        const double x = toX(g, t);
        p.drawLine(QPointF(x, axisY), QPointF(x, axisY + 4));
        p.drawText(QRectF(x - 40, axisY + 4, 80, 14), Qt::AlignHCenter | Qt::AlignTop, QString::number(t, 'g', 10));
    }
    const QString axisLabel = m_layout->shape.empty()
        ? tr("0-dim tensor (one element)")
        : tr("dim 0 (rows of %1)%2")
              .arg(Format::shape(m_layout->shape),
                  m_chunkRows > 0 ? tr(" — FSDP chunk of %1 rows per rank").arg(m_chunkRows) : QString());
    p.drawText(QRectF(g.plot.left(), axisY + 17, g.plot.width(), 16), Qt::AlignHCenter | Qt::AlignTop, axisLabel);
}

namespace {
/// a chunk's rank as the tooltips name it: a torch.save file records none
QString rankText(int rank)
{
    return rank < 0 ? QStringLiteral("none recorded") : QString::number(rank);
}
} // namespace

QString ShardLayoutWidget::toolTipAt(const QPoint& pos) const
{
    if (!m_layout) return {};
    const Geometry g = geometry();
    const double row = toRow(g, pos.x());
    if (pos.y() >= g.coverageTop && pos.y() <= g.coverageTop + CoverageHeight) {
        for (const auto& gap : m_layout->gaps)
            if (gap.offsets.empty() || (row >= gap.offsets[0] && row < gap.offsets[0] + gap.sizes[0]))
                return tr("Gap: %1 is held by no rank (%2)")
                    .arg(QString::fromStdString(boxText(gap)), Format::elements(gap.numel()));
        for (const auto& o : m_layout->overlaps)
            if (o.region.offsets.empty()
                || (row >= o.region.offsets[0] && row < o.region.offsets[0] + o.region.sizes[0]))
                return tr("Overlap: %1 is held by ranks %2 and %3")
                    .arg(QString::fromStdString(boxText(o.region)), rankText(m_layout->ranks[o.first]),
                        rankText(m_layout->ranks[o.second]));
        return tr("%1 of %2 covered")
            .arg(Format::count(m_layout->coveredElements), Format::elements(m_layout->totalElements));
    }
    if (!g.plot.contains(pos)) return {};
    const int lane = static_cast<int>((pos.y() - g.plot.top()) / g.laneHeight);
    for (size_t i = 0; i < m_layout->chunks.size(); ++i) {
        if (laneOf(g, m_layout->ranks[i]) != lane) continue;
        const QRectF rr
            = boxRect(g, m_layout->chunks[i], g.plot.top() + lane * g.laneHeight, g.laneHeight).adjusted(-2, -2, 2, 2);
        if (!rr.contains(pos)) continue;
        const TensorBox& b = m_layout->chunks[i];
        QString tip = tr("rank %1, chunk %2\noffsets %3\nsizes %4\n%5 (%6)")
                          .arg(rankText(m_layout->ranks[i]))
                          .arg(i)
                          .arg(Format::shape(b.offsets), Format::shape(b.sizes), Format::elements(b.numel()),
                              QString::fromStdString(boxText(b)));
        if (std::find(m_layout->outOfBounds.begin(), m_layout->outOfBounds.end(), i) != m_layout->outOfBounds.end())
            tip += tr("\nreaches outside the tensor");
        return tip;
    }
    const int laneRank = m_rankFirst + lane * g.group;
    if (g.group == 1 && m_chunkRows > 0 && laneRank < static_cast<int>(m_padding.size()) && paddingRows(laneRank) > 0) {
        const double padEnd = static_cast<double>((laneRank + 1) * m_chunkRows);
        if (row >= padEnd - static_cast<double>(paddingRows(laneRank)) && row < padEnd)
            return tr("rank %1: %2 row(s) of padding (FSDP pads every rank to %3 rows; not stored)")
                .arg(laneRank)
                .arg(paddingRows(laneRank))
                .arg(m_chunkRows);
    }
    return tr("%1, row %2").arg(laneName(g, lane)).arg(static_cast<qlonglong>(std::floor(row)));
}

bool ShardLayoutWidget::event(QEvent* event)
{
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString tip = toolTipAt(help->pos());
        if (tip.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), tip, this);
        return true;
    }
    return QWidget::event(event);
}

void ShardLayoutWidget::wheelEvent(QWheelEvent* event)
{
    if (!m_layout) return;
    const Geometry g = geometry();
    if (event->modifiers() & Qt::ControlModifier) {
        // zoom the rank range around the lane under the cursor
        const int lane = std::clamp(
            static_cast<int>((event->position().y() - g.plot.top()) / g.laneHeight), 0, std::max(g.lanes - 1, 0));
        const int anchorRank = std::min(m_rankFirst + lane * g.group, lastRank());
        const int shown = lastRank() - m_rankFirst + 1;
        const int want
            = std::max(1, static_cast<int>(std::lround(shown * std::pow(0.7, event->angleDelta().y() / 120.0))));
        const double t = shown > 1 ? static_cast<double>(anchorRank - m_rankFirst) / (shown - 1) : 0.0;
        const int first = anchorRank - static_cast<int>(std::lround(t * (want - 1)));
        setRankRange(first, first + want - 1);
        event->accept();
        return;
    }
    const double anchor = toRow(g, event->position().x());
    const double factor = std::pow(0.85, event->angleDelta().y() / 120.0);
    const double span = std::clamp((m_viewEnd - m_viewStart) * factor, 1e-3, domainEnd() * 1.5);
    const double t = (anchor - m_viewStart) / (m_viewEnd - m_viewStart);
    m_viewStart = anchor - t * span;
    m_viewEnd = m_viewStart + span;
    update();
    event->accept();
}

void ShardLayoutWidget::mousePressEvent(QMouseEvent* event)
{
    if (event->button() == Qt::LeftButton) {
        m_dragging = true;
        m_dragOrigin = event->pos();
        m_dragStart = m_viewStart;
        setCursor(Qt::ClosedHandCursor);
    }
}

void ShardLayoutWidget::mouseMoveEvent(QMouseEvent* event)
{
    if (!m_dragging) return;
    const Geometry g = geometry();
    const double span = m_viewEnd - m_viewStart;
    const double shift = (event->pos().x() - m_dragOrigin.x()) / g.plot.width() * span;
    m_viewStart = m_dragStart - shift;
    m_viewEnd = m_viewStart + span;
    update();
}

void ShardLayoutWidget::mouseReleaseEvent(QMouseEvent*)
{
    m_dragging = false;
    unsetCursor();
}

void ShardLayoutWidget::mouseDoubleClickEvent(QMouseEvent*)
{
    m_rankFirst = 0;
    m_rankLast = -1;
    resetView();
}

} // namespace optscope::ui
