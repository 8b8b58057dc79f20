// SPDX-License-Identifier: GPL-3.0-or-later
#include "panels/diffpanel.h"

#include "common/format.h"
#include "common/reportexport.h"
#include "common/warning.h"
#include "models/diffmodel.h"
#include "models/statusfilterproxy.h"
#include "models/valuecomparemodel.h"
#include "models/valuespreviewmodel.h"
#include "plots/diffheatmap.h"
#include "plots/histogramplot.h"
#include "plots/plotexport.h"
#include "session/checkpointcontext.h"
#include "session/comparisonsession.h"
#include "session/jobrunner.h"
#include "widgets/copykeyfilter.h"
#include "widgets/frozenkeycolumn.h"
#include "widgets/keycolumnsizer.h"

#include "optscope/analysis/diff_report.h"
#include "optscope/tensor/scalar_value.h"

#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDoubleValidator>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <nlohmann/json.hpp>

#include <mutex>
#include <set>

namespace optscope::ui {

DiffPanel::DiffPanel(CheckpointContext* context, ComparisonSession* session, QWidget* parent)
    : QWidget(parent)
    , m_context(context)
    , m_session(session)
    , m_openB(new QPushButton(tr("Compare with…"), this))
    , m_rankA(new QSpinBox(this))
    , m_rankB(new QSpinBox(this))
    , m_compareRanks(new QPushButton(tr("Compare ranks"), this))
    , m_swap(new QPushButton(tr("Swap A ↔ B"), this))
    , m_stop(new QPushButton(tr("Stop"), this))
    , m_rtol(new QLineEdit(this))
    , m_atol(new QLineEdit(this))
    , m_statusFilter(new QComboBox(this))
    , m_search(new QLineEdit(this))
    , m_export(new QToolButton(this))
    , m_summary(new QLabel(this))
    , m_model(session->model())
    , m_proxy(new StatusFilterProxy(DiffModel::StatusRole, this))
    , m_view(new QTableView(this))
    , m_heatmap(new DiffHeatmap(this))
    , m_histogram(new HistogramPlot(this))
    , m_logScale(new QCheckBox(tr("Log scale"), this))
    , m_histTitle(new QLabel(this))
    , m_compareMenu(new QMenu(tr("Compare &with"), this))
    , m_back(new QPushButton(this))
    , m_tolTimer(new QTimer(this))
    , m_values(new ValueCompareModel(this))
    , m_valuesView(new QTableView(this))
    , m_valuesInfo(new QLabel(this))
    , m_valuesPrev(new QToolButton(this))
    , m_valuesNext(new QToolButton(this))
    , m_rightTabs(new QTabWidget(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* bar = new QHBoxLayout;
    m_openB->setToolTip(tr("Compare the open checkpoint (A) with a second checkpoint (B): a file or a DCP folder"));
    // pickers start beside the open checkpoint: B is usually the next step of the same run
    auto besideA = [this] { return QFileInfo(m_context->path()).absolutePath(); };
    QAction* pickFile = m_compareMenu->addAction(tr("File…"), this, [this, besideA] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Checkpoint B"), besideA(),
            tr("PyTorch checkpoints (*.pt *.pth *.bin *.ckpt *.safetensors *.index.json);;All files (*)"));
        if (!path.isEmpty()) compareWith(path);
    });
    pickFile->setObjectName(QStringLiteral("compareWithFile"));
    QAction* pickFolder = m_compareMenu->addAction(tr("Folder…"), this, [this, besideA] {
        const QString path
            = QFileDialog::getExistingDirectory(this, tr("Checkpoint B (a checkpoint folder)"), besideA());
        if (!path.isEmpty()) compareWith(path);
    });
    pickFolder->setObjectName(QStringLiteral("compareWithFolder"));
    QAction* pickUrl = m_compareMenu->addAction(tr("URL…"), this, [this] {
        bool ok = false;
        const QString url = QInputDialog::getText(this, tr("Checkpoint B"),
            tr("s3://bucket/prefix, gs://bucket/prefix or https://host/path"), QLineEdit::Normal, QString(), &ok)
                                .trimmed();
        if (ok && !url.isEmpty()) compareWith(url);
    });
    pickUrl->setObjectName(QStringLiteral("compareWithUrl"));
    m_openB->setMenu(m_compareMenu);
    bar->addWidget(m_openB);
    bar->addSpacing(12);
    bar->addWidget(new QLabel(tr("or ranks"), this));
    m_rankA->setRange(0, 65535);
    m_rankB->setRange(0, 65535);
    m_rankB->setValue(1);
    bar->addWidget(m_rankA);
    bar->addWidget(new QLabel(QStringLiteral("↔"), this));
    bar->addWidget(m_rankB);
    m_compareRanks->setToolTip(tr("Compare what two ranks of the open checkpoint hold, chunk by chunk"));
    bar->addWidget(m_compareRanks);
    m_back->setToolTip(tr("Show the comparison of the two checkpoints again"));
    m_back->hide();
    connect(m_back, &QPushButton::clicked, this, &DiffPanel::showCheckpointDiff);
    bar->addWidget(m_back);
    m_swap->setObjectName(QStringLiteral("swapAB"));
    m_swap->setToolTip(tr("A is the later checkpoint (by its optimizer step, then the time it was written), so Δ = "
                          "A − B is what training changed: compare the other way round"));
    m_swap->hide();
    connect(m_swap, &QPushButton::clicked, this, &DiffPanel::swap);
    bar->addWidget(m_swap);
    m_stop->setToolTip(tr("Cancel the running comparison"));
    m_stop->hide();
    bar->addWidget(m_stop);
    bar->addSpacing(12);
    auto* validator = new QDoubleValidator(0, 1e300, 20, this);
    validator->setNotation(QDoubleValidator::ScientificNotation);
    m_rtol->setObjectName(QStringLiteral("rtol"));
    m_atol->setObjectName(QStringLiteral("atol"));
    m_back->setObjectName(QStringLiteral("backToCheckpointDiff"));
    m_rtol->setValidator(validator);
    m_atol->setValidator(validator);
    m_rtol->setPlaceholderText(QStringLiteral("0"));
    m_atol->setPlaceholderText(QStringLiteral("0"));
    m_rtol->setMaximumWidth(70);
    m_atol->setMaximumWidth(70);
    m_rtol->setToolTip(tr("relative tolerance: |a − b| ≤ atol + rtol·|b| counts as equal (0 and 0: bit-identical); "
                          "the shown comparison follows as you type"));
    m_tolTimer->setSingleShot(true);
    m_tolTimer->setInterval(400);
    connect(m_tolTimer, &QTimer::timeout, this, [this] {
        m_session->setTolerances(m_rtol->text().isEmpty() ? 0.0 : m_rtol->text().toDouble(),
            m_atol->text().isEmpty() ? 0.0 : m_atol->text().toDouble());
    });
    connect(m_rtol, &QLineEdit::textChanged, m_tolTimer, qOverload<>(&QTimer::start));
    connect(m_atol, &QLineEdit::textChanged, m_tolTimer, qOverload<>(&QTimer::start));
    m_atol->setToolTip(m_rtol->toolTip());
    bar->addWidget(new QLabel(tr("rtol"), this));
    bar->addWidget(m_rtol);
    bar->addWidget(new QLabel(tr("atol"), this));
    bar->addWidget(m_atol);
    bar->addStretch(1);
    m_export->setText(tr("Export"));
    m_export->setPopupMode(QToolButton::InstantPopup);
    auto* exportMenu = new QMenu(m_export);
    exportMenu->addAction(tr("JSON…"), this, [this] {
        const QString p
            = QFileDialog::getSaveFileName(this, tr("Export diff"), QStringLiteral("diff.json"), tr("JSON (*.json)"));
        if (!p.isEmpty())
            if (const QString err = exportJson(p); !err.isEmpty()) showWarning(this, tr("Export diff"), err);
    });
    exportMenu->addAction(tr("CSV…"), this, [this] {
        const QString p
            = QFileDialog::getSaveFileName(this, tr("Export diff"), QStringLiteral("diff.csv"), tr("CSV (*.csv)"));
        if (!p.isEmpty())
            if (const QString err = exportCsv(p); !err.isEmpty()) showWarning(this, tr("Export diff"), err);
    });
    m_export->setMenu(exportMenu);
    m_export->setEnabled(false);
    bar->addWidget(m_export);
    layout->addLayout(bar);

    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);

    auto* filterBar = new QHBoxLayout;
    m_statusFilter->addItem(tr("All keys"), QString());
    m_statusFilter->addItem(tr("Changed"), QStringLiteral("changed"));
    m_statusFilter->addItem(tr("Only in A"), QStringLiteral("only_a"));
    m_statusFilter->addItem(tr("Only in B"), QStringLiteral("only_b"));
    m_statusFilter->addItem(tr("Equal"), QStringLiteral("equal"));
    filterBar->addWidget(m_statusFilter);
    m_search->setPlaceholderText(tr("Filter keys: words, mlp.*.weight, /regex/"));
    m_search->setToolTip(tr("Keys matching every term: words anywhere in the key (case-insensitive), * ? [ ] as "
                            "wildcards, /regex/, -term to exclude. Value terms (nan, dtype:, |x|) filter the State "
                            "keys tree."));
    m_search->setClearButtonEnabled(true);
    filterBar->addWidget(m_search, 1);
    layout->addLayout(filterBar);

    auto* split = new QSplitter(Qt::Horizontal, this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(DiffModel::SortRole);
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_proxy->setFilterKeyColumn(DiffModel::KeyColumn);
    m_view->setModel(m_proxy);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(-1, Qt::AscendingOrder);
    m_view->setAlternatingRowColors(true);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_view->verticalHeader()->hide();
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
    // keys whole (cut on the left, narrow rows all read "…weight.exp_avg"): the key column is at least as wide as
    // its keys and the numbers scroll right; the frozen copy keeps the keys in sight while they do
    m_view->setTextElideMode(Qt::ElideLeft);
    m_view->setWordWrap(false);
    new KeyColumnSizer(m_view, m_view->horizontalHeader(), DiffModel::KeyColumn);
    // the key stays in sight while the numbers scroll right (1280 px wide: Key, Status and max |Δ| only)
    static_assert(DiffModel::KeyColumn == 0, "the frozen column is the first");
    new FrozenKeyColumn(m_view);
    split->addWidget(m_view);
    auto* right = new QSplitter(Qt::Vertical, split);
    auto* heatBox = new QWidget(right);
    auto* heatLayout = new QVBoxLayout(heatBox);
    heatLayout->setContentsMargins(0, 0, 0, 0);
    auto* heatLog = new QCheckBox(tr("One log scale"), heatBox);
    heatLog->setObjectName(QStringLiteral("heatmapLogScale"));
    heatLog->setToolTip(tr("Colour every key on one logarithmic max |Δ| scale instead of against the largest of its "
                           "state kind (step, exp_avg, exp_avg_sq, ...)"));
    connect(heatLog, &QCheckBox::toggled, this, [this](bool on) {
        m_heatmap->setNormalization(on ? DiffHeatmap::Normalization::LogScale : DiffHeatmap::Normalization::PerKind);
    });
    heatLayout->addWidget(heatLog, 0, Qt::AlignRight);
    heatLayout->addWidget(m_heatmap, 1);
    right->addWidget(heatBox);
    auto* histBox = new QWidget(right);
    auto* histLayout = new QVBoxLayout(histBox);
    histLayout->setContentsMargins(0, 0, 0, 0);
    auto* histBar = new QHBoxLayout;
    histBar->addWidget(m_histTitle, 1);
    histBar->addWidget(m_logScale);
    histLayout->addLayout(histBar);
    histLayout->addWidget(m_histogram, 1);
    // the values side by side: which elements differ, and by how much
    auto* valuesBox = new QWidget(right);
    auto* valuesLayout = new QVBoxLayout(valuesBox);
    valuesLayout->setContentsMargins(0, 0, 0, 0);
    auto* valuesBar = new QHBoxLayout;
    m_valuesInfo->setWordWrap(true);
    valuesBar->addWidget(m_valuesInfo, 1);
    auto* onlyDiffering = new QCheckBox(tr("Only differing"), valuesBox);
    onlyDiffering->setObjectName(QStringLiteral("onlyDiffering"));
    connect(onlyDiffering, &QCheckBox::toggled, m_values, &ValueCompareModel::setOnlyDiffering);
    valuesBar->addWidget(onlyDiffering);
    // a page of elements at a time, every element of a row included: the earlier and later pages one click away
    m_valuesPrev->setObjectName(QStringLiteral("valuesPrevious"));
    m_valuesNext->setObjectName(QStringLiteral("valuesNext"));
    m_valuesPrev->setArrowType(Qt::LeftArrow);
    m_valuesNext->setArrowType(Qt::RightArrow);
    m_valuesPrev->setToolTip(tr("The previous %1 elements").arg(ValuesPage));
    m_valuesNext->setToolTip(tr("The next %1 elements").arg(ValuesPage));
    m_valuesPrev->setEnabled(false);
    m_valuesNext->setEnabled(false);
    connect(m_valuesPrev, &QToolButton::clicked, this, [this] { showValuesPage(m_valuesFirst - ValuesPage); });
    connect(m_valuesNext, &QToolButton::clicked, this, [this] { showValuesPage(m_valuesFirst + ValuesPage); });
    valuesBar->addWidget(m_valuesPrev);
    valuesBar->addWidget(m_valuesNext);
    valuesLayout->addLayout(valuesBar);
    m_valuesView->setObjectName(QStringLiteral("valuesView"));
    m_valuesView->setModel(m_values);
    m_valuesView->verticalHeader()->hide();
    m_valuesView->verticalHeader()->setDefaultSectionSize(m_valuesView->fontMetrics().height() + 4);
    m_valuesView->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_valuesView->setEditTriggers(QAbstractItemView::NoEditTriggers);
    // every number whole: the columns take their content's width (the view scrolls when narrower)
    m_valuesView->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_valuesView->horizontalHeader()->setStretchLastSection(false);
    valuesLayout->addWidget(m_valuesView, 1);
    m_rightTabs->addTab(histBox, tr("Δ histogram"));
    m_rightTabs->addTab(valuesBox, tr("A | B | Δ values"));
    right->addWidget(m_rightTabs);
    // the heatmap and the selected key's histogram or values share the height (values showed 4 rows at 1280x720)
    right->setStretchFactor(0, 1);
    right->setStretchFactor(1, 1);
    split->addWidget(right);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    layout->addWidget(split, 1);
    m_histogram->clearHistogram(tr("Select a changed tensor"));
    PlotExport::install(m_heatmap, besideA, QStringLiteral("diff-heatmap"));
    PlotExport::install(m_histogram, besideA, QStringLiteral("diff-histogram"));

    connect(m_stop, &QPushButton::clicked, m_session, &ComparisonSession::cancel);
    connect(m_compareRanks, &QPushButton::clicked, this, [this] { compareRanks(m_rankA->value(), m_rankB->value()); });
    connect(m_statusFilter, qOverload<int>(&QComboBox::currentIndexChanged), this, &DiffPanel::updateFilter);
    connect(m_search, &QLineEdit::textChanged, this, &DiffPanel::updateFilter);
    connect(m_logScale, &QCheckBox::toggled, m_histogram, &HistogramPlot::setLogScale);
    connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this, &DiffPanel::onCurrentChanged);
    // one selection: a key selected elsewhere (the tree, the FQN mapping) becomes the current row here
    connect(m_context, &CheckpointContext::selectionChanged, this, [this](const QString& key) {
        if (hasReport()) showKey(key);
    });
    connect(m_view, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
        const int row = index.data(DiffModel::EntryIndexRole).toInt();
        const QString key
            = QString::fromStdString(m_session->openKey(m_model->report().entries[static_cast<size_t>(row)]));
        if (key.isEmpty()) return;
        m_context->select(key);
        Q_EMIT jumpRequested(key);
    });
    connect(m_heatmap, &DiffHeatmap::keyClicked, this, &DiffPanel::showKey);
    // Ctrl+C copies the row's full key, not the current cell (a number)
    new CopyKeyFilter(m_view, [](const QModelIndex& current) {
        return current.sibling(current.row(), DiffModel::KeyColumn).data().toString();
    });
    m_view->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_view, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
        const QModelIndex index = m_view->indexAt(pos);
        if (!index.isValid()) return;
        QMenu* menu = contextMenu(index);
        menu->setAttribute(Qt::WA_DeleteOnClose);
        menu->popup(m_view->viewport()->mapToGlobal(pos));
    });
    connect(m_session, &ComparisonSession::cleared, this, [this] {
        // nothing of the last comparison stays: its A | B | Δ values, and (for another checkpoint, not the next
        // step of the same run) its filters; a histogram or page of values still being read for it is dropped
        // (it was drawn into the cleared panel when it came after)
        m_context->runner()->cancel(QStringLiteral("diff-histogram"));
        m_context->runner()->cancel(QStringLiteral("diff-values"));
        m_histogramFor = -1;
        m_values->clear();
        m_valuesInfo->clear();
        if (!m_context->continuesPrevious()) {
            m_search->clear();
            m_statusFilter->setCurrentIndex(0);
        }
        m_back->hide();
        m_swap->hide();
        m_heatmap->setReport({});
        m_histogram->clearHistogram(tr("Select a changed tensor"));
        m_export->setEnabled(false);
        m_summary->setText(m_context->checkpoint()
                ? tr("A: %1").arg(Format::displayPath(m_context->path()).toHtmlEscaped())
                : tr("No checkpoint open."));
        setBusy(false);
    });
    connect(m_session, &ComparisonSession::started, this, [this](const QString& what) {
        m_running = what;
        m_heatmap->setReport({});
        m_values->clear();
        m_valuesInfo->clear();
        setBusy(true);
        m_summary->setText(tr("%1…").arg(what.toHtmlEscaped()));
    });
    connect(m_session, &ComparisonSession::progressed, this, [this](int rows) {
        m_summary->setText(tr("%1… %n key(s) compared so far", nullptr, rows).arg(m_running.toHtmlEscaped()));
    });
    connect(m_session, &ComparisonSession::finished, this, [this] {
        onShown();
        Q_EMIT finished(true);
    });
    connect(m_session, &ComparisonSession::failed, this, [this](const QString& message, bool cancelled) {
        setBusy(false);
        m_summary->setText(cancelled ? tr("Cancelled.")
                                     : tr("<b style=\"color:#d62728\">Failed:</b> %1").arg(message.toHtmlEscaped()));
        Q_EMIT finished(false);
    });
    m_summary->setText(tr("No checkpoint open."));
    setBusy(false);
}

