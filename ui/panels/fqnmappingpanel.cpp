// SPDX-License-Identifier: GPL-3.0-or-later
#include "panels/fqnmappingpanel.h"

#include "models/fqnmappingmodel.h"
#include "session/checkpointcontext.h"
#include "session/jobrunner.h"
#include "widgets/keycolumnsizer.h"

#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTableView>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>

namespace optscope::ui {

FqnMappingPanel::FqnMappingPanel(CheckpointContext* context, QWidget* parent)
    : QWidget(parent)
    , m_context(context)
    , m_model(new FqnMappingModel(this))
    , m_proxy(new QSortFilterProxyModel(this))
    , m_search(new QLineEdit(this))
    , m_modelButton(new QToolButton(this))
    , m_units(new QLineEdit(this))
    , m_world(new QSpinBox(this))
    , m_notes(new QLabel(this))
    , m_view(new QTableView(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* bar = new QHBoxLayout;
    m_search->setPlaceholderText(tr("Search id, FQN, shape…"));
    m_search->setClearButtonEnabled(true);
    bar->addWidget(m_search, 2);
    m_modelButton->setText(tr("Model…"));
    m_modelButton->setToolTip(tr("A checkpoint with the model's parameters: names id-keyed and raw FSDP1 optimizers"));
    m_modelButton->setPopupMode(QToolButton::InstantPopup);
    auto* menu = new QMenu(m_modelButton);
    menu->addAction(tr("Open model file…"), this, [this] { chooseModel(false); });
    menu->addAction(tr("Open model folder (DCP)…"), this, [this] { chooseModel(true); });
    menu->addAction(tr("Forget model"), m_context, &CheckpointContext::clearReference);
    m_modelButton->setMenu(menu);
    bar->addWidget(m_modelButton);
    m_units->setPlaceholderText(tr("FSDP1 units, e.g. layers.0,layers.1 (auto)"));
    m_units->setToolTip(tr("Module prefixes FSDP1 wrapped (one flat parameter each); empty: guessed"));
    bar->addWidget(m_units, 1);
    m_world->setRange(0, 65536);
    m_world->setSpecialValueText(tr("auto"));
    m_world->setPrefix(tr("world "));
    m_world->setToolTip(tr("FSDP1 world size; auto: the one that reproduces the shard sizes"));
    bar->addWidget(m_world);
    layout->addLayout(bar);

    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(FqnMappingModel::SortRole);
    m_proxy->setFilterKeyColumn(-1);
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_view->setModel(m_proxy);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(-1, Qt::AscendingOrder);
    m_view->setAlternatingRowColors(true);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_view->verticalHeader()->hide();
    m_view->setWordWrap(false);
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 6);
    // names whole at any dock width: the other columns take their content's width, the FQN the rest (at least its
    // own), and the table scrolls right past that (fixed widths elided every FQN at the docked width)
    m_view->horizontalHeader()->setStretchLastSection(false);
    new KeyColumnSizer(m_view, m_view->horizontalHeader(), FqnMappingModel::FqnColumn);
    layout->addWidget(m_view, 1);
    m_notes->setWordWrap(true);
    m_notes->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_notes);

    connect(m_search, &QLineEdit::textChanged, m_proxy, &QSortFilterProxyModel::setFilterFixedString);
    connect(m_view, &QTableView::doubleClicked, this, [this](const QModelIndex& index) { activateRow(index.row()); });
    connect(m_units, &QLineEdit::editingFinished, this, &FqnMappingPanel::rebuild);
    connect(m_world, qOverload<int>(&QSpinBox::valueChanged), this, &FqnMappingPanel::rebuild);
    connect(m_context, &CheckpointContext::checkpointChanged, this, &FqnMappingPanel::rebuild);
    connect(m_context, &CheckpointContext::referenceChanged, this, &FqnMappingPanel::rebuild);
    rebuild();
}

void FqnMappingPanel::activateRow(int proxyRow)
{
    const QString key = m_proxy->index(proxyRow, 0).data(FqnMappingModel::JumpKeyRole).toString();
    if (key.isEmpty()) return;
    m_context->select(key);
    Q_EMIT jumpRequested(key);
}

void FqnMappingPanel::chooseModel(bool folder)
{
    const QString path = folder
        ? QFileDialog::getExistingDirectory(this, tr("Model checkpoint folder (DCP)"))
        : QFileDialog::getOpenFileName(this, tr("Model checkpoint"), QString(),
            tr("PyTorch checkpoints (*.pt *.pth *.bin *.ckpt *.safetensors *.index.json);;All files (*)"));
    if (!path.isEmpty()) m_context->openReference(path);
}

void FqnMappingPanel::rebuild()
{
    const CheckpointPtr cp = m_context->checkpoint();
    if (!cp) {
        m_model->setData({});
        m_notes->setText(tr("No checkpoint open."));
        return;
    }
    const CheckpointPtr ref = m_context->reference();
    const std::vector<OptimizerView> optimizers = m_context->optimizers();
    FqnMapping::Options options;
    for (const QString& u : m_units->text().split(QLatin1Char(','), Qt::SkipEmptyParts))
        options.units << u.trimmed();
    options.worldSize = m_world->value();
    m_notes->setText(tr("Mapping parameters…"));
    m_context->runner()->run(
        QStringLiteral("fqn"), tr("Mapping parameters"), this,
        [cp, ref, optimizers, options](
            const Progress&) { return FqnMapping::build(*cp, optimizers, ref.get(), options); },
        [this, ref](FqnMapping mapping) {
            QStringList notes = mapping.notes;
            int unnamed = 0;
            for (const auto& r : mapping.rows)
                unnamed += r.fqn.isEmpty() ? 1 : 0;
            notes.prepend(tr("%n parameter(s)", nullptr, static_cast<int>(mapping.rows.size()))
                + (unnamed ? tr(", %1 without a name: open the model (Model…)").arg(unnamed) : QString())
                + (ref ? tr("; model: %1").arg(m_context->referencePath()) : QString()));
            m_notes->setText(notes.join(QLatin1Char('\n')));
            // the normalised name only where it says something: a column repeating every FQN took the width the
            // flat parameter needed
            // (and the flat parameter columns only where parameters lie in flat buffers: FSDP1, ZeRO)
            const bool normalises = std::any_of(mapping.rows.begin(), mapping.rows.end(),
                [](const FqnMapping::Row& r) { return !r.normalized.isEmpty() && r.normalized != r.fqn; });
            const bool flat = std::any_of(
                mapping.rows.begin(), mapping.rows.end(), [](const FqnMapping::Row& r) { return r.flatParam >= 0; });
            m_model->setData(std::move(mapping));
            m_view->setColumnHidden(FqnMappingModel::NormalizedColumn, !normalises);
            m_view->setColumnHidden(FqnMappingModel::FlatParamColumn, !flat);
            m_view->setColumnHidden(FqnMappingModel::FlatOffsetColumn, !flat);
            Q_EMIT mappingReady();
        },
        [this](const QString& message, bool cancelled) {
            if (!cancelled) m_notes->setText(tr("Cannot map parameters: %1").arg(message));
        });
}

} // namespace optscope::ui
