// SPDX-License-Identifier: GPL-3.0-or-later
#include "panels/statekeyspanel.h"

#include "common/format.h"
#include "models/statekeysmodel.h"
#include "session/checkpointcontext.h"
#include "session/jobrunner.h"
#include "session/keytree.h"
#include "widgets/copykeyfilter.h"
#include "widgets/frozentreecolumn.h"
#include "widgets/keycolumnsizer.h"

#include "optscope/tensor/scalar_value.h"

#include <QClipboard>
#include <QGuiApplication>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QSignalBlocker>
#include <QTimer>
#include <QTreeView>
#include <QVBoxLayout>

#include <vector>

#include <algorithm>
#include <set>

namespace optscope::ui {

namespace {
const QString kUnsafeBannerStyle = QStringLiteral(
    "QLabel { background: #fdecea; color: #7f1d1d; border: 1px solid #d62728; border-radius: 3px; padding: 6px; }");
} // namespace

StateKeysPanel::StateKeysPanel(CheckpointContext* context, QWidget* parent)
    : QWidget(parent)
    , m_context(context)
    , m_model(new StateKeysModel(this))
    , m_filter(new QLineEdit(this))
    , m_view(new QTreeView(this))
    , m_summary(new QLabel(this))
    , m_warnings(new QLabel(this))
    , m_banner(new QLabel(this))
    , m_filterMessage(new QLabel(this))
    , m_filterTimer(new QTimer(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->setSpacing(4);
    // unsafe globals deserve more than a line among the warnings: a banner above everything, naming them
    m_banner->setWordWrap(true);
    m_banner->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_banner->setStyleSheet(kUnsafeBannerStyle);
    m_banner->hide();
    layout->addWidget(m_banner);
    m_filter->setPlaceholderText(tr("Filter: words, mlp.*.weight, /regex/, dtype:bf16, nan, inf, |x|>1e3"));
    m_filter->setToolTip(
        tr("<p>Keys matching every term:</p><ul>"
           "<li><b>word</b> — the key contains it (case-insensitive); <b>* ? [ ]</b> are wildcards</li>"
           "<li><b>/regex/</b> or <b>re:regex</b> — a regular expression found in the key</li>"
           "<li><b>dtype:bf16</b> — tensors of that type (bf16, fp16, fp32, int64, ...)</li>"
           "<li><b>nan</b>, <b>inf</b> — tensors holding NaN / ±inf</li>"
           "<li><b>|x|&gt;1e3</b>, <b>|x|&lt;=0</b> — the largest finite |x| compared</li>"
           "<li><b>-term</b> — the term does not hold; <b>key:inf</b> — the word itself</li></ul>"
           "<p>Value terms read every tensor once (in the background).</p>"));
    m_filter->setClearButtonEnabled(true);
    layout->addWidget(m_filter);
    m_filterMessage->setWordWrap(true);
    m_filterMessage->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_filterMessage->hide();
    layout->addWidget(m_filterMessage);

    m_view->setModel(m_model);
    m_view->setUniformRowHeights(true);
    m_view->setAlternatingRowColors(true);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setAllColumnsShowFocus(true);
    // names are never squeezed away by the number columns: the view scrolls right instead
    new KeyColumnSizer(m_view, m_view->header(), StateKeysModel::NameColumn);
    // scrolled right to the numbers, the names stay at the left edge
    new FrozenTreeColumn(m_view);
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
            if (m_selecting || m_previewing || !current.isValid()) return;
            m_context->select(current.data(StateKeysModel::KeyRole).toString());
        });
    // Ctrl+C copies the row's full key, not the Key cell's text (the last path element, "exp_avg")
    new CopyKeyFilter(
        m_view, [](const QModelIndex& current) { return current.data(StateKeysModel::KeyRole).toString(); });
    m_view->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_view, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
        const QModelIndex index = m_view->indexAt(pos);
        if (!index.isValid()) return;
        QMenu* menu = contextMenu(index);
        menu->setAttribute(Qt::WA_DeleteOnClose);
        menu->popup(m_view->viewport()->mapToGlobal(pos));
    });
    connect(m_context, &CheckpointContext::checkpointChanged, this, &StateKeysPanel::onCheckpointChanged);
    connect(m_context, &CheckpointContext::loadPreview, this, &StateKeysPanel::onLoadPreview);
    // back to the checkpoint that stays open (or to none) when a load ends without one
    const auto loadEnded = [this] {
        if (m_previewing) onCheckpointChanged();
    };
    connect(m_context, &CheckpointContext::loadFailed, this, loadEnded);
    connect(m_context, &CheckpointContext::loadCancelled, this, loadEnded);
    connect(m_context, &CheckpointContext::selectionChanged, this, &StateKeysPanel::onSelectionChanged);
    updateSummary();
}