QString DiffPanel::summaryText() const
{
    return m_summary->text();
}

void DiffPanel::setBusy(bool busy)
{
    const bool open = m_context->checkpoint() != nullptr;
    m_openB->setEnabled(open && !busy);
    m_compareMenu->menuAction()->setEnabled(open && !busy);
    m_compareRanks->setEnabled(open && !busy);
    m_stop->setVisible(busy);
}

void DiffPanel::compareWith(const QString& path)
{
    m_session->compareWith(path);
}

void DiffPanel::compareRanks(int rankA, int rankB)
{
    m_session->compareRanks(rankA, rankB);
}

void DiffPanel::swap()
{
    m_session->swap();
}

bool DiffPanel::showCheckpointDiff()
{
    return m_session->back();
}

bool DiffPanel::showingRanks() const
{
    return m_session->showingRanks();
}

QString DiffPanel::pathB() const
{
    return m_session->pathB();
}

QString DiffPanel::stepChange() const
{
    return m_session->shown().steps;
}

void DiffPanel::onShown()
{
    const ComparisonSession::Shown& c = m_session->shown();
    const QString backTo = m_session->backPath();
    m_back->setVisible(!backTo.isEmpty());
    if (!backTo.isEmpty()) m_back->setText(tr("Back to %1").arg(QFileInfo(backTo).fileName()));
    m_swap->setVisible(!c.otherPath.isEmpty());
    setBusy(false);
    const DiffReport& report = m_model->report();
    QStringList counts;
    for (const DiffStatus s : {DiffStatus::Changed, DiffStatus::OnlyA, DiffStatus::OnlyB})
        if (const size_t n = report.count(s))
            counts << QStringLiteral("%1 %2").arg(n).arg(s == DiffStatus::OnlyA ? tr("only in A")
                    : s == DiffStatus::OnlyB                                    ? tr("only in B")
                                                                                : tr("changed"));
    QString text
        = (report.equal ? tr("<b style=\"color:#2e7d32\">EQUAL</b>") : tr("<b style=\"color:#d62728\">DIFFERENT</b>"))
        + tr(": %1 of %2 keys equal").arg(report.count(DiffStatus::Equal)).arg(report.entries.size());
    if (!counts.isEmpty()) text += QStringLiteral(", ") + counts.join(QLatin1String(", "));
    // the training progress between the two comes first to mind: say it before the numbers
    if (!c.steps.isEmpty()) text = QStringLiteral("<b>%1</b> &nbsp; ").arg(c.steps.toHtmlEscaped()) + text;
    text += QStringLiteral(" &nbsp; <span style=\"color:gray\">%1</span>").arg(c.label.toHtmlEscaped());
    // which one is A, and why: Δ = A − B reads as what training changed only when A is the later
    if (!c.otherPath.isEmpty()) {
        using By = ComparisonSession::OrderedBy;
        const QString order = c.swapped    ? tr("swapped: A is the earlier")
            : c.orderedBy == By::Step      ? tr("A is the later step")
            : c.orderedBy == By::WriteTime ? tr("A was written later")
                                           : tr("A is the open checkpoint (neither is later by step or time)");
        text += QStringLiteral(" <span style=\"color:gray\">(%1)</span>").arg(order.toHtmlEscaped());
    }
    if (c.rtol != 0 || c.atol != 0)
        text += QStringLiteral(" &nbsp; <span style=\"color:gray\">rtol %1, atol %2</span>").arg(c.rtol).arg(c.atol);
    for (const auto& n : report.notes)
        text += QStringLiteral("<br><span style=\"color:gray\">%1</span>")
                    .arg(QString::fromStdString(n).toHtmlEscaped());
    m_summary->setText(text);
    m_heatmap->setReport(report);
    m_export->setEnabled(true);
    updateFilter();
    // most interesting first: the largest difference
    m_view->sortByColumn(DiffModel::MaxAbsColumn, Qt::DescendingOrder);
    // stay on the key selected everywhere; else start on the most different tensor of more than one element (steps
    // are scalars)
    const std::string selected = m_context->selectedKey().toStdString();
    int first = m_proxy->rowCount() > 0 ? 0 : -1;
    int onSelected = -1;
    bool firstFound = false;
    for (int r = 0; r < m_proxy->rowCount() && (onSelected < 0 || !firstFound); ++r) {
        const auto& e
            = report.entries[static_cast<size_t>(m_proxy->index(r, 0).data(DiffModel::EntryIndexRole).toInt())];
        if (!selected.empty() && onSelected < 0 && m_session->openKey(e) == selected) onSelected = r;
        if (!firstFound && e.numel > 1 && e.numDiff > 0) {
            first = r;
            firstFound = true;
        }
    }
    const int current = onSelected >= 0 ? onSelected : first;
    if (current >= 0) m_view->setCurrentIndex(m_proxy->index(current, 0));
}

