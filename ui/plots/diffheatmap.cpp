// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/diffheatmap.h"

#include "common/format.h"

#include "optscope/optim/optimizer_kind.h"

#include <QFontMetrics>
#include <QMouseEvent>
#include <QToolTip>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace optscope::ui {

DiffHeatmap::DiffHeatmap(QWidget* parent)
    : QCustomPlot(parent)
    , m_map(new QCPColorMap(xAxis, yAxis))
    , m_scale(new QCPColorScale(this))
    , m_message(new QCPItemText(this))
    , m_title(new QCPTextElement(this))
{
    setMinimumHeight(160);
    setMouseTracking(true);
    setBackground(palette().color(QPalette::Base));
    // title on top (the common key prefix: no rotated axis label to be cut), map and colour bar below
    plotLayout()->insertRow(0);
    plotLayout()->addElement(0, 0, m_title);
    plotLayout()->addElement(1, 1, m_scale);
    m_title->setFont(font());
    m_title->setTextColor(palette().color(QPalette::Text));
    m_scale->setType(QCPAxis::atRight);
    m_scale->setBarWidth(12);
    m_map->setColorScale(m_scale);
    // light yellow to dark brown (ColorBrewer YlOrBr): visible on a white background at both ends
    QCPColorGradient gradient;
    gradient.setColorStopAt(0.0, QColor(0xfe, 0xe3, 0x91));
    gradient.setColorStopAt(0.35, QColor(0xfe, 0x99, 0x29));
    gradient.setColorStopAt(0.7, QColor(0xcc, 0x4c, 0x02));
    gradient.setColorStopAt(1.0, QColor(0x66, 0x25, 0x06));
    gradient.setColorInterpolation(QCPColorGradient::ciRGB);
    gradient.setNanHandling(QCPColorGradient::nhTransparent);
    m_map->setGradient(gradient);
    m_map->setInterpolate(false);
    auto* margins = new QCPMarginGroup(this);
    axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    xAxis->setLabel(tr("rank"));
    yAxis->setRangeReversed(true);
    xAxis->grid()->setVisible(false);
    yAxis->grid()->setVisible(false);
    const QColor fg = palette().color(QPalette::Text);
    for (QCPAxis* axis : {xAxis, yAxis, m_scale->axis()}) {
        axis->setTickLabelColor(fg);
        axis->setLabelColor(fg);
        axis->setBasePen(QPen(fg));
        axis->setTickPen(QPen(fg));
    }
    m_message->setPositionAlignment(Qt::AlignCenter);
    m_message->position->setType(QCPItemPosition::ptAxisRectRatio);
    m_message->position->setCoords(0.5, 0.5);
    m_message->setColor(palette().color(QPalette::PlaceholderText));
    m_message->setText(tr("Compare two checkpoints or two ranks"));
    connect(this, &QCustomPlot::mousePress, this, [this](QMouseEvent* event) {
        const int row = static_cast<int>(std::lround(yAxis->pixelToCoord(event->pos().y())));
        if (row >= 0 && row < m_keys.size()) Q_EMIT keyClicked(m_keys[row]);
    });
    setReport({});
}

void DiffHeatmap::resizeEvent(QResizeEvent* event)
{
    QCustomPlot::resizeEvent(event);
    // how many rows can have a label depends on the height
    layoutRows();
}

void DiffHeatmap::mouseMoveEvent(QMouseEvent* event)
{
    QCustomPlot::mouseMoveEvent(event);
    const int row = static_cast<int>(std::lround(yAxis->pixelToCoord(event->pos().y())));
    const int col = static_cast<int>(std::lround(xAxis->pixelToCoord(event->pos().x())));
    const QString tip = axisRect()->rect().contains(event->pos()) ? toolTipAt(row, col) : QString();
    if (tip.isEmpty())
        QToolTip::hideText();
    else
        QToolTip::showText(event->globalPosition().toPoint(), tip, this);
}