QMenu* StateKeysPanel::contextMenu(const QModelIndex& index)
{
    auto* menu = new QMenu(this);
    const QString key = index.data(StateKeysModel::KeyRole).toString();
    const CheckpointPtr cp = m_context->checkpoint();
    const Entry* entry = cp ? cp->find(key.toStdString()) : nullptr;
    QAction* copyKey
        = menu->addAction(tr("Copy full key"), this, [key] { QGuiApplication::clipboard()->setText(key); });
    copyKey->setObjectName(QStringLiteral("copyKey"));
    copyKey->setShortcut(QKeySequence::Copy);
    QString value;
    if (entry && isScalarEntry(*entry)) {
        try {
            value = QString::fromStdString(scalarValueText(*cp, *entry).value_or(std::string()));
        } catch (const std::exception&) { }
    }
    QAction* copyValue = menu->addAction(value.isEmpty() ? tr("Copy value") : tr("Copy value (%1)").arg(value), this,
        [value] { QGuiApplication::clipboard()->setText(value); });
    copyValue->setObjectName(QStringLiteral("copyValue"));
    copyValue->setEnabled(!value.isEmpty());
    menu->addSeparator();
    QAction* shards = menu->addAction(tr("Show in shard layout"), this, [this, key] {
        m_context->select(key);
        Q_EMIT showInShardLayoutRequested(key);
    });
    shards->setObjectName(QStringLiteral("showShards"));
    shards->setEnabled(entry && entry->isTensor());
    QAction* diff = menu->addAction(tr("Diff this key"), this, [this, key] { Q_EMIT diffKeyRequested(key); });
    diff->setObjectName(QStringLiteral("diffKey"));
    diff->setEnabled(m_diffAvailable && entry);
    if (!m_diffAvailable) diff->setToolTip(tr("Compare with a second checkpoint first (Diff panel)"));
    return menu;
}

void StateKeysPanel::focusFilter()
{
    m_filter->setFocus(Qt::ShortcutFocusReason);
    m_filter->selectAll();
}

QString StateKeysPanel::summaryText() const
{
    return m_summary->text();
}

void StateKeysPanel::onLoadPreview(const CheckpointPtr& preview, const std::shared_ptr<const KeyTree>& tree)
{
    m_previewing = true;
    m_model->setData(preview, tree);
    m_summary->setText(tr("Reading… %n key(s) found so far; chunks, values and findings follow when the file is "
                          "read.",
        nullptr, static_cast<int>(preview->entries.size())));
    m_warnings->hide();
    m_banner->hide();
}

