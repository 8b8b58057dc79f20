// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/histogramplot.h"

#include <algorithm>

namespace optscope::ui {

namespace {
/// counts are whole numbers: ticks at integer multiples of 1 (the default ticker put 0.5, 1.5 ... on a histogram of
/// a few elements)
QSharedPointer<QCPAxisTicker> countTicker()
{
    auto t = QSharedPointer<QCPAxisTickerFixed>(new QCPAxisTickerFixed);
    t->setTickStep(1.0);
    t->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    return t;
}
} // namespace

HistogramPlot::HistogramPlot(QWidget* parent)
    : QCustomPlot(parent)
    , m_bars(new QCPBars(xAxis, yAxis))
    , m_message(new QCPItemText(this))
{
    setMinimumHeight(90); // a 1280x720 window stacks two panels with plots
    setBackground(palette().color(QPalette::Base));
    const QColor fg = palette().color(QPalette::Text);
    for (QCPAxis* axis : {xAxis, yAxis}) {
        axis->setBasePen(QPen(fg));
        axis->setTickPen(QPen(fg));
        axis->setSubTickPen(QPen(fg));
        axis->setTickLabelColor(fg);
        axis->setLabelColor(fg);
        axis->grid()->setPen(QPen(QColor(128, 128, 128, 60), 0, Qt::DotLine));
    }
    yAxis->setLabel(tr("count"));
    yAxis->setTicker(countTicker());
    m_bars->setPen(QPen(QColor(0x2b, 0x6c, 0xb0)));
    m_bars->setBrush(QColor(0x4a, 0x90, 0xd9, 190));
    m_bars->setWidthType(QCPBars::wtPlotCoords);
    m_message->setPositionAlignment(Qt::AlignCenter);
    m_message->position->setType(QCPItemPosition::ptAxisRectRatio);
    m_message->position->setCoords(0.5, 0.5);
    m_message->setColor(palette().color(QPalette::PlaceholderText));
    m_message->setClipToAxisRect(false);
    setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    axisRect()->setRangeDrag(Qt::Horizontal);
    axisRect()->setRangeZoom(Qt::Horizontal);
    clearHistogram();
}

void HistogramPlot::setHistogram(
    const std::vector<double>& edges, const std::vector<int64_t>& counts, const QString& xLabel)
{
    if (counts.empty() || edges.size() != counts.size() + 1) {
        clearHistogram(tr("No histogram"));
        return;
    }
    m_edges = edges;
    m_counts = counts;
    QVector<double> keys, values;
    keys.reserve(static_cast<qsizetype>(counts.size()));
    values.reserve(static_cast<qsizetype>(counts.size()));
    for (size_t i = 0; i < counts.size(); ++i) {
        keys << (edges[i] + edges[i + 1]) / 2.0;
        values << static_cast<double>(counts[i]);
    }
    m_bars->setWidth(edges[1] - edges[0]);
    m_bars->setData(keys, values, true);
    xAxis->setLabel(xLabel);
    m_message->setText(QString());
    m_message->setVisible(false);
    rescale();
}

void HistogramPlot::clearHistogram(const QString& message)
{
    m_edges.clear();
    m_counts.clear();
    m_bars->data()->clear();
    m_message->setText(message);
    m_message->setVisible(!message.isEmpty());
    xAxis->setLabel(QString());
    xAxis->setRange(0, 1);
    yAxis->setRange(m_log ? 0.5 : 0, m_log ? 10 : 1);
    replot();
}

void HistogramPlot::setLogScale(bool log)
{
    if (log == m_log) return;
    m_log = log;
    if (log) {
        yAxis->setScaleType(QCPAxis::stLogarithmic);
        yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
        yAxis->setNumberFormat(QStringLiteral("eb"));
        yAxis->setNumberPrecision(0);
        m_bars->setBaseValue(0.5); // bars start below 1 so that single counts show
    } else {
        yAxis->setScaleType(QCPAxis::stLinear);
        yAxis->setTicker(countTicker());
        yAxis->setNumberFormat(QStringLiteral("gb"));
        yAxis->setNumberPrecision(6);
        m_bars->setBaseValue(0);
    }
    rescale();
}

QString HistogramPlot::message() const
{
    return m_message->visible() ? m_message->text() : QString();
}

int64_t HistogramPlot::totalCount() const
{
    int64_t n = 0;
    for (auto c : m_counts)
        n += c;
    return n;
}

void HistogramPlot::rescale()
{
    if (m_counts.empty()) {
        replot();
        return;
    }
    const double lo = m_edges.front(), hi = m_edges.back();
    const double pad = (hi - lo) * 0.02;
    xAxis->setRange(lo - pad, hi + pad);
    const double maxCount = static_cast<double>(*std::max_element(m_counts.begin(), m_counts.end()));
    if (m_log)
        yAxis->setRange(0.5, std::max(10.0, maxCount * 2.0));
    else
        yAxis->setRange(0, std::max(1.0, maxCount * 1.08));
    replot();
}

} // namespace optscope::ui
