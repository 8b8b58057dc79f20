// SPDX-License-Identifier: GPL-3.0-or-later
#include "panels/reshardpanel.h"

#include "common/format.h"
#include "common/reportexport.h"
#include "common/warning.h"
#include "models/statusfilterproxy.h"
#include "models/verifymodel.h"
#include "session/checkpointcontext.h"
#include "session/jobrunner.h"
#include "session/reshardpreview.h"
#include "widgets/keycolumnsizer.h"

#include "optscope/analysis/reshard.h"
#include "optscope/analysis/verify_report.h"
#include "optscope/base/error.h"
#include "optscope/formats/checkpoint_loader.h"
#include "optscope/gpu/gpu_devices.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTemporaryDir>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>
#include <nlohmann/json.hpp>

#include <set>

namespace optscope::ui {

ReshardPanel::ReshardPanel(CheckpointContext* context, ReshardPreview* preview, QWidget* parent)
    : QWidget(parent)
    , m_context(context)
    , m_previewed(preview)
    , m_world(new QSpinBox(this))
    , m_layout(new QComboBox(this))
    , m_device(new QComboBox(this))
    , m_verify(new QPushButton(tr("Verify"), this))
    , m_reshard(new QPushButton(tr("Reshard and save…"), this))
    , m_stop(new QPushButton(tr("Stop"), this))
    , m_preview(new QPushButton(tr("Preview layout"), this))
    , m_open(new QPushButton(tr("Open resharded"), this))
    , m_export(new QToolButton(this))
    , m_problemsOnly(new QCheckBox(tr("Only problems"), this))
    , m_summary(new QLabel(this))
    , m_model(new VerifyModel(this))
    , m_proxy(new StatusFilterProxy(VerifyModel::StatusRole, this))
    , m_view(new QTreeView(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* options = new QHBoxLayout;
    options->addWidget(new QLabel(tr("World size"), this));
    m_world->setRange(1, 65536);
    m_world->setValue(2);
    m_world->setToolTip(tr("Number of ranks of the target layout"));
    options->addWidget(m_world);
    options->addSpacing(8);
    options->addWidget(new QLabel(tr("Layout"), this));
    m_layout->addItem(tr("FSDP2 (DTensor Shard(0))"), QStringLiteral("fsdp2"));
    m_layout->addItem(tr("FSDP1 (ShardedTensor)"), QStringLiteral("fsdp1"));
    options->addWidget(m_layout);
    options->addSpacing(8);
    options->addWidget(new QLabel(tr("Device"), this));
    m_device->addItem(tr("CPU"), QStringLiteral("cpu"));
    m_device->setToolTip(tr("Where the target shards are assembled, loaded and gathered again"));
    options->addWidget(m_device);
    options->addStretch(1);
    layout->addLayout(options);

    auto* actions = new QHBoxLayout;
    m_verify->setToolTip(tr("Reshard to the target layout, load every rank's shard from the written files as that "
                            "rank would, gather again and compare bit for bit with the source"));
    m_verify->setDefault(true);
    actions->addWidget(m_verify);
    m_reshard->setToolTip(tr("Write the resharded checkpoint (a DCP folder) and verify the written copy"));
    actions->addWidget(m_reshard);
    m_stop->setToolTip(tr("Cancel the running reshard or verify"));
    m_stop->hide();
    actions->addWidget(m_stop);
    m_preview->setCheckable(true);
    m_preview->setObjectName(QStringLiteral("previewLayout"));
    m_preview->setToolTip(tr("Show the selected tensor in the Shard layout view as the target layout would split "
                             "it, before anything is written"));
    actions->addWidget(m_preview);
    m_open->setObjectName(QStringLiteral("openResharded"));
    m_open->setToolTip(tr("Open the checkpoint just written"));
    m_open->hide();
    actions->addWidget(m_open);
    m_export->setText(tr("Export report"));
    m_export->setPopupMode(QToolButton::InstantPopup);
    auto* menu = new QMenu(m_export);
    menu->addAction(tr("JSON…"), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export report"),
            QFileInfo(m_context->path()).absoluteDir().filePath(QStringLiteral("verify.json")), tr("JSON (*.json)"));
        if (!path.isEmpty())
            if (const QString err = exportJson(path); !err.isEmpty()) showWarning(this, tr("Export report"), err);
    });
    menu->addAction(tr("CSV…"), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export report"),
            QFileInfo(m_context->path()).absoluteDir().filePath(QStringLiteral("verify.csv")), tr("CSV (*.csv)"));
        if (!path.isEmpty())
            if (const QString err = exportCsv(path); !err.isEmpty()) showWarning(this, tr("Export report"), err);
    });
    m_export->setMenu(menu);
    m_export->setEnabled(false);
    actions->addWidget(m_export);
    actions->addStretch(1);
    actions->addWidget(m_problemsOnly);
    layout->addLayout(actions);

    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);

    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(VerifyModel::SortRole);
    m_view->setModel(m_proxy);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(-1, Qt::AscendingOrder);
    m_view->setUniformRowHeights(true);
    m_view->setAlternatingRowColors(true);
    // full keys: the other columns sized to their content, the view scrolls right rather than cut a key
    new KeyColumnSizer(m_view, m_view->header(), VerifyModel::KeyColumn);
    layout->addWidget(m_view, 1);

    connect(m_verify, &QPushButton::clicked, this, &ReshardPanel::verify);
    connect(m_stop, &QPushButton::clicked, this, [this] { m_context->runner()->cancel(QStringLiteral("reshard")); });
    connect(m_reshard, &QPushButton::clicked, this, [this] {
        const QString out = QFileDialog::getSaveFileName(this, tr("Save the resharded checkpoint as a new folder"),
            suggestedOutput(), QString(), nullptr, QFileDialog::ShowDirsOnly);
        if (!out.isEmpty()) reshardTo(out);
    });
    connect(m_preview, &QPushButton::toggled, this, &ReshardPanel::setPreviewing);
    auto followOptions = [this] {
        if (m_preview->isChecked()) m_previewed->setTarget(targetOptions());
    };
    connect(m_world, qOverload<int>(&QSpinBox::valueChanged), this, followOptions);
    connect(m_layout, qOverload<int>(&QComboBox::currentIndexChanged), this, followOptions);
    connect(m_open, &QPushButton::clicked, this, [this] {
        if (!m_lastOutput.isEmpty()) Q_EMIT openRequested(m_lastOutput);
    });
    connect(m_problemsOnly, &QCheckBox::toggled, this,
        [this](bool on) { m_proxy->setExcludedStatus(on ? QStringLiteral("identical") : QString()); });
    connect(m_context, &CheckpointContext::checkpointChanged, this, &ReshardPanel::onCheckpointChanged);
    onCheckpointChanged();
    queryDevices();
}