bool DiffPanel::hasReport() const
{
    return m_session->hasReport();
}

QMenu* DiffPanel::contextMenu(const QModelIndex& index)
{
    auto* menu = new QMenu(this);
    const int row = index.data(DiffModel::EntryIndexRole).toInt();
    const DiffEntry& e = m_model->report().entries[static_cast<size_t>(row)];
    const QString key = QString::fromStdString(e.key());
    const QString openKey = QString::fromStdString(m_session->openKey(e));
    QAction* copyKey
        = menu->addAction(tr("Copy full key"), this, [key] { QGuiApplication::clipboard()->setText(key); });
    copyKey->setObjectName(QStringLiteral("copyKey"));
    copyKey->setShortcut(QKeySequence::Copy);
    // A's value of a scalar: a value's rendering from the report, a one-element tensor read from A
    QString value;
    const CheckpointPtr a = m_session->checkpointA();
    const Entry* inA = a && !e.keyA.empty() ? a->find(e.keyA) : nullptr;
    const CheckpointPtr open = m_context->checkpoint();
    const Entry* inOpen = open && !openKey.isEmpty() ? open->find(openKey.toStdString()) : nullptr;
    if (!e.tensor)
        value = QString::fromStdString(e.valueA);
    else if (inA && isScalarEntry(*inA)) {
        try {
            value = QString::fromStdString(scalarValueText(*a, *inA).value_or(std::string()));
        } catch (const std::exception&) { }
    }
    QAction* copyValue = menu->addAction(value.isEmpty() ? tr("Copy value") : tr("Copy value of A (%1)").arg(value),
        this, [value] { QGuiApplication::clipboard()->setText(value); });
    copyValue->setObjectName(QStringLiteral("copyValue"));
    copyValue->setEnabled(!value.isEmpty());
    menu->addSeparator();
    // the open checkpoint's key: the other panels show the open checkpoint
    QAction* shards = menu->addAction(tr("Show in shard layout"), this, [this, openKey] {
        m_context->select(openKey);
        Q_EMIT showInShardLayoutRequested(openKey);
    });
    shards->setObjectName(QStringLiteral("showShards"));
    shards->setEnabled(inOpen && inOpen->isTensor());
    QAction* inspect = menu->addAction(tr("Inspect in Tensor details"), this, [this, openKey] {
        m_context->select(openKey);
        Q_EMIT jumpRequested(openKey);
    });
    inspect->setObjectName(QStringLiteral("inspect"));
    inspect->setEnabled(inOpen != nullptr);
    return menu;
}

