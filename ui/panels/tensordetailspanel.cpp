// SPDX-License-Identifier: GPL-3.0-or-later
#include "panels/tensordetailspanel.h"

#include "common/format.h"
#include "models/chunklistmodel.h"
#include "models/paramgroupsmodel.h"
#include "models/tensorstatsmodel.h"
#include "models/valuespreviewmodel.h"
#include "plots/histogramplot.h"
#include "plots/plotexport.h"
#include "session/checkpointcontext.h"
#include "session/jobrunner.h"
#include "session/keytree.h"

#include "optscope/optim/param_groups_table.h"
#include "optscope/tensor/scalar_value.h"
#include "optscope/tensor/tensor_assembler.h"
#include "optscope/tensor/tensor_stats.h"

#include <QCheckBox>
#include <QFileInfo>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QSplitter>
#include <QStackedWidget>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

namespace optscope::ui {

namespace {

void setupTable(QTableView* view)
{
    view->setAlternatingRowColors(true);
    view->setWordWrap(false);
    view->setSelectionBehavior(QAbstractItemView::SelectRows);
    view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    view->verticalHeader()->setDefaultSectionSize(view->fontMetrics().height() + 6);
    view->horizontalHeader()->setHighlightSections(false);
}

} // namespace

TensorDetailsPanel::TensorDetailsPanel(CheckpointContext* context, QWidget* parent)
    : QWidget(parent)
    , m_context(context)
    , m_title(new QLabel(this))
    , m_stack(new QStackedWidget(this))
    , m_placeholder(new QLabel(this))
    , m_valueText(new QPlainTextEdit(this))
    , m_statsModel(new TensorStatsModel(this))
    , m_statsView(new QTableView(this))
    , m_histogram(new HistogramPlot(this))
    , m_logScale(new QCheckBox(tr("Log scale"), this))
    , m_status(new QLabel(this))
    , m_tabs(new QTabWidget(this))
    , m_previewModel(new ValuesPreviewModel(this))
    , m_previewView(new QTableView(this))
    , m_rowOffset(new QSpinBox(this))
    , m_previewInfo(new QLabel(this))
    , m_chunkModel(new ChunkListModel(this))
    , m_chunkView(new QTableView(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    m_title->setTextFormat(Qt::RichText);
    m_title->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_title->setWordWrap(true);
    layout->addWidget(m_title);
    layout->addWidget(m_stack, 1);

    m_placeholder->setAlignment(Qt::AlignCenter);
    m_placeholder->setWordWrap(true);
    m_stack->addWidget(m_placeholder);

    m_valueText->setReadOnly(true);
    m_valueText->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_stack->addWidget(m_valueText);

    // tensor page: [statistics | histogram] over [values | chunks]
    auto* tensorPage = new QSplitter(Qt::Vertical, this);
    auto* top = new QWidget(tensorPage);
    auto* topLayout = new QHBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    m_statsView->setModel(m_statsModel);
    setupTable(m_statsView);
    m_statsView->verticalHeader()->hide();
    m_statsView->horizontalHeader()->setSectionResizeMode(TensorStatsModel::NameColumn, QHeaderView::ResizeToContents);
    m_statsView->horizontalHeader()->setSectionResizeMode(TensorStatsModel::ValueColumn, QHeaderView::Stretch);
    m_statsView->setMinimumWidth(200);
    m_statsView->setMaximumWidth(280);
    topLayout->addWidget(m_statsView);
    auto* histBox = new QWidget(top);
    auto* histLayout = new QVBoxLayout(histBox);
    histLayout->setContentsMargins(0, 0, 0, 0);
    histLayout->addWidget(m_histogram, 1);
    auto* histBar = new QHBoxLayout;
    histBar->addWidget(m_status, 1);
    histBar->addWidget(m_logScale);
    histLayout->addLayout(histBar);
    topLayout->addWidget(histBox, 1);
    tensorPage->addWidget(top);

    auto* valuesPage = new QWidget(m_tabs);
    auto* valuesLayout = new QVBoxLayout(valuesPage);
    valuesLayout->setContentsMargins(2, 2, 2, 2);
    auto* offsetBar = new QHBoxLayout;
    offsetBar->addWidget(new QLabel(tr("First row:"), valuesPage));
    m_rowOffset->setRange(0, 0);
    m_rowOffset->setAccelerated(true);
    m_rowOffset->setKeyboardTracking(false);
    offsetBar->addWidget(m_rowOffset);
    offsetBar->addWidget(m_previewInfo, 1);
    valuesLayout->addLayout(offsetBar);
    m_previewView->setModel(m_previewModel);
    setupTable(m_previewView);
    m_previewView->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_previewView->horizontalHeader()->setDefaultSectionSize(90);
    valuesLayout->addWidget(m_previewView, 1);
    m_tabs->addTab(valuesPage, tr("Values"));

    m_chunkView->setModel(m_chunkModel);
    setupTable(m_chunkView);
    m_chunkView->verticalHeader()->hide();
    m_chunkView->horizontalHeader()->setStretchLastSection(true);
    m_chunkView->setSortingEnabled(false);
    m_tabs->addTab(m_chunkView, tr("Chunks per rank"));
    tensorPage->addWidget(m_tabs);
    tensorPage->setStretchFactor(0, 1);
    tensorPage->setStretchFactor(1, 1);
    m_stack->addWidget(tensorPage);

    connect(m_logScale, &QCheckBox::toggled, m_histogram, &HistogramPlot::setLogScale);
    connect(m_rowOffset, qOverload<int>(&QSpinBox::valueChanged), this, &TensorDetailsPanel::startPreview);
    // param_groups page: groups × hyperparameters, the cells that differ from the compared checkpoint marked
    m_groupsModel = new ParamGroupsModel(this);
    m_groupsTitle = new QLabel(this);
    m_groupsTitle->setWordWrap(true);
    auto* groupsPage = new QWidget(this);
    auto* groupsLayout = new QVBoxLayout(groupsPage);
    groupsLayout->setContentsMargins(0, 0, 0, 0);
    groupsLayout->addWidget(m_groupsTitle);
    auto* groupsView = new QTableView(groupsPage);
    groupsView->setModel(m_groupsModel);
    setupTable(groupsView);
    groupsView->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    groupsLayout->addWidget(groupsView, 1);
    m_stack->addWidget(groupsPage);

    PlotExport::install(
        m_histogram, [this] { return QFileInfo(m_context->path()).absolutePath(); }, QStringLiteral("histogram"));
    connect(m_context, &CheckpointContext::selectionChanged, this, &TensorDetailsPanel::onSelectionChanged);
    connect(m_context, &CheckpointContext::checkpointChanged, this, &TensorDetailsPanel::onSelectionChanged);
    onSelectionChanged();
}

void TensorDetailsPanel::setComparison(CheckpointPtr b)
{
    m_compare = std::move(b);
    m_compareOptimizers = m_compare ? findOptimizers(*m_compare) : std::vector<OptimizerView> {};
    if (m_stack->currentIndex() == 3) onSelectionChanged();
}

QString TensorDetailsPanel::valueText() const
{
    return m_stack->currentIndex() == 1 ? m_valueText->toPlainText() : QString();
}

QString TensorDetailsPanel::statusText() const
{
    return m_status->text();
}

void TensorDetailsPanel::onSelectionChanged()
{
    m_context->runner()->cancel(QStringLiteral("stats"));
    m_context->runner()->cancel(QStringLiteral("preview"));
    const CheckpointPtr cp = m_context->checkpoint();
    const Entry* entry = m_context->selectedEntry();
    m_statsModel->setData(std::nullopt);
    m_previewModel->clear();
    m_chunkModel->setData(cp, entry);
    if (!cp) {
        m_title->setText(QString());
        m_placeholder->setText(tr("Open a checkpoint: File > Open, or drop a file or folder here."));
        m_stack->setCurrentIndex(0);
        return;
    }
    if (!entry) {
        const QString key = m_context->selectedKey();
        // param_groups (or one group) of an optimizer: the table of hyperparameters
        for (const auto& view : m_context->optimizers()) {
            const std::string root = view.rootKey();
            const std::string groups = root.empty() ? std::string("param_groups") : root + ".param_groups";
            const std::string k = key.toStdString();
            if (view.groups.empty() || (k != groups && k.rfind(groups + ".", 0) != 0)) continue;
            const ParamGroupsTable* other = nullptr;
            ParamGroupsTable otherTable;
            for (const auto& b : m_compareOptimizers)
                if (b.rootKey() == root) {
                    otherTable = paramGroupsTable(*m_compare, b);
                    other = &otherTable;
                    break;
                }
            m_groupsModel->setData(paramGroupsTable(*cp, view), other);
            m_title->setText(QStringLiteral("<b>%1</b>").arg(QString::fromStdString(groups).toHtmlEscaped()));
            m_groupsTitle->setText(other ? tr("%n group(s); cells that differ from the compared checkpoint (B) are "
                                              "marked, B's value in their tooltip",
                                       nullptr, m_groupsModel->rowCount())
                                         : tr("%n group(s)", nullptr, m_groupsModel->rowCount()));
            m_stack->setCurrentIndex(3);
            return;
        }
        const auto& tree = m_context->keyTree();
        const int node = tree && !key.isEmpty() ? tree->find(key.toStdString()) : -1;
        if (node > 0) {
            const auto& n = tree->node(node);
            m_title->setText(QStringLiteral("<b>%1</b>").arg(Format::text(key.toStdString()).toHtmlEscaped()));
            m_placeholder->setText(tr("%1 keys below: %2 tensors, %3, %4.\nSelect a tensor to see its values.")
                                       .arg(n.leaves)
                                       .arg(n.tensors)
                                       .arg(Format::elements(n.numel), Format::bytes(n.bytes)));
        } else {
            m_title->setText(QString());
            m_placeholder->setText(tr("Select a key in the State keys view."));
        }
        m_stack->setCurrentIndex(0);
        return;
    }
    const QString key = Format::text(entry->key); // shown, escaped: never the raw bytes of a hostile name
    if (!entry->isTensor()) {
        m_title->setText(tr("<b>%1</b> &nbsp; %2 value")
                             .arg(key.toHtmlEscaped(), QString::fromLatin1(pyKindName(entry->value->kind)).toLower()));
        QString text = QString::fromStdString(pyRepr(entry->value, 100000));
        if (!entry->error.empty()) text = tr("Unreadable: %1").arg(QString::fromStdString(entry->error));
        m_valueText->setPlainText(text);
        m_stack->setCurrentIndex(1);
        return;
    }
    const TensorEntry& t = *entry->tensor;
    QString extra;
    if (!t.placements.empty())
        extra += QStringLiteral(" &nbsp; %1").arg(QString::fromStdString(t.placements).toHtmlEscaped());
    if (t.isParameter) extra += tr(" &nbsp; Parameter");
    if (const auto view = broadcastStorageOf(*entry))
        extra += tr(" &nbsp; broadcast view of the %1 it stores, each element %2 times: statistics from those")
                     .arg(Format::shape(view->stored.tensor->shape), QString::number(view->repeats));
    m_title->setText(
        tr("<b>%1</b> &nbsp; %2 %3 &nbsp; %4, %5 &nbsp; %n chunk(s)", nullptr, static_cast<int>(t.chunks.size()))
            .arg(key.toHtmlEscaped(),
                QString::fromLatin1(dtypeName(t.dtype).data(), static_cast<qsizetype>(dtypeName(t.dtype).size())),
                Format::shape(t.shape), Format::elements(t.numel()), Format::bytes(t.nbytes()))
        + extra);
    if (isScalarEntry(*entry)) {
        // one number (`step`): its value says everything, a histogram of one element says nothing. The previous
        // tensor's jobs must not land on this one.
        m_context->runner()->cancel(QStringLiteral("stats"));
        m_context->runner()->cancel(QStringLiteral("preview"));
        m_histogram->clearHistogram(QString());
        QString text;
        try {
            text = QString::fromStdString(scalarValueText(*cp, *entry).value_or(std::string()));
        } catch (const std::exception& e) {
            text = tr("Unreadable: %1").arg(QString::fromUtf8(e.what()));
        }
        text += tr("\n\n%1 %2 tensor, held by %3")
                    .arg(QString::fromLatin1(
                             dtypeName(t.dtype).data(), static_cast<qsizetype>(dtypeName(t.dtype).size())),
                        t.shape.empty() ? tr("0-dim") : Format::shape(t.shape), Format::ranks(t.ranks()));
        m_valueText->setPlainText(text);
        m_stack->setCurrentIndex(1);
        return;
    }
    m_stack->setCurrentIndex(2);

    m_status->setText(tr("Computing statistics…"));
    m_histogram->clearHistogram(tr("Computing…"));
    const std::string k = entry->key;
    m_context->runner()->run(
        QStringLiteral("stats"), tr("Statistics of %1").arg(key), this,
        [cp, k](const Progress& progress) {
            const Entry* e = cp->find(k);
            return computeTensorStats(*cp, *e, HistogramBins, progress);
        },
        [this, k](TensorStats s) {
            // a result already on its way when another key was selected (a scalar starts no job to supersede it)
            if (m_context->selectedKey() != QString::fromStdString(k)) return;
            m_status->setText(
                s.complexRealPart ? tr("%1 (real parts)").arg(Format::elements(s.numel)) : Format::elements(s.numel));
            if (s.histogramCounts.empty())
                m_histogram->clearHistogram(s.numel == 0 ? tr("Empty tensor") : tr("No finite values"));
            else
                m_histogram->setHistogram(s.histogramEdges, s.histogramCounts, tr("value"));
            m_statsModel->setData(std::move(s));
            Q_EMIT statsReady();
        },
        [this](const QString& message, bool cancelled) {
            if (cancelled) return;
            m_status->setText(tr("No statistics: %1").arg(message));
            m_histogram->clearHistogram(tr("No statistics"));
            Q_EMIT statsReady();
        });

    const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
    {
        const QSignalBlocker block(m_rowOffset);
        m_rowOffset->setRange(0, static_cast<int>(std::min<int64_t>(std::max<int64_t>(rows - 1, 0), INT32_MAX)));
        m_rowOffset->setValue(0);
        m_rowOffset->setEnabled(t.shape.size() >= 1 && rows > 1);
    }
    startPreview();
}

void TensorDetailsPanel::startPreview()
{
    const CheckpointPtr cp = m_context->checkpoint();
    const Entry* entry = m_context->selectedEntry();
    if (!cp || !entry || !entry->isTensor()) return;
    const std::string k = entry->key;
    const int64_t offset = m_rowOffset->value();
    m_previewInfo->setText(tr("Reading…"));
    m_context->runner()->run(
        QStringLiteral("preview"), tr("Values of %1").arg(QString::fromStdString(k)), this,
        [cp, k, offset](const Progress& progress) {
            return ValuesPreviewModel::read(*cp, *cp->find(k), offset, PreviewRows, PreviewColumns, progress);
        },
        [this, k](ValuesPreviewModel::Slice s) {
            if (m_context->selectedKey() != QString::fromStdString(k)) return;
            const int64_t dim0 = s.shape.empty() ? 1 : s.shape[0];
            QString info;
            if (s.shape.empty())
                info = tr("0-dim tensor");
            else if (s.rows == 0)
                info = tr("no elements");
            else
                info = tr("rows %1–%2 of %3").arg(s.rowOffset).arg(s.rowOffset + s.rows - 1).arg(dim0);
            if (s.columns < s.rowLength)
                info += tr(", first %1 of %2 elements per row").arg(s.columns).arg(s.rowLength);
            m_previewInfo->setText(info);
            m_previewModel->setData(std::move(s));
            m_previewView->resizeColumnsToContents();
            Q_EMIT previewReady();
        },
        [this](const QString& message, bool cancelled) {
            if (!cancelled) m_previewInfo->setText(tr("Cannot read values: %1").arg(message));
        });
}

} // namespace optscope::ui