QString ReshardPanel::summaryText() const
{
    return m_summary->text();
}

ReshardOptions ReshardPanel::targetOptions() const
{
    ReshardOptions options;
    options.worldSize = m_world->value();
    options.layout = shardingStyleFromName(m_layout->currentData().toString().toStdString());
    options.device = computeDeviceFromName(m_device->currentData().toString().toStdString());
    return options;
}

void ReshardPanel::setPreviewing(bool on)
{
    if (m_preview->isChecked() != on) {
        m_preview->setChecked(on); // toggled() comes back here
        return;
    }
    m_previewed->setTarget(on ? std::optional<ReshardOptions>(targetOptions()) : std::nullopt);
}

QString ReshardPanel::suggestedOutput() const
{
    const QFileInfo source(m_context->path());
    const QString base = source.isDir() ? source.fileName() : source.completeBaseName();
    return source.absoluteDir().filePath(
        QStringLiteral("%1_%2ranks").arg(base.isEmpty() ? QStringLiteral("resharded") : base).arg(m_world->value()));
}

void ReshardPanel::queryDevices()
{
    m_context->runner()->run(
        QStringLiteral("gpus"), tr("Looking for GPUs"), this, [](const Progress&) { return queryGpus(); },
        [this](GpuInfo info) {
            while (m_device->count() > 1)
                m_device->removeItem(1);
            if (info.devices.empty()) {
                m_device->addItem(
                    tr("GPU: none (%1)").arg(QString::fromStdString(info.status)), QStringLiteral("cuda"));
                auto* model = qobject_cast<QStandardItemModel*>(m_device->model());
                if (model) model->item(1)->setEnabled(false);
                return;
            }
            QStringList names;
            for (const auto& d : info.devices)
                names << QStringLiteral("%1: %2").arg(d.index).arg(QString::fromStdString(d.name));
            QString label = tr("CUDA (%n GPU(s))", nullptr, static_cast<int>(info.devices.size()));
            if (info.devices.size() > 1)
                label += info.ncclAvailable ? tr(" + NCCL %1").arg(QString::fromStdString(info.ncclVersion))
                                            : tr(" (no NCCL: one GPU used)");
            m_device->addItem(label, QStringLiteral("cuda"));
            m_device->setItemData(1, names.join(QLatin1Char('\n')), Qt::ToolTipRole);
        });
}