void StateKeysPanel::onCheckpointChanged()
{
    m_previewing = false;
    // another checkpoint starts unfiltered (a Hugging Face folder under the last file's filter hid its model keys);
    // the next step of the same run keeps it
    if (!m_context->continuesPrevious() && !m_filter->text().isEmpty()) {
        const QSignalBlocker block(m_filter);
        m_filter->clear();
        m_model->setFilter(QString());
        m_filterMessage->hide();
    }
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

void StateKeysPanel::expandMatches()
{
    // open the filtered tree level by level while the rows in sight stay under a few thousand: 723 matches were
    // once left under one collapsed node, and 100k would make a tree no one scrolls (one pass over what is opened)
    constexpr int MaxRows = 5000;
    if (m_model->matchingLeaves() <= MaxRows) {
        m_view->expandAll();
        return;
    }
    int shown = m_model->rowCount();
    std::vector<QModelIndex> level;
    for (int r = 0; r < m_model->rowCount(); ++r)
        if (m_model->hasChildren(m_model->index(r, 0))) level.push_back(m_model->index(r, 0));
    int depth = -1;
    while (!level.empty()) {
        int children = 0;
        std::vector<QModelIndex> next;
        for (const QModelIndex& node : level) {
            const int n = m_model->rowCount(node);
            children += n;
            if (shown + children > MaxRows) break;
            for (int r = 0; r < n; ++r)
                if (m_model->hasChildren(m_model->index(r, 0, node))) next.push_back(m_model->index(r, 0, node));
        }
        if (shown + children > MaxRows) break;
        shown += children;
        ++depth;
        level = std::move(next);
    }
    if (depth >= 0) m_view->expandToDepth(depth);
}

void StateKeysPanel::applyFilter()
{
    m_filterTimer->stop();
    m_model->setFilter(m_filter->text());
    if (!m_model->filter().isEmpty()) expandMatches();
    onSelectionChanged(m_context->selectedKey());
    const KeyFilter& f = m_model->keyFilter();
    QString message;
    QString style = QStringLiteral("QLabel { color: #7f1d1d; }");
    if (!f.error().empty()) {
        message = tr("Filter: %1").arg(QString::fromStdString(f.error()));
    } else if (m_model->filterWaitsForValues()) {
        message = tr("Reading every tensor's values for nan, inf and |x|…");
        style = QStringLiteral("QLabel { color: gray; }");
        readValuesForFilter();
    } else if (!m_model->filter().isEmpty() && m_model->matchingLeaves() == 0) {
        message = tr("No key matches “%1”. Every term must hold: words anywhere in the key, * ? [ ] as wildcards, "
                     "/regex/, dtype:bf16, nan, inf, |x|>1e3 (hover the box for more).")
                      .arg(m_model->filter());
    }
    m_filterMessage->setStyleSheet(style);
    m_filterMessage->setText(message);
    m_filterMessage->setVisible(!message.isEmpty());
    updateSummary();
}

void StateKeysPanel::readValuesForFilter()
{
    const CheckpointPtr cp = m_context->checkpoint();
    if (!cp) return;
    m_context->runner()->run(
        QStringLiteral("filter-values"), tr("Reading values for the filter"), this,
        [cp](const Progress& progress) {
            return std::make_shared<const std::vector<ValueFacts>>(scanValueFacts(*cp, progress));
        },
        [this, cp](std::shared_ptr<const std::vector<ValueFacts>> facts) {
            if (cp != m_context->checkpoint()) return; // another checkpoint opened meanwhile
            m_model->setValueFacts(std::move(facts));
            applyFilter();
        },
        [this](const QString& message, bool cancelled) {
            m_filterMessage->setText(cancelled ? tr("Reading values was cancelled: nan, inf and |x| match nothing.")
                                               : tr("Reading values failed: %1").arg(message));
            m_filterMessage->show();
        });
}

QString StateKeysPanel::filterMessage() const
{
    return m_filterMessage->isHidden() ? QString() : m_filterMessage->text();
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

QString StateKeysPanel::bannerText() const
{
    return m_banner->isHidden() ? QString() : m_banner->text();
}

QString StateKeysPanel::warningsText() const
{
    return m_warnings->isHidden() ? QString() : m_warnings->text();
}

void StateKeysPanel::updateSummary()
{
    const auto& cp = m_context->checkpoint();
    const UnsafeGlobals& unsafe = m_model->unsafeGlobals();
    if (cp && !unsafe.classPaths.empty()) {
        QStringList paths;
        for (const auto& p : unsafe.classPaths)
            paths << QStringLiteral("<tt>%1</tt>").arg(QString::fromStdString(p).toHtmlEscaped());
        m_banner->setText(tr("<b>⛔ Unsafe pickle:</b> it names %n global(s) outside the safe set: %1. OptScope kept "
                             "them inert (never imported or called), but <tt>torch.load(weights_only=False)</tt> "
                             "would run them. %2",
            nullptr, static_cast<int>(unsafe.classPaths.size()))
                              .arg(paths.join(QLatin1String(", ")),
                                  unsafe.byKey.empty() ? QString()
                                                       : tr("Marked rows hold them (%n key(s)).", nullptr,
                                                           static_cast<int>(unsafe.byKey.size()))));
        m_banner->setStyleSheet(kUnsafeBannerStyle);
        m_banner->show();
    } else if (cp && !unsafe.libraryClassPaths.empty()) {
        // the writer's own classes (LossScaler in a ZeRO checkpoint): worth knowing, not alarming
        QStringList paths;
        for (const auto& p : unsafe.libraryClassPaths)
            paths << QStringLiteral("<tt>%1</tt>").arg(QString::fromStdString(p).toHtmlEscaped());
        const QString library = QString::fromLatin1(writerLibraryName(cp->format));
        m_banner->setText(tr("<b>ℹ %1's own classes</b>, kept inert: %2. %1's loader imports them "
                             "(<tt>weights_only=False</tt>); <tt>torch.load(weights_only=True)</tt> refuses them "
                             "unless they are allowed with <tt>torch.serialization.add_safe_globals</tt>.")
                              .arg(library, paths.join(QLatin1String(", "))));
        m_banner->setStyleSheet(QStringLiteral("QLabel { background: #e8f1fb; color: #1f3b5a; border: 1px solid "
                                               "#9ab8d8; border-radius: 3px; padding: 6px; }"));
        m_banner->show();
    } else if (cp && !unsafe.dataClassPaths.empty()) {
        // pure data the format's own loader reads (io.BytesIO values of a DCP checkpoint, check's dcp-data-global)
        QStringList paths;
        for (const auto& p : unsafe.dataClassPaths)
            paths << QStringLiteral("<tt>%1</tt>").arg(QString::fromStdString(p).toHtmlEscaped());
        m_banner->setText(tr("<b>ℹ Pure-data values</b>, kept inert: %1. DCP saved them with <tt>torch.save</tt> and "
                             "<tt>dcp.load</tt> reads them back (<tt>weights_only=False</tt>); "
                             "<tt>torch.load(weights_only=True)</tt> refuses them unless they are allowed with "
                             "<tt>torch.serialization.add_safe_globals</tt>.")
                              .arg(paths.join(QLatin1String(", "))));
        m_banner->setStyleSheet(QStringLiteral("QLabel { background: #e8f1fb; color: #1f3b5a; border: 1px solid "
                                               "#9ab8d8; border-radius: 3px; padding: 6px; }"));
        m_banner->show();
    } else {
        m_banner->hide();
    }
    if (!cp) {
        m_summary->setText(tr("No checkpoint open."));
        m_warnings->hide();
        return;
    }
    const std::vector<int> ranks = cp->ranks();
    QString rankText;
    if (!ranks.empty() && ranks.front() >= 0) rankText = tr("; %n rank(s)", nullptr, static_cast<int>(ranks.size()));
    QString text = tr("%1 entries: %2 tensors (%3), %4 values%5; %6")
                       .arg(Format::count(static_cast<int64_t>(cp->entries.size())))
                       .arg(Format::count(static_cast<int64_t>(cp->tensorCount())))
                       .arg(Format::bytes(cp->tensorBytes()))
                       .arg(Format::count(static_cast<int64_t>(cp->entries.size() - cp->tensorCount())))
                       .arg(rankText, QString::fromStdString(cp->formatDetail));
    if (!m_model->filter().isEmpty()) text += tr(" — %n match(es)", nullptr, m_model->matchingLeaves());
    m_summary->setText(text);
    // the writer library's own classes and the pure data its loader reads are explained by the banner above, as
    // information (check calls them library-global and dcp-data-global): not listed again here as warnings
    std::vector<const CheckpointWarning*> shown;
    for (const auto& w : cp->warnings)
        if (std::string_view(warningLabel(*cp, w).severity) != "info") shown.push_back(&w);
    if (shown.empty()) {
        m_warnings->hide();
    } else {
        QStringList lines;
        for (const CheckpointWarning* w : shown) {
            if (lines.size() == 5) {
                lines << tr("… and %n more", nullptr, static_cast<int>(shown.size()) - 5);
                break;
            }
            lines << QStringLiteral("%1 %2: %3")
                         .arg(w->isError ? QStringLiteral("⛔") : QStringLiteral("⚠"),
                             QString::fromUtf8(readerCodeName(w->code)), QString::fromStdString(w->message));
        }
        m_warnings->setText(lines.join(QLatin1Char('\n')));
        m_warnings->show();
    }
}

} // namespace optscope::ui
