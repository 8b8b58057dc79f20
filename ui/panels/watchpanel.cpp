// SPDX-License-Identifier: GPL-3.0-or-later
#include "panels/watchpanel.h"

#include "common/format.h"
#include "plots/plotexport.h"
#include "plots/qcp.h"
#include "session/checkpointcontext.h"
#include "session/watchsession.h"

#include <QCheckBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace optscope::ui {

namespace {
constexpr int MaxChartedKeys = 6;
} // namespace

WatchPanel::WatchPanel(CheckpointContext* context, WatchSession* session, QWidget* parent)
    : QWidget(parent)
    , m_context(context)
    , m_session(session)
    , m_title(new QLabel(this))
    , m_follow(new QCheckBox(tr("Follow: open the newest and diff it"), this))
    , m_steps(new QTableWidget(0, 3, this))
    , m_chart(new QCustomPlot(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* bar = new QHBoxLayout;
    m_title->setWordWrap(true);
    m_title->setText(tr("File > Watch Folder… follows a training run's checkpoint folder (step_100/, step_200/, …)."));
    bar->addWidget(m_title, 1);
    m_follow->setChecked(m_session->follows());
    m_follow->setToolTip(tr("Open each new checkpoint in the window and compare it with the one before"));
    connect(m_follow, &QCheckBox::toggled, m_session, &WatchSession::setFollow);
    bar->addWidget(m_follow);
    // the panel starts a watch itself, not only File > Watch Folder…
    auto* start = new QPushButton(tr("Watch a folder…"), this);
    start->setObjectName(QStringLiteral("startWatching"));
    connect(start, &QPushButton::clicked, this, [this] {
        const QString folder = QFileDialog::getExistingDirectory(this, tr("Watch a training run's checkpoint folder"),
            m_context->path().isEmpty() ? QString() : QFileInfo(m_context->path()).absolutePath());
        if (!folder.isEmpty()) watch(folder);
    });
    bar->addWidget(start);
    m_stopButton = new QPushButton(tr("Stop watching"), this);
    m_stopButton->setObjectName(QStringLiteral("stopWatching"));
    m_stopButton->setEnabled(false); // nothing watched yet
    connect(m_stopButton, &QPushButton::clicked, m_session, &WatchSession::stop);
    bar->addWidget(m_stopButton);
    layout->addLayout(bar);

    auto* split = new QSplitter(Qt::Horizontal, this);
    m_steps->setHorizontalHeaderLabels({tr("Step"), tr("Checkpoint"), tr("Status")});
    m_steps->verticalHeader()->hide();
    m_steps->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_steps->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_steps->horizontalHeader()->setStretchLastSection(true);
    m_steps->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    m_steps->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_steps->setToolTip(tr("Double-click a step (or press Enter) to open it"));
    connect(m_steps, &QTableWidget::cellActivated, this, [this](int row, int) { openStep(row); });
    split->addWidget(m_steps);
    m_chart->setMinimumHeight(120);
    m_chart->setBackground(palette().color(QPalette::Base));
    m_chart->xAxis->setLabel(tr("step"));
    // steps count: ticks on whole steps only (one step charted read 199.6, 199.8, 200, ...)
    auto steps = QSharedPointer<QCPAxisTickerFixed>(new QCPAxisTickerFixed);
    steps->setTickStep(1.0);
    steps->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    m_chart->xAxis->setTicker(steps);
    m_chart->yAxis->setLabel(tr("max |Δ| from the step before"));
    m_chart->yAxis->setScaleType(QCPAxis::stLogarithmic);
    m_chart->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    m_chart->yAxis->setNumberFormat(QStringLiteral("eb"));
    m_chart->yAxis->setNumberPrecision(0);
    m_chart->legend->setVisible(true);
    m_chart->legend->setFont(font());
    // the legend below the plot, in columns, never over the data (it covered the newest points at the top left)
    m_chart->axisRect()->insetLayout()->take(m_chart->legend);
    m_chart->plotLayout()->addElement(1, 0, m_chart->legend);
    m_chart->plotLayout()->setRowStretchFactor(1, 0.001);
    m_chart->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    m_chart->legend->setWrap(3);
    m_chart->legend->setBorderPen(Qt::NoPen);
    m_chart->legend->setBrush(Qt::NoBrush);
    PlotExport::install(
        m_chart, [this] { return m_session->folder(); }, QStringLiteral("watch"));
    split->addWidget(m_chart);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 2);
    layout->addWidget(split, 1);

    connect(m_session, &WatchSession::watchingChanged, this, &WatchPanel::onWatchingChanged);
    connect(m_session, &WatchSession::waitingChanged, this, &WatchPanel::updateTitle);
    connect(m_session, &WatchSession::stepAdded, this, &WatchPanel::onStepAdded);
    onWatchingChanged();
}

void WatchPanel::setFollow(bool on)
{
    m_follow->setChecked(on);
}

void WatchPanel::watch(const QString& folder)
{
    m_session->watch(folder);
}

void WatchPanel::stop()
{
    m_session->stop();
}

bool WatchPanel::isWatching() const
{
    return m_session->isWatching();
}

QString WatchPanel::folder() const
{
    return m_session->folder();
}

void WatchPanel::pollNow()
{
    m_session->pollNow();
}

CheckpointPtr WatchPanel::latestCheckpoint() const
{
    return m_session->latestCheckpoint();
}