void DiffPanel::updateFilter()
{
    m_proxy->setRequiredStatus(m_statusFilter->currentData().toString());
    m_proxy->setKeyFilter(m_search->text());
}

void DiffPanel::onCurrentChanged()
{
    const QModelIndex current = m_view->currentIndex();
    if (!current.isValid()) return;
    const int entryIndex = current.data(DiffModel::EntryIndexRole).toInt();
    showEntry(entryIndex);
    // one selection: the tree, Tensor details and Shard layout follow the row (the open checkpoint's key; keys only
    // in the other stay here)
    const auto& entries = m_model->report().entries;
    if (entryIndex >= 0 && entryIndex < static_cast<int>(entries.size())) {
        const std::string key = m_session->openKey(entries[static_cast<size_t>(entryIndex)]);
        if (!key.empty() && m_context->checkpoint() && m_context->checkpoint()->find(key))
            m_context->select(QString::fromStdString(key));
    }
}

void DiffPanel::showKey(const QString& key)
{
    const std::string k = key.toStdString();
    for (int r = 0; r < m_proxy->rowCount(); ++r) {
        const auto& e = m_model->report()
                            .entries[static_cast<size_t>(m_proxy->index(r, 0).data(DiffModel::EntryIndexRole).toInt())];
        // the report's display key, or the open checkpoint's key as the State keys view names it
        if (e.key() == k || m_session->openKey(e) == k) {
            m_view->setCurrentIndex(m_proxy->index(r, 0));
            m_view->scrollTo(m_proxy->index(r, 0));
            return;
        }
    }
}

