// SPDX-License-Identifier: GPL-3.0-or-later
#include "diffheatmap.h"

#include <QFontMetrics>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace optscope::ui {

DiffHeatmap::DiffHeatmap(QWidget* parent)
    : QCustomPlot(parent)
    , m_map(new QCPColorMap(xAxis, yAxis))
    , m_scale(new QCPColorScale(this))
    , m_message(new QCPItemText(this))
{
    setMinimumHeight(160);
    setBackground(palette().color(QPalette::Base));
    plotLayout()->addElement(0, 1, m_scale);
    m_scale->setType(QCPAxis::atRight);
    m_scale->setDataScaleType(QCPAxis::stLogarithmic);
    m_scale->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    m_scale->axis()->setNumberFormat(QStringLiteral("eb"));
    m_scale->axis()->setNumberPrecision(0);
    m_scale->axis()->setLabel(tr("max |Δ|"));
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
    // the number of key labels that fit depends on the height
    setReport(m_report);
}

double DiffHeatmap::cell(int keyRow, int rankColumn) const
{
    if (keyRow < 0 || rankColumn < 0 || keyRow >= m_keys.size() || rankColumn >= m_ranks)
        return std::numeric_limits<double>::quiet_NaN();
    return m_map->data()->cell(rankColumn, keyRow);
}

void DiffHeatmap::setReport(const DiffReport& report)
{
    if (&report != &m_report) m_report = report;
    // tensors that differ, largest first; then equal ones to fill up (so the map shows where things agree too)
    std::vector<const DiffEntry*> rows;
    for (const auto& e : report.entries)
        if (e.type == "tensor" && (e.status == DiffStatus::Changed || e.status == DiffStatus::Equal))
            rows.push_back(&e);
    std::stable_sort(rows.begin(), rows.end(), [](const DiffEntry* a, const DiffEntry* b) {
        const bool ca = a->numDiff > 0, cb = b->numDiff > 0;
        if (ca != cb) return ca;
        return a->maxAbsDiff > b->maxAbsDiff;
    });
    if (rows.size() > MaxKeys) rows.resize(MaxKeys);
    std::set<int> rankSet;
    for (const auto* e : rows)
        for (const auto& r : e->ranks)
            rankSet.insert(r.rank);
    std::vector<int> ranks(rankSet.begin(), rankSet.end());
    const bool perRank = !ranks.empty();
    m_ranks = perRank ? static_cast<int>(ranks.size()) : 1;
    m_keys.clear();
    for (const auto* e : rows)
        m_keys << QString::fromStdString(e->key);

    const int nx = m_ranks, ny = std::max<int>(static_cast<int>(rows.size()), 1);
    m_map->data()->setSize(nx, ny);
    m_map->data()->setRange(QCPRange(0, nx - 1), QCPRange(0, ny - 1));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (int y = 0; y < ny; ++y)
        for (int x = 0; x < nx; ++x)
            m_map->data()->setCell(x, y, nan);
    for (size_t y = 0; y < rows.size(); ++y) {
        const DiffEntry* e = rows[y];
        auto put = [&](int x, double v, int64_t numDiff) {
            if (numDiff <= 0 || !(v > 0)) return;
            m_map->data()->setCell(x, static_cast<int>(y), v);
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        };
        if (perRank) {
            for (const auto& r : e->ranks) {
                const int x = static_cast<int>(std::lower_bound(ranks.begin(), ranks.end(), r.rank) - ranks.begin());
                put(x, r.maxAbsDiff, r.numDiff);
            }
        } else {
            put(0, e->maxAbsDiff, e->numDiff);
        }
    }
    if (hi > 0) {
        if (lo == hi) lo = hi / 10;
        m_scale->setDataRange(QCPRange(lo, hi));
    } else {
        m_scale->setDataRange(QCPRange(1e-8, 1));
    }
    auto xt = QSharedPointer<QCPAxisTickerText>(new QCPAxisTickerText);
    for (int x = 0; x < nx; ++x)
        xt->addTick(x, perRank ? QString::number(ranks[static_cast<size_t>(x)]) : tr("all"));
    xAxis->setTicker(xt);
    xAxis->setLabel(perRank ? tr("rank") : QString());
    // labels without the prefix all keys share ("optim.state."), as many as fit the height
    QString common = m_keys.isEmpty() ? QString() : m_keys.front();
    for (const QString& k : std::as_const(m_keys)) {
        int n = 0;
        while (n < common.size() && n < k.size() && common[n] == k[n])
            ++n;
        common.truncate(n);
    }
    common.truncate(common.lastIndexOf(QLatin1Char('.')) + 1);
    const int lineHeight = QFontMetrics(font()).height();
    const int every
        = std::max(1, static_cast<int>(std::ceil(m_keys.size() * lineHeight / std::max(40.0, height() * 0.75))));
    auto yt = QSharedPointer<QCPAxisTickerText>(new QCPAxisTickerText);
    for (int y = 0; y < m_keys.size(); y += every) {
        QString k = m_keys[y].mid(common.size());
        if (k.size() > 32) k = QStringLiteral("…") + k.right(31);
        yt->addTick(y, k);
    }
    yAxis->setLabel(common.isEmpty() ? QString() : common + QStringLiteral("…"));
    yAxis->setTicker(yt);

    xAxis->setRange(-0.5, nx - 0.5);
    yAxis->setRange(-0.5, ny - 0.5);
    m_message->setVisible(rows.empty() || hi == 0);
    if (!rows.empty() && hi == 0)
        m_message->setText(tr("No tensor differs"));
    else if (rows.empty())
        m_message->setText(
            report.entries.empty() ? tr("Compare two checkpoints or two ranks") : tr("No tensors compared"));
    replot();
}

} // namespace optscope::ui