void WatchPanel::setTrackedPerStep(int keys)
{
    m_session->setTrackedPerStep(keys);
}

void WatchPanel::updateTitle()
{
    if (!m_session->isWatching()) {
        m_title->setText(
            tr("File > Watch Folder… follows a training run's checkpoint folder (step_100/, step_200/, …)."));
        m_title->setToolTip(QString());
        return;
    }
    // a step still being written (or not opening yet) is waited for, and the panel says so
    const QString watching = tr("Watching <b>%1</b>").arg(Format::displayPath(m_session->folder()).toHtmlEscaped());
    m_title->setText(m_session->waiting().isEmpty()
            ? watching
            : watching + QStringLiteral(" — ") + tr("waiting: %1").arg(m_session->waiting().toHtmlEscaped()));
    m_title->setToolTip(m_session->folder());
}

void WatchPanel::onWatchingChanged()
{
    m_stopButton->setEnabled(m_session->isWatching());
    m_steps->setRowCount(0);
    for (const auto& step : m_session->steps())
        addStepRow(step.step, step.name, step.status, step.path);
    updateTitle();
    updateChart();
}

void WatchPanel::onStepAdded(const QString& name)
{
    const WatchSession::Step& step = m_session->steps().back();
    addStepRow(step.step, step.name, step.status, step.path);
    updateChart();
    if (!step.path.isEmpty()) Q_EMIT stepRead(name); // read (a skipped step is not)
}

std::vector<std::pair<QString, QString>> WatchPanel::steps() const
{
    std::vector<std::pair<QString, QString>> out;
    for (int r = 0; r < m_steps->rowCount(); ++r)
        out.emplace_back(m_steps->item(r, 1)->text(), m_steps->item(r, 2)->text());
    return out;
}

std::vector<std::pair<int64_t, double>> WatchPanel::series(const QString& key) const
{
    const auto& all = m_session->series();
    auto it = all.find(key.toStdString());
    return it == all.end() ? std::vector<std::pair<int64_t, double>>() : it->second;
}

void WatchPanel::openStep(int row)
{
    const QTableWidgetItem* item = row >= 0 && row < m_steps->rowCount() ? m_steps->item(row, 1) : nullptr;
    const QString path = item ? item->data(Qt::UserRole).toString() : QString();
    if (!path.isEmpty()) m_context->open(path); // back to an older step (a skipped one has no path)
}

void WatchPanel::addStepRow(int64_t step, const QString& name, const QString& status, const QString& path)
{
    const int row = m_steps->rowCount();
    m_steps->insertRow(row);
    m_steps->setItem(row, 0, new QTableWidgetItem(step >= 0 ? QString::number(step) : QString()));
    auto* nameItem = new QTableWidgetItem(name);
    nameItem->setData(Qt::UserRole, path);
    m_steps->setItem(row, 1, nameItem);
    m_steps->setItem(row, 2, new QTableWidgetItem(status));
    m_steps->scrollToBottom();
}

void WatchPanel::updateChart()
{
    m_chart->clearGraphs();
    // the keys that changed most at the newest comparison
    std::vector<std::pair<double, QString>> newest;
    const auto& allSeries = m_session->series();
    for (const auto& [key, points] : allSeries)
        if (!points.empty()) newest.emplace_back(points.back().second, QString::fromStdString(key));
    std::sort(newest.begin(), newest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    m_charted.clear();
    static const QColor colours[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xff, 0x7f, 0x0e), QColor(0x2c, 0xa0, 0x2c),
        QColor(0xd6, 0x27, 0x28), QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b)};
    double lo = 1, hi = 0, first = 0, last = 1;
    bool any = false;
    for (size_t i = 0; i < newest.size() && static_cast<int>(i) < MaxChartedKeys; ++i) {
        const QString& key = newest[i].second;
        m_charted << key;
        QCPGraph* g = m_chart->addGraph();
        g->setName(key.size() > 48 ? QStringLiteral("…") + key.right(47) : key);
        g->setPen(QPen(colours[i], 1.5));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
        for (const auto& [step, value] : allSeries.at(key.toStdString())) {
            if (!(value > 0)) continue; // equal: nothing to draw on a log axis
            g->addData(static_cast<double>(step), value);
            lo = any ? std::min(lo, value) : value;
            hi = any ? std::max(hi, value) : value;
            first = any ? std::min(first, double(step)) : double(step);
            last = any ? std::max(last, double(step)) : double(step);
            any = true;
        }
    }
    if (any) {
        m_chart->xAxis->setRange(first - 0.5 - (last - first) * 0.05, last + 0.5 + (last - first) * 0.05);
        // whole decades: the log ticker then labels powers of ten only (inside one decade, two ticks both read
        // "10⁻²" at precision 0)
        const double decadeLo = std::pow(10.0, std::floor(std::log10(lo)));
        double decadeHi = std::pow(10.0, std::ceil(std::log10(hi)));
        if (decadeHi <= decadeLo) decadeHi = decadeLo * 10;
        m_chart->yAxis->setRange(decadeLo, decadeHi);
    } else {
        // nothing (yet) in this folder: not the previous folder's axes
        m_chart->xAxis->setRange(0, 1);
        m_chart->yAxis->setRange(1e-3, 1);
    }
    m_chart->legend->setVisible(any);
    m_chart->replot();
}

} // namespace optscope::ui
