// SPDX-License-Identifier: GPL-3.0-or-later
#include "statekeyspanel.h"

#include "checkpointcontext.h"
#include "format.h"
#include "keytree.h"
#include "statekeysmodel.h"

#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QTimer>
#include <QTreeView>
#include <QVBoxLayout>

#include <set>

namespace optscope::ui {

StateKeysPanel::StateKeysPanel(CheckpointContext* context, QWidget* parent)
    : QWidget(parent)
    , m_context(context)
    , m_model(new StateKeysModel(this))
    , m_filter(new QLineEdit(this))
    , m_view(new QTreeView(this))
    , m_summary(new QLabel(this))
    , m_warnings(new QLabel(this))
    , m_filterTimer(new QTimer(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->setSpacing(4);
    m_filter->setPlaceholderText(tr("Filter keys (e.g. exp_avg, layers.0, step)"));
    m_filter->setClearButtonEnabled(true);
    layout->addWidget(m_filter);

    m_view->setModel(m_model);
    m_view->setUniformRowHeights(true);
    m_view->setAlternatingRowColors(true);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setAllColumnsShowFocus(true);
    m_view->header()->setStretchLastSection(false);
    m_view->header()->setSectionResizeMode(StateKeysModel::NameColumn, QHeaderView::Stretch);
    m_view->setColumnWidth(StateKeysModel::TypeColumn, 70);
    m_view->setColumnWidth(StateKeysModel::ShapeColumn, 90);
    m_view->setColumnWidth(StateKeysModel::NumelColumn, 70);
    m_view->setColumnWidth(StateKeysModel::BytesColumn, 70);
    m_view->setColumnWidth(StateKeysModel::RanksColumn, 50);
    layout->addWidget(m_view, 1);

    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);
    m_warnings->setWordWrap(true);
    m_warnings->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_warnings->setStyleSheet(QStringLiteral("QLabel { color: #b35900; }"));
    m_warnings->hide();
    layout->addWidget(m_warnings);

    m_filterTimer->setSingleShot(true);
    m_filterTimer->setInterval(150);
    connect(m_filterTimer, &QTimer::timeout, this, &StateKeysPanel::applyFilter);
    connect(m_filter, &QLineEdit::textChanged, m_filterTimer, qOverload<>(&QTimer::start));
    connect(m_filter, &QLineEdit::returnPressed, this, &StateKeysPanel::applyFilter);

    connect(
        m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
            if (m_selecting || !current.isValid()) return;
            m_context->select(current.data(StateKeysModel::KeyRole).toString());
        });
    connect(m_context, &CheckpointContext::checkpointChanged, this, &StateKeysPanel::onCheckpointChanged);
    connect(m_context, &CheckpointContext::selectionChanged, this, &StateKeysPanel::onSelectionChanged);
    updateSummary();
}

void StateKeysPanel::focusFilter()
{
    m_filter->setFocus(Qt::ShortcutFocusReason);
    m_filter->selectAll();
}

void StateKeysPanel::onCheckpointChanged()
{
    m_model->setData(m_context->checkpoint(), m_context->keyTree());
    // open the first two levels when they are small (model/optim, then state/param_groups)
    if (m_model->rowCount() <= 8) {
        for (int r = 0; r < m_model->rowCount(); ++r) {
            const QModelIndex top = m_model->index(r, 0);
            m_view->expand(top);
        }
    }
    if (!m_model->filter().isEmpty()) applyFilter();
    updateSummary();
}

void StateKeysPanel::applyFilter()
{
    m_filterTimer->stop();
    m_model->setFilter(m_filter->text());
    // few matches: show them all
    if (!m_model->filter().isEmpty() && m_model->matchingLeaves() <= 500) m_view->expandAll();
    onSelectionChanged(m_context->selectedKey());
    updateSummary();
}

void StateKeysPanel::onSelectionChanged(const QString& key)
{
    const QModelIndex idx = m_model->indexForKey(key);
    const QModelIndex current = m_view->currentIndex();
    if (idx.isValid() && current.isValid() && current.internalId() == idx.internalId()) return;
    m_selecting = true;
    if (idx.isValid()) {
        m_view->setCurrentIndex(idx);
        m_view->scrollTo(idx);
    } else {
        m_view->clearSelection();
    }
    m_selecting = false;
}

void StateKeysPanel::updateSummary()
{
    const auto& cp = m_context->checkpoint();
    if (!cp) {
        m_summary->setText(tr("No checkpoint open."));
        m_warnings->hide();
        return;
    }
    std::set<int> ranks;
    for (const auto& e : cp->entries)
        if (e.isTensor())
            for (const auto& c : e.tensor.chunks)
                ranks.insert(c.rank);
    QString rankText;
    if (!ranks.empty() && *ranks.begin() >= 0) rankText = tr("; %n rank(s)", nullptr, static_cast<int>(ranks.size()));
    QString text = tr("%1 entries: %2 tensors (%3), %4 values%5; %6")
                       .arg(Format::count(static_cast<int64_t>(cp->entries.size())))
                       .arg(Format::count(static_cast<int64_t>(cp->tensorCount())))
                       .arg(Format::bytes(cp->tensorBytes()))
                       .arg(Format::count(static_cast<int64_t>(cp->entries.size() - cp->tensorCount())))
                       .arg(rankText, QString::fromStdString(cp->formatDetail));
    if (!m_model->filter().isEmpty()) text += tr(" — %n match(es)", nullptr, m_model->matchingLeaves());
    m_summary->setText(text);
    if (cp->warnings.empty()) {
        m_warnings->hide();
    } else {
        QStringList lines;
        for (const auto& w : cp->warnings) {
            if (lines.size() == 5) {
                lines << tr("… and %n more", nullptr, static_cast<int>(cp->warnings.size()) - 5);
                break;
            }
            lines << QStringLiteral("%1 %2: %3")
                         .arg(w.isError ? QStringLiteral("⛔") : QStringLiteral("⚠"), QString::fromStdString(w.code),
                             QString::fromStdString(w.message));
        }
        m_warnings->setText(lines.join(QLatin1Char('\n')));
        m_warnings->show();
    }
}

} // namespace optscope::ui
