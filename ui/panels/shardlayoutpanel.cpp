// SPDX-License-Identifier: GPL-3.0-or-later
#include "panels/shardlayoutpanel.h"

#include "common/format.h"
#include "plots/plotexport.h"
#include "plots/shardlayoutwidget.h"
#include "session/checkpointcontext.h"
#include "session/reshardpreview.h"

#include "optscope/model/shard_layout.h"
#include "optscope/tensor/scalar_value.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QPixmap>
#include <QScrollArea>
#include <QVBoxLayout>

namespace optscope::ui {

namespace {

QWidget* legendSwatch(const QBrush& brush, const QPen& pen, const QString& text, QWidget* parent)
{
    QPixmap swatch(22, 12);
    swatch.fill(Qt::transparent);
    {
        QPainter p(&swatch);
        p.fillRect(QRect(0, 0, 21, 11), brush);
        p.setPen(pen);
        p.drawRect(QRect(0, 0, 21, 11));
    }
    auto* box = new QWidget(parent);
    auto* layout = new QHBoxLayout(box);
    layout->setContentsMargins(0, 0, 8, 0);
    layout->setSpacing(4);
    auto* icon = new QLabel(box);
    icon->setPixmap(swatch);
    layout->addWidget(icon);
    layout->addWidget(new QLabel(text, box));
    return box;
}

} // namespace

ShardLayoutPanel::ShardLayoutPanel(CheckpointContext* context, ReshardPreview* preview, QWidget* parent)
    : QWidget(parent)
    , m_context(context)
    , m_title(new QLabel(this))
    , m_widget(new ShardLayoutWidget(this))
    , m_summary(new QLabel(this))
    , m_preview(preview)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    m_title->setTextFormat(Qt::RichText);
    m_title->setWordWrap(true);
    layout->addWidget(m_title);
    // a short dock scrolls the lanes rather than merge a few ranks into one lane (the widget asks for 12 px a rank
    // up to a few dozen ranks)
    m_lanes = new QScrollArea(this);
    auto* scroll = m_lanes;
    scroll->setObjectName(QStringLiteral("shardLanes"));
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll->setWidgetResizable(true);
    scroll->setWidget(m_widget);
    layout->addWidget(scroll, 1);
    PlotExport::install(
        m_widget, [this] { return QFileInfo(m_context->path()).absolutePath(); }, QStringLiteral("shard-layout"));
    m_legend = new QWidget(this);
    auto* legend = new QHBoxLayout(m_legend);
    legend->setContentsMargins(0, 0, 0, 0);
    const QColor blue(0x4e, 0x79, 0xa7), red(0xd6, 0x27, 0x28);
    legend->addWidget(legendSwatch(blue, QPen(blue.darker(140)), tr("chunk (colour per rank)"), this));
    legend->addWidget(legendSwatch(QBrush(blue.lighter(150), Qt::BDiagPattern), QPen(blue, 1, Qt::DashLine),
        tr("FSDP padding (not stored)"), this));
    legend->addWidget(legendSwatch(red, QPen(red), tr("gap"), this));
    legend->addWidget(legendSwatch(QBrush(red, Qt::DiagCrossPattern), QPen(red, 2), tr("overlap"), this));
    legend->addStretch(1);
    auto* hint = new QLabel(tr("wheel: zoom · Ctrl+wheel: ranks · drag: pan · double-click: reset"), this);
    hint->setEnabled(false);
    legend->addWidget(hint);
    layout->addWidget(m_legend);
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);

    connect(m_context, &CheckpointContext::selectionChanged, this, &ShardLayoutPanel::onSelectionChanged);
    connect(m_context, &CheckpointContext::checkpointChanged, this, &ShardLayoutPanel::updateNeedsRoom);
    connect(m_context, &CheckpointContext::checkpointChanged, this, &ShardLayoutPanel::onSelectionChanged);
    connect(m_preview, &ReshardPreview::targetChanged, this, &ShardLayoutPanel::updateNeedsRoom);
    connect(m_preview, &ReshardPreview::targetChanged, this, &ShardLayoutPanel::onSelectionChanged);
    connect(m_preview, &ReshardPreview::writtenChanged, this, &ShardLayoutPanel::onSelectionChanged);
    onSelectionChanged();
}

void ShardLayoutPanel::updateNeedsRoom()
{
    // one pass over the chunk tables that makes nothing per chunk; a torch.save file's chunks have no rank (-1)
    const CheckpointPtr cp = m_context->checkpoint();
    const bool needs = isPreviewing() || !cp || cp->ranks().size() > 1;
    if (needs == m_needsRoom) return;
    m_needsRoom = needs;
    // not sharded: every tensor is one lane of one chunk, which the title and the summary already say
    m_lanes->setVisible(needs);
    m_legend->setVisible(needs);
    Q_EMIT needsRoomChanged(needs);
}