void ReshardPanel::onCheckpointChanged()
{
    m_model->setData({});
    m_export->setEnabled(false);
    m_open->hide();
    m_lastOutput.clear();
    setPreviewing(false);
    const auto& cp = m_context->checkpoint();
    const bool open = cp != nullptr;
    m_verify->setEnabled(open);
    m_reshard->setEnabled(open);
    if (!open) {
        m_summary->setText(tr("No checkpoint open."));
        return;
    }
    const int sourceRanks = static_cast<int>(cp->ranks().size());
    // a different world size is the interesting default: 3 ranks -> 2, 1 -> 2, 2 -> 4
    m_world->setValue(sourceRanks == 2 ? 4 : 2);
    m_summary->setText(
        tr("The source has %n rank(s). Choose a target world size and layout, then Verify.", nullptr, sourceRanks));
}

void ReshardPanel::setBusy(bool busy)
{
    const bool open = m_context->checkpoint() != nullptr;
    m_verify->setEnabled(!busy && open);
    m_reshard->setEnabled(!busy && open);
    m_world->setEnabled(!busy);
    m_layout->setEnabled(!busy);
    m_device->setEnabled(!busy);
    m_stop->setVisible(busy);
}

void ReshardPanel::showReport()
{
    const VerifyReport& r = m_model->report();
    const bool ok = r.identical();
    QString head = ok ? tr("<b style=\"color:#2e7d32\">IDENTICAL</b>") : tr("<b style=\"color:#d62728\">DIFFERENT</b>");
    QStringList counts;
    for (const VerifyStatus s : {VerifyStatus::Different, VerifyStatus::Missing, VerifyStatus::Unexpected,
             VerifyStatus::Error, VerifyStatus::LeftOut})
        if (const size_t n = r.count(s))
            counts << QStringLiteral("%1 %2").arg(n).arg(QLatin1String(verifyStatusName(s)));
    m_summary->setText(tr("%1: %2 of %3 entries bit-identical%4 (%5 compared); %6; loaded on %7")
                           .arg(head)
                           .arg(r.count(VerifyStatus::Identical))
                           .arg(r.entries.size())
                           .arg(counts.isEmpty() ? QString() : QStringLiteral(", ") + counts.join(QLatin1String(", ")),
                               Format::bytes(r.bytesCompared), QString::fromStdString(r.target).toHtmlEscaped(),
                               QString::fromStdString(r.device).toHtmlEscaped()));
    m_export->setEnabled(true);
}