void DiffPanel::showEntry(int entryIndex)
{
    const auto& entries = m_model->report().entries;
    if (entryIndex < 0 || entryIndex >= static_cast<int>(entries.size())) return;
    const DiffEntry& e = entries[static_cast<size_t>(entryIndex)];
    m_histTitle->setText(tr("Δ = A − B of %1").arg(Format::text(e.key())));
    m_valuesEntry = entryIndex;
    startValues(e, 0);
    if (e.tensor && e.numel == 1 && e.status == DiffStatus::Changed) {
        // one number (`step`): its two values say more than a histogram of one difference
        auto valueOf = [](const CheckpointPtr& cp, const std::string& key) {
            const Entry* entry = cp && !key.empty() ? cp->find(key) : nullptr;
            try {
                if (entry) return QString::fromStdString(scalarValueText(*cp, *entry).value_or(std::string()));
            } catch (const std::exception&) { }
            return QString();
        };
        const QString a = valueOf(m_session->checkpointA(), e.keyA);
        const QString b = valueOf(m_session->checkpointB(), e.keyB);
        // in training order: from the earlier (B) to the later (A)
        m_histogram->clearHistogram(
            a.isEmpty() || b.isEmpty() ? tr("One element: no histogram") : tr("B: %1 → A: %2").arg(b, a));
        return;
    }
    const CheckpointPtr a = m_session->checkpointA();
    const CheckpointPtr b = m_session->checkpointB();
    m_context->runner()->cancel(QStringLiteral("diff-histogram"));
    if (!e.histogramCounts.empty()) {
        m_histogram->setHistogram(e.histogramEdges, e.histogramCounts, tr("a − b"));
    } else if (e.tensor && e.valuesCompared && e.numDiff > 0 && e.shapeA == e.shapeB && a && b
        && !m_session->showingRanks() && !m_session->isRunning()) {
        // read the pair again for its histogram, off the UI thread; a newer selection supersedes it
        m_histogram->clearHistogram(tr("Computing the histogram…"));
        const DiffEntry pair = [&e] {
            DiffEntry copy = e;
            copy.ranks.clear();
            return copy;
        }();
        const int shown = entryIndex;
        m_histogramFor = shown;
        m_context->runner()->run(
            QStringLiteral("diff-histogram"), tr("Δ histogram of %1").arg(Format::text(e.key())), this,
            [a, b, pair](const Progress& progress) {
                return std::make_shared<DiffHistogram>(diffHistogram(*a, *b, pair, HistogramBins, progress));
            },
            [this, shown](std::shared_ptr<DiffHistogram> h) {
                if (shown != m_histogramFor) return;
                if (h->counts.empty())
                    m_histogram->clearHistogram(tr("No histogram for this pair"));
                else
                    m_histogram->setHistogram(h->edges, h->counts, tr("a − b"));
                Q_EMIT histogramShown();
            },
            [this, shown](const QString& message, bool cancelled) {
                if (shown == m_histogramFor && !cancelled) m_histogram->clearHistogram(message);
            });
    } else if (e.status == DiffStatus::Equal)
        m_histogram->clearHistogram(tr("Equal: no differences"));
    else
        m_histogram->clearHistogram(
            e.tensor ? tr("No histogram (%1)").arg(QString::fromStdString(e.reason)) : tr("A value, not a tensor"));
}