QString ShardLayoutPanel::summaryText() const
{
    return m_summary->text();
}

bool ShardLayoutPanel::isPreviewing() const
{
    return m_preview->target().has_value();
}

QString ShardLayoutPanel::titleText() const
{
    return m_title->text();
}

void ShardLayoutPanel::onSelectionChanged()
{
    const Entry* entry = m_context->selectedEntry();
    if (!entry || !entry->isTensor()) {
        m_title->setText(QString());
        const QString message = m_context->checkpoint() ? tr("Select a tensor to see which rank holds which rows.")
                                                        : tr("No checkpoint open.");
        // without lanes (not sharded) the summary says it
        m_summary->setText(m_needsRoom ? QString() : message);
        m_widget->setShardLayout(std::nullopt, message);
        return;
    }
    if (entry->tensor->shape.empty()) {
        // a 0-dim tensor (`step`) has no rows to lay out: say who holds its one value instead of drawing an empty lane
        QString value;
        try {
            value = QString::fromStdString(scalarValueText(*m_context->checkpoint(), *entry).value_or(std::string()));
        } catch (const std::exception&) { }
        m_title->setText(tr("<b>%1</b> &nbsp; 0-dim").arg(Format::text(entry->key).toHtmlEscaped()));
        const QString message = tr("A 0-dim tensor: one value%1, held whole by %2.")
                                    .arg(value.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(value),
                                        Format::ranks(entry->tensor->ranks()));
        m_summary->setText(m_needsRoom ? QString() : message);
        m_widget->setShardLayout(std::nullopt, message);
        return;
    }
    // pure geometry over the metadata: cheap enough for the UI thread even with thousands of chunks
    const std::optional<ReshardOptions>& preview = m_preview->target();
    ShardLayout layout = ShardLayout::of(preview ? reshardPreview(*entry->tensor, *preview) : *entry->tensor);
    m_title->setText(tr("<b>%1</b> &nbsp; %2 &nbsp; %n chunk(s)", nullptr, static_cast<int>(layout.chunks.size()))
                         .arg(Format::text(entry->key).toHtmlEscaped(), Format::shape(entry->tensor->shape)));
    if (preview)
        m_title->setText(
            tr("<span style=\"color:#6a3d9a\"><b>Preview</b>: after a reshard to %n rank(s) (%1), %2</span><br>",
                nullptr, preview->worldSize)
                .arg(preview->layout == ShardingStyle::Fsdp1 ? QStringLiteral("FSDP1") : QStringLiteral("FSDP2"),
                    m_preview->writtenTo().isEmpty()
                        ? tr("nothing written yet")
                        : tr("written to %1").arg(Format::displayPath(m_preview->writtenTo()).toHtmlEscaped()))
            + m_title->text());
    QStringList problems;
    if (!layout.gaps.empty())
        problems << tr("%n gap(s): %1 of %2 held by no rank", nullptr, static_cast<int>(layout.gaps.size()))
                        .arg(Format::count(layout.totalElements - layout.coveredElements),
                            Format::elements(layout.totalElements));
    if (!layout.gapsExact) problems << tr("gaps not enumerated (chunk grid too large)");
    for (const auto& o : layout.overlaps) {
        if (problems.size() > 6) break;
        problems << tr("overlap of rank %1 and rank %2 at %3")
                        .arg(layout.ranks[o.first])
                        .arg(layout.ranks[o.second])
                        .arg(QString::fromStdString(boxText(o.region)));
    }
    if (layout.overlapsTruncated)
        problems << tr("more than %1 pairs of chunks overlap: not all are drawn")
                        .arg(static_cast<qulonglong>(ShardLayout::kMaxOverlapPairs));
    for (size_t i : layout.outOfBounds)
        problems << tr("chunk %1 of rank %2 reaches outside the tensor").arg(i).arg(layout.ranks[i]);
    if (problems.isEmpty()) {
        m_summary->setText(tr("<span style=\"color:#2e7d32\">✔</span> The chunks tile the tensor exactly: "
                              "%1, no gap, no overlap.")
                               .arg(Format::elements(layout.totalElements))
            + (m_needsRoom ? QString() : tr(" Not split over ranks: no lanes to draw.")));
    } else {
        m_summary->setText(QStringLiteral("<span style=\"color:#d62728\">%1</span>")
                               .arg(problems.join(QStringLiteral("<br>"))
                                        .toHtmlEscaped()
                                        .replace(QStringLiteral("&lt;br&gt;"), QStringLiteral("<br>"))));
    }
    m_widget->setShardLayout(std::move(layout));
}

} // namespace optscope::ui