void ReshardPanel::verify()
{
    const CheckpointPtr cp = m_context->checkpoint();
    if (!cp) return;
    const int world = m_world->value();
    const ReshardOptions target = targetOptions();
    setBusy(true);
    m_summary->setText(tr("Resharding to %n rank(s) and verifying…", nullptr, world));
    m_context->runner()->run(
        QStringLiteral("reshard"), tr("Verify: reshard to %n rank(s)", nullptr, world), this,
        [cp, world, target](const Progress& progress) {
            if (target.layout == ShardingStyle::Fsdp2) {
                VerifyOptions options;
                options.worldSize = world;
                options.device = target.device;
                return verifyByLoad(*cp, options, progress);
            }
            // FSDP1 layout: write it for real into a temporary folder, then load that copy back
            QTemporaryDir tmp;
            if (!tmp.isValid())
                throw Error(ErrorKind::Io, tmp.path().toStdString(), "cannot create a temporary folder");
            const std::string out = QString(tmp.path() + QStringLiteral("/resharded")).toStdString();
            const DcpWriteStats stats = reshardCheckpoint(*cp, out, target, progress);
            const CheckpointPtr copy = openCheckpoint(out);
            VerifyReport report = verifyAgainst(*cp, *copy, progress, stats.leftOut);
            report.target = "resharded to " + std::to_string(world) + " ranks (FSDP1 layout)";
            if (target.device != ComputeDevice::Cpu)
                report.device = "resharded on " + describeComputeDevice(target.device) + ", compared on the cpu";
            return report;
        },
        [this](VerifyReport report) {
            setBusy(false);
            m_model->setData(std::move(report));
            showReport();
            Q_EMIT finished(true);
        },
        [this](const QString& message, bool cancelled) {
            setBusy(false);
            m_summary->setText(cancelled
                    ? tr("Cancelled.")
                    : tr("<b style=\"color:#d62728\">Failed:</b> %1").arg(message.toHtmlEscaped()));
            Q_EMIT finished(false);
        });
}

void ReshardPanel::reshardTo(const QString& outDir)
{
    const CheckpointPtr cp = m_context->checkpoint();
    if (!cp) return;
    const int world = m_world->value();
    const ReshardOptions options = targetOptions();
    const std::string out = outDir.toStdString();
    setBusy(true);
    m_summary->setText(tr("Writing %1…").arg(Format::displayPath(outDir).toHtmlEscaped()));
    m_context->runner()->run(
        QStringLiteral("reshard"), tr("Reshard to %n rank(s)", nullptr, world), this,
        [cp, out, options](const Progress& progress) {
            const DcpWriteStats stats = reshardCheckpoint(*cp, out, options, progress);
            const CheckpointPtr copy = openCheckpoint(out);
            VerifyReport report = verifyAgainst(*cp, *copy, progress, stats.leftOut);
            if (options.device != ComputeDevice::Cpu)
                report.device = "resharded on " + describeComputeDevice(options.device) + ", compared on the cpu";
            // one size format everywhere: "47 KiB" as the other panels write it, not a byte count
            report.target = out + " (" + std::to_string(stats.files) + " data files and .metadata, "
                + Format::bytes(stats.bytes).toStdString() + " in all)";
            return report;
        },
        [this, outDir, options](VerifyReport report) {
            setBusy(false);
            m_model->setData(std::move(report));
            showReport();
            m_summary->setText(
                m_summary->text() + tr("<br>Saved to %1").arg(Format::displayPath(outDir).toHtmlEscaped()));
            m_lastOutput = outDir;
            m_open->show();
            m_previewed->setWritten(outDir, options);
            Q_EMIT finished(true);
        },
        [this](const QString& message, bool cancelled) {
            setBusy(false);
            m_summary->setText(cancelled
                    ? tr("Cancelled.")
                    : tr("<b style=\"color:#d62728\">Failed:</b> %1").arg(message.toHtmlEscaped()));
            Q_EMIT finished(false);
        });
}

QString ReshardPanel::exportJson(const QString& path) const
{
    return ReportExport::write(path, ReportExport::json(m_model->report().toJson()));
}

QString ReshardPanel::exportCsv(const QString& path) const
{
    return ReportExport::write(path, QString::fromStdString(m_model->report().toCsv()));
}

} // namespace optscope::ui