double DiffHeatmap::cell(int keyRow, int rankColumn) const
{
    if (keyRow < 0 || rankColumn < 0 || keyRow >= m_keys.size() || rankColumn >= m_ranks)
        return std::numeric_limits<double>::quiet_NaN();
    return m_values[static_cast<size_t>(keyRow * m_ranks + rankColumn)];
}

double DiffHeatmap::colourValue(int keyRow, int rankColumn) const
{
    if (keyRow < 0 || rankColumn < 0 || keyRow >= m_keys.size() || rankColumn >= m_ranks)
        return std::numeric_limits<double>::quiet_NaN();
    return m_map->data()->cell(rankColumn, keyRow);
}

void DiffHeatmap::setNormalization(Normalization normalization)
{
    m_normalization = normalization;
    layoutRows();
}

QString DiffHeatmap::titleText() const
{
    return m_title->text();
}

QString DiffHeatmap::toolTipAt(int keyRow, int rankColumn) const
{
    if (keyRow < 0 || rankColumn < 0 || keyRow >= static_cast<int>(m_rows.size()) || rankColumn >= m_ranks) return {};
    const DiffEntry& e = *m_rows[static_cast<size_t>(keyRow)];
    double maxAbs = e.maxAbsDiff;
    int64_t numDiff = e.numDiff, numel = e.numel;
    QString where = tr("all ranks");
    if (!m_rankIds.empty()) {
        const int rank = m_rankIds[static_cast<size_t>(rankColumn)];
        where = tr("rank %1").arg(rank);
        auto it = std::find_if(e.ranks.begin(), e.ranks.end(), [rank](const DiffRank& r) { return r.rank == rank; });
        if (it == e.ranks.end()) return tr("%1\n%2: holds none of it").arg(QString::fromStdString(e.key()), where);
        maxAbs = it->maxAbsDiff;
        numDiff = it->numDiff;
        numel = it->numel;
    }
    if (numDiff <= 0)
        return tr("%1\n%2: equal (%3)").arg(QString::fromStdString(e.key()), where, Format::elements(numel));
    return tr("%1\n%2: max |Δ| %3, %4 of %5 differ")
        .arg(QString::fromStdString(e.key()), where, Format::number(maxAbs), Format::count(numDiff),
            Format::elements(numel));
}

namespace {
/// the state kind of a key: its last name ("exp_avg_sq", "step", "weight")
QString kindOf(const std::string& key)
{
    const auto dot = key.rfind('.');
    return QString::fromStdString(dot == std::string::npos ? key : key.substr(dot + 1));
}
} // namespace

void DiffHeatmap::setReport(const DiffReport& report)
{
    // tensors that differ, largest first; then equal ones to fill up (so the map shows where things agree too)
    std::vector<const DiffEntry*> rows;
    for (const auto& e : report.entries)
        if (e.tensor && (e.status == DiffStatus::Changed || e.status == DiffStatus::Equal)) rows.push_back(&e);
    m_candidates = rows.size();
    m_differing = 0;
    for (const auto* e : rows)
        m_differing += e->numDiff > 0 ? 1 : 0;
    m_anyEntry = !report.entries.empty();
    // step counters last: each moves by 1 per step, a change expected and shown in the panel's "step 3 -> 4"
    // headline; ranked by max |Δ| they filled the top rows and pushed the moments that changed most off the map
    const auto before = [](const DiffEntry* a, const DiffEntry* b) {
        const bool ca = a->numDiff > 0, cb = b->numDiff > 0;
        if (ca != cb) return ca;
        const bool sa = isStepCounterKey(a->key(), a->numel), sb = isStepCounterKey(b->key(), b->numel);
        if (sa != sb) return sb;
        return a->maxAbsDiff > b->maxAbsDiff;
    };
    // stable: ties keep the report's order
    std::stable_sort(rows.begin(), rows.end(), before);
    rows.resize(std::min(rows.size(), static_cast<size_t>(MaxKeys)));
    m_top.clear();
    m_top.reserve(rows.size());
    for (const DiffEntry* e : rows) {
        m_top.push_back(*e);
        m_top.back().histogramEdges = {};
        m_top.back().histogramCounts = {};
    }
    layoutRows();
}