QString DiffPanel::valuesInfo() const
{
    return m_valuesInfo->text();
}

void DiffPanel::showValuesPage(int64_t first)
{
    const auto& entries = m_model->report().entries;
    if (m_valuesEntry < 0 || m_valuesEntry >= static_cast<int>(entries.size())) return;
    startValues(entries[static_cast<size_t>(m_valuesEntry)], std::max<int64_t>(first, 0));
}

void DiffPanel::startValues(const DiffEntry& e, int64_t first)
{
    m_values->clear();
    m_valuesPrev->setEnabled(false);
    m_valuesNext->setEnabled(false);
    const CheckpointPtr a = m_session->checkpointA();
    // ranks compare chunks of one checkpoint; B's values are another rank's chunk, not a second tensor to read
    const CheckpointPtr b = m_session->checkpointB();
    const Entry* inA = a && !e.keyA.empty() ? a->find(e.keyA) : nullptr;
    const Entry* inB = b && !e.keyB.empty() ? b->find(e.keyB) : nullptr;
    if (!inA || !inB || !inA->isTensor() || !inB->isTensor() || inA->tensor->shape != inB->tensor->shape) {
        m_context->runner()->cancel(QStringLiteral("diff-values"));
        m_valuesInfo->setText(m_session->showingRanks() ? tr("Values side by side compare two checkpoints.")
                : !inA || !inB                          ? tr("Only in one of the two: nothing to set side by side.")
                : !inA->isTensor()
                ? tr("A value: A %1, B %2").arg(QString::fromStdString(e.valueA), QString::fromStdString(e.valueB))
                : tr("Shapes differ: no element-wise comparison."));
        return;
    }
    const std::string keyA = e.keyA, keyB = e.keyB;
    const double rtol = m_session->shown().rtol, atol = m_session->shown().atol;
    const int64_t numel = inA->tensor->numel();
    first = std::min(first, std::max<int64_t>(numel - 1, 0)) / ValuesPage * ValuesPage;
    m_valuesFirst = first;
    m_valuesInfo->setText(tr("Reading…"));
    m_context->runner()->run(
        QStringLiteral("diff-values"), tr("Values of %1").arg(Format::text(e.key())), this,
        [a, b, keyA, keyB, first](const Progress& progress) {
            // the same page of both
            return std::make_pair(ValuesPreviewModel::readElements(*a, *a->find(keyA), first, ValuesPage, progress),
                ValuesPreviewModel::readElements(*b, *b->find(keyB), first, ValuesPage, progress));
        },
        [this, rtol, atol, numel](std::pair<ValuesPreviewModel::Slice, ValuesPreviewModel::Slice> pages) {
            const ValuesPreviewModel::Slice& page = pages.first;
            const int64_t begin = page.firstElement;
            const auto end = begin + static_cast<int64_t>(page.values.size());
            const int64_t rowLength = std::max<int64_t>(page.rowLength, 1);
            const std::vector<int64_t> shape = page.shape;
            m_values->setData(std::move(pages.first), std::move(pages.second), rtol, atol);
            const QString differ = tr("%1 differ").arg(Format::count(m_values->differingCount()));
            QString text;
            if (begin == 0 && end == numel)
                text = tr("All %1: %2").arg(Format::elements(numel), differ);
            else if (shape.size() <= 1)
                text = tr("Elements %1–%2 of %3: %4 on this page")
                           .arg(Format::count(begin), Format::count(end - 1), Format::count(numel), differ);
            else
                text = tr("Elements %1–%2 of %3 (rows %4–%5 of %6, %7 each): %8 on this page")
                           .arg(Format::count(begin), Format::count(end - 1), Format::count(numel),
                               Format::count(begin / rowLength), Format::count((end - 1) / rowLength),
                               Format::count(shape[0]), Format::count(rowLength), differ);
            m_valuesInfo->setText(text);
            m_valuesPrev->setEnabled(begin > 0);
            m_valuesNext->setEnabled(end < numel);
            Q_EMIT valuesReady();
        },
        [this](const QString& message, bool cancelled) {
            if (!cancelled) m_valuesInfo->setText(tr("Cannot read the values: %1").arg(message));
        });
}

QString DiffPanel::exportJson(const QString& path) const
{
    return ReportExport::write(path, ReportExport::json(m_model->report().toJson()));
}

QString DiffPanel::exportCsv(const QString& path) const
{
    return ReportExport::write(path, QString::fromStdString(m_model->report().toCsv()));
}

} // namespace optscope::ui