void DiffHeatmap::layoutRows()
{
    const size_t candidates = m_candidates;
    const size_t differing = m_differing;
    std::vector<const DiffEntry*> rows;
    for (const auto& e : m_top)
        rows.push_back(&e);
    // every row shown gets its label: as many rows as the height holds, at most MaxKeys
    const int lineHeight = QFontMetrics(font()).height();
    // the title's extra lines (it wraps when narrow) take rows' room
    const int fit = std::max(3, static_cast<int>((height() - (4.0 + m_titleExtraLines) * lineHeight) / lineHeight));
    rows.resize(std::min({rows.size(), static_cast<size_t>(MaxKeys), static_cast<size_t>(fit)}));
    m_rows = rows;
    std::set<int> rankSet;
    for (const auto* e : rows)
        for (const auto& r : e->ranks)
            rankSet.insert(r.rank);
    m_rankIds.assign(rankSet.begin(), rankSet.end());
    const bool perRank = !m_rankIds.empty();
    m_ranks = perRank ? static_cast<int>(m_rankIds.size()) : 1;
    m_keys.clear();
    for (const auto* e : rows)
        m_keys << QString::fromStdString(e->key());

    const int nx = m_ranks, ny = std::max<int>(static_cast<int>(rows.size()), 1);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    m_values.assign(static_cast<size_t>(nx * ny), nan);
    for (size_t y = 0; y < rows.size(); ++y) {
        const DiffEntry* e = rows[y];
        auto put = [&](int x, double v, int64_t numDiff) {
            if (numDiff > 0 && v > 0) m_values[y * static_cast<size_t>(nx) + static_cast<size_t>(x)] = v;
        };
        if (perRank) {
            for (const auto& r : e->ranks) {
                const int x = static_cast<int>(
                    std::lower_bound(m_rankIds.begin(), m_rankIds.end(), r.rank) - m_rankIds.begin());
                put(x, r.maxAbsDiff, r.numDiff);
            }
        } else {
            put(0, e->maxAbsDiff, e->numDiff);
        }
    }
    // per kind: each cell against the largest of its kind (exp_avg against exp_avg, step against step)
    std::map<QString, double> kindMax;
    if (m_normalization == Normalization::PerKind)
        for (size_t y = 0; y < rows.size(); ++y)
            for (int x = 0; x < nx; ++x)
                if (const double v = m_values[y * static_cast<size_t>(nx) + static_cast<size_t>(x)]; v > 0) {
                    double& m = kindMax[kindOf(rows[y]->key())];
                    m = std::max(m, v);
                }
    // QCPColorMap draws nothing along a dimension of one cell (its range is a point): one column (a whole-tensor
    // comparison) or one row is drawn as two half cells with the same value
    const int mx = std::max(nx, 2), my = std::max(ny, 2);
    m_map->data()->setSize(mx, my);
    m_map->data()->setRange(
        nx == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, nx - 1), ny == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, ny - 1));
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (int y = 0; y < ny; ++y)
        for (int x = 0; x < nx; ++x) {
            double v = m_values[static_cast<size_t>(y * nx + x)];
            if (v > 0 && m_normalization == Normalization::PerKind)
                v /= kindMax[kindOf(rows[static_cast<size_t>(y)]->key())];
            for (int cy = y; cy < (ny == 1 ? 2 : y + 1); ++cy)
                for (int cx = x; cx < (nx == 1 ? 2 : x + 1); ++cx)
                    m_map->data()->setCell(cx, cy, v);
            if (v > 0) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            }
        }
    if (m_normalization == Normalization::PerKind) {
        m_scale->setDataScaleType(QCPAxis::stLinear);
        m_scale->axis()->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
        m_scale->axis()->setNumberFormat(QStringLiteral("g"));
        m_scale->axis()->setNumberPrecision(2);
        m_scale->axis()->setLabel(tr("of the kind's max"));
        m_scale->setDataRange(QCPRange(0, 1));
    } else {
        m_scale->setDataScaleType(QCPAxis::stLogarithmic);
        m_scale->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
        m_scale->axis()->setNumberFormat(QStringLiteral("eb"));
        m_scale->axis()->setNumberPrecision(0);
        m_scale->axis()->setLabel(tr("max |Δ|"));
        if (hi > 0) {
            if (lo == hi) lo = hi / 10;
            m_scale->setDataRange(QCPRange(lo, hi));
        } else {
            m_scale->setDataRange(QCPRange(1e-8, 1));
        }
    }
    auto xt = QSharedPointer<QCPAxisTickerText>(new QCPAxisTickerText);
    for (int x = 0; x < nx; ++x)
        xt->addTick(x, perRank ? QString::number(m_rankIds[static_cast<size_t>(x)]) : tr("all"));
    xAxis->setTicker(xt);
    xAxis->setLabel(perRank ? tr("rank") : QString());
    // labels without the prefix all keys share ("optim.state."): the prefix goes to the title
    QString common = m_keys.isEmpty() ? QString() : m_keys.front();
    for (const QString& k : std::as_const(m_keys)) {
        int n = 0;
        while (n < common.size() && n < k.size() && common[n] == k[n])
            ++n;
        common.truncate(n);
    }
    common.truncate(common.lastIndexOf(QLatin1Char('.')) + 1);
    m_labels.clear();
    auto yt = QSharedPointer<QCPAxisTickerText>(new QCPAxisTickerText);
    for (int y = 0; y < m_keys.size(); ++y) {
        QString k = m_keys[y].mid(common.size());
        if (k.size() > 32) k = QStringLiteral("…") + k.right(31);
        yt->addTick(y, k);
        m_labels << k;
    }
    yAxis->setLabel(QString());
    yAxis->setTicker(yt);
    QStringList parts;
    if (!common.isEmpty()) parts << common + QStringLiteral("…");
    if (candidates > rows.size())
        parts << tr("top %1 of %2 tensors (%3 differ)").arg(rows.size()).arg(candidates).arg(differing);
    // one line when it fits, else one part per line: the title was cut at the panel's width. The title sits above
    // the map only, beside the colour bar's column (its width once laid out, else about 90 px)
    const int room = width() - std::max(m_scale->outerRect().width(), 90) - 8;
    const QFontMetrics titleMetrics(m_title->font());
    QString title = parts.join(QStringLiteral("  ·  "));
    // "colour per state kind" only where it fits on the line: the colour bar's label says it too
    if (m_normalization == Normalization::PerKind && !kindMax.empty()) {
        const QString withKind = (parts + QStringList {tr("colour per state kind")}).join(QStringLiteral("  ·  "));
        if (titleMetrics.horizontalAdvance(withKind) <= room) title = withKind;
    }
    if (titleMetrics.horizontalAdvance(title) > room) title = parts.join(QLatin1Char('\n'));
    m_title->setText(title);
    m_title->setVisible(!title.isEmpty());
    // a title that now wraps differently leaves the rows another height: lay them out again, once
    const int extraLines = static_cast<int>(title.count(QLatin1Char('\n')));
    if (extraLines != m_titleExtraLines && !m_relayout) {
        m_titleExtraLines = extraLines;
        m_relayout = true;
        layoutRows();
        m_relayout = false;
        return;
    }

    xAxis->setRange(-0.5, nx - 0.5);
    yAxis->setRange(-0.5, ny - 0.5);
    m_message->setVisible(rows.empty() || hi == 0);
    if (!rows.empty() && hi == 0)
        m_message->setText(tr("No tensor differs"));
    else if (rows.empty())
        m_message->setText(m_anyEntry ? tr("No tensors compared") : tr("Compare two checkpoints or two ranks"));
    replot();
}

} // namespace optscope::ui
