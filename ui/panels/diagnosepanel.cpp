// SPDX-License-Identifier: GPL-3.0-or-later
#include "panels/diagnosepanel.h"

#include "common/format.h"
#include "models/diagnosismodel.h"
#include "session/checkpointcontext.h"
#include "session/jobrunner.h"

#include "optscope/analysis/checkpoint_fix.h"
#include "optscope/analysis/diagnosis.h"
#include "optscope/formats/checkpoint_loader.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QTextBrowser>
#include <QTimer>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>

#include <algorithm>
#include <memory>
#include <optional>

namespace optscope::ui {

namespace {

enum ReferenceKind { ModelFile, ModelFolder, ModelUrl, FqnList };

} // namespace

DiagnosePanel::DiagnosePanel(CheckpointContext* context, QWidget* parent)
    : QWidget(parent)
    , m_context(context)
    , m_reference(new QLineEdit(this))
    , m_browse(new QToolButton(this))
    , m_target(new QLineEdit(this))
    , m_targetBrowse(new QPushButton(tr("Browse…"), this))
    , m_worldSize(new QSpinBox(this))
    , m_run(new QPushButton(tr("Diagnose"), this))
    , m_apply(new QPushButton(tr("Apply fix and save as…"), this))
    , m_openFixed(new QPushButton(tr("Open fixed"), this))
    , m_summary(new QLabel(this))
    , m_model(new DiagnosisModel(this))
    , m_proxy(new QSortFilterProxyModel(this))
    , m_view(new QTreeView(this))
    , m_details(new QTextBrowser(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* bar = new QHBoxLayout;
    bar->addWidget(new QLabel(tr("Model / reference:"), this));
    m_reference->setPlaceholderText(tr("none: self-consistency only (steps, groups, shards)"));
    m_reference->setClearButtonEnabled(true);
    m_reference->setToolTip(tr("What the optimizer must load into: a model checkpoint (file, DCP folder, or a "
                               "s3://, gs:// or https:// URL), a reference optimizer checkpoint, or a text file "
                               "with one FQN per line"));
    bar->addWidget(m_reference, 1);
    m_browse->setText(tr("Browse"));
    m_browse->setPopupMode(QToolButton::InstantPopup);
    auto* menu = new QMenu(m_browse);
    menu->addAction(tr("Model checkpoint file…"), this, [this] { chooseReference(ModelFile); });
    menu->addAction(tr("Model checkpoint folder (DCP)…"), this, [this] { chooseReference(ModelFolder); });
    menu->addAction(tr("Model checkpoint URL…"), this, [this] { chooseReference(ModelUrl); })
        ->setObjectName(QStringLiteral("referenceUrl"));
    menu->addAction(tr("FQN list (text file)…"), this, [this] { chooseReference(FqnList); });
    m_browse->setMenu(menu);
    bar->addWidget(m_browse);
    m_run->setDefault(true);
    bar->addWidget(m_run);
    layout->addLayout(bar);
    // the loading code's optimizer: its param groups decide whether optimizer.load_state_dict accepts the file
    auto* targetBar = new QHBoxLayout;
    targetBar->addWidget(new QLabel(tr("Target optimizer:"), this));
    m_target->setPlaceholderText(tr("same param groups as the saved optimizer (a resume with the same script)"));
    m_target->setClearButtonEnabled(true);
    m_target->setToolTip(tr("Optional: a saved optimizer.state_dict() of the optimizer your loading code builds "
                            "(for example after one step). Its param groups and parameters are what the saved state "
                            "must fit: one group or several, all parameters or only the trainable ones"));
    targetBar->addWidget(m_target, 1);
    m_targetBrowse->setToolTip(m_target->toolTip());
    targetBar->addWidget(m_targetBrowse);
    // the loading run's world size: a DeepSpeed ZeRO checkpoint loads only on the one it was saved by
    targetBar->addWidget(new QLabel(tr("Loading on:"), this));
    m_worldSize->setRange(0, 1 << 20);
    m_worldSize->setSpecialValueText(tr("ranks as saved"));
    m_worldSize->setSuffix(tr(" ranks"));
    m_worldSize->setToolTip(tr("Optional: how many data-parallel ranks the run that loads this checkpoint uses. "
                               "DeepSpeed ZeRO refuses another number than the one that saved it; DCP reshards"));
    targetBar->addWidget(m_worldSize);
    layout->addLayout(targetBar);
    connect(m_target, &QLineEdit::returnPressed, this, &DiagnosePanel::diagnose);
    connect(m_targetBrowse, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Target optimizer (a saved optimizer.state_dict())"),
            QFileInfo(m_context->path()).absolutePath(),
            tr("PyTorch checkpoints (*.pt *.pth *.bin *.ckpt);;All files (*)"));
        if (path.isEmpty()) return;
        m_target->setText(path);
        diagnose();
    });

    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_summary);

    auto* split = new QSplitter(Qt::Vertical, this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(DiagnosisModel::SortRole);
    m_view->setModel(m_proxy);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(DiagnosisModel::SeverityColumn, Qt::AscendingOrder);
    m_view->setAlternatingRowColors(true);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_view->setWordWrap(false);
    // findings alike are one row (1,024 ranks' unreadable files), expanded to each on a click
    m_view->setRootIsDecorated(true);
    m_view->setUniformRowHeights(true);
    m_view->header()->setStretchLastSection(true);
    m_view->setColumnWidth(DiagnosisModel::SeverityColumn, 90);
    m_view->setColumnWidth(DiagnosisModel::CodeColumn, 170);
    m_view->setColumnWidth(DiagnosisModel::OptimizerColumn, 70);
    split->addWidget(m_view);
    m_details->setOpenLinks(false);
    split->addWidget(m_details);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 3);
    layout->addWidget(split, 1);

    auto* actions = new QHBoxLayout;
    m_apply->setToolTip(
        tr("Apply every mechanical fix (renames, re-keying, step casts, ...) and write a new checkpoint "
           "in the input's format"));
    actions->addWidget(m_apply);
    m_openFixed->setToolTip(tr("Open the fixed checkpoint and diagnose it against the same model"));
    m_openFixed->setObjectName(QStringLiteral("openFixed"));
    m_openFixed->hide();
    actions->addWidget(m_openFixed);
    actions->addStretch(1);
    layout->addLayout(actions);

    connect(m_run, &QPushButton::clicked, this, &DiagnosePanel::diagnose);
    connect(m_reference, &QLineEdit::returnPressed, this, &DiagnosePanel::diagnose);
    connect(m_apply, &QPushButton::clicked, this, [this] {
        const CheckpointPtr cp = m_context->checkpoint();
        if (!cp) return;
        const QFileInfo in(m_context->path());
        const bool dcp = fixWritesDcpFolder(*cp);
        const QString suggestion = in.absolutePath() + QLatin1Char('/') + in.completeBaseName()
            + QStringLiteral("_fixed")
            + (dcp ? QString() : QStringLiteral(".") + (in.suffix().isEmpty() ? QStringLiteral("pt") : in.suffix()));
        const QString out = QFileDialog::getSaveFileName(this,
            dcp ? tr("Save the fixed checkpoint as a new DCP folder") : tr("Save the fixed checkpoint"), suggestion,
            dcp ? QString() : tr("PyTorch checkpoints (*.pt *.pth *.bin *.ckpt);;All files (*)"));
        if (!out.isEmpty()) applyFixesTo(out);
    });
    connect(m_openFixed, &QPushButton::clicked, this, [this] {
        if (!m_lastFixed.isEmpty()) Q_EMIT openRequested(m_lastFixed);
    });
    connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this, &DiagnosePanel::onCurrentChanged);
    connect(m_context, &CheckpointContext::checkpointChanged, this, [this] {
        // a reference belongs to the checkpoint it was chosen for: another one starts without it (a reload, or the
        // fixed copy just written, keeps it: diagnosing the fix against the same model is the next step)
        const QString path = m_context->path();
        const bool fixedCopy = !m_lastFixed.isEmpty() && path == m_lastFixed;
        if (path != m_checkpointPath && !fixedCopy) {
            m_reference->clear();
            m_target->clear();
            m_worldSize->setValue(0);
            if (m_context->reference()) m_context->clearReference();
        }
        // the fixed copy just written: diagnosing it against the same model is the next step, so do it
        if (fixedCopy && m_context->checkpoint()) QTimer::singleShot(0, this, &DiagnosePanel::diagnose);
        if (!fixedCopy) m_beforeFix.reset();
        m_checkpointPath = path;
        m_model->setData({});
        m_details->clear();
        m_openFixed->hide();
        m_summary->setText(m_context->checkpoint()
                ? tr("Choose the model the optimizer should load into (or none), then Diagnose.")
                : tr("No checkpoint open."));
        setBusy(false);
    });
    m_summary->setText(tr("No checkpoint open."));
    setBusy(false);
}

QString DiagnosePanel::summaryText() const
{
    return m_summary->text();
}

QString DiagnosePanel::detailsText() const
{
    return m_details->toPlainText();
}

void DiagnosePanel::setReference(const QString& path)
{
    m_reference->setText(path);
}

void DiagnosePanel::setTarget(const QString& path)
{
    m_target->setText(path);
}

void DiagnosePanel::chooseReference(int kind)
{
    QString path;
    if (kind == ModelFolder)
        path = QFileDialog::getExistingDirectory(this, tr("Model checkpoint folder (DCP)"));
    else if (kind == FqnList)
        path = QFileDialog::getOpenFileName(this, tr("FQN list"), QString(), tr("Text files (*.txt);;All files (*)"));
    else if (kind == ModelUrl)
        path = QInputDialog::getText(this, tr("Model checkpoint where it lives"),
            tr("s3://bucket/prefix, gs://bucket/prefix or https://host/path"))
                   .trimmed();
    else
        path = QFileDialog::getOpenFileName(this, tr("Model checkpoint"), QString(),
            tr("PyTorch checkpoints (*.pt *.pth *.bin *.ckpt *.safetensors *.index.json);;All files (*)"));
    if (path.isEmpty()) return;
    m_reference->setText(path);
    // a model checkpoint also names parameters in the FQN mapping view
    if (kind != FqnList) m_context->openReference(path);
    diagnose();
}

void DiagnosePanel::setBusy(bool busy)
{
    m_busy = busy;
    const bool open = m_context->checkpoint() != nullptr;
    m_run->setEnabled(open && !busy);
    m_browse->setEnabled(!busy);
    m_targetBrowse->setEnabled(!busy);
    updateApply();
}

void DiagnosePanel::updateApply()
{
    m_apply->setEnabled(!m_busy && m_context->checkpoint() && m_model->diagnosis().fixable());
}

void DiagnosePanel::diagnose()
{
    const CheckpointPtr cp = m_context->checkpoint();
    if (!cp) return;
    const QString ref = m_reference->text().trimmed();
    const std::string refPath = ref.toStdString();
    const std::string targetPath = m_target->text().trimmed().toStdString();
    const int worldSize = m_worldSize->value();
    setBusy(true);
    m_summary->setText(tr("Diagnosing…"));
    m_context->runner()->run(
        QStringLiteral("diagnose"), tr("Diagnose"), this,
        [cp, refPath, targetPath, worldSize](const Progress& progress) {
            std::unique_ptr<ExpectedParams> expected;
            if (!refPath.empty()) expected = std::make_unique<ExpectedParams>(expectedParamsFrom(refPath, progress));
            std::optional<TargetOptimizer> target;
            if (!targetPath.empty()) target = TargetOptimizer::fromCheckpoint(*openCheckpoint(targetPath, progress));
            return diagnoseCheckpoint(*cp, expected.get(), progress, target ? &*target : nullptr, worldSize);
        },
        [this, ref](Diagnosis d) {
            int errors = 0, warnings = 0, infos = 0;
            for (const auto& f : d.findings) {
                const int s = DiagnosisModel::severityRank(f.severity);
                errors += s == 0;
                warnings += s == 1;
                infos += s == 2;
            }
            QString head;
            if (d.findings.empty())
                head = tr("<b style=\"color:#2e7d32\">No problems found</b>");
            else
                head = tr("<b>%n finding(s)</b>:", nullptr, static_cast<int>(d.findings.size()))
                    + QStringLiteral(
                        " <span style=\"color:#d62728\">%1</span>, <span style=\"color:#b35900\">%2</span>, %3")
                          .arg(tr("%n error(s)", nullptr, errors), tr("%n warning(s)", nullptr, warnings),
                              tr("%n info", nullptr, infos));
            head += QStringLiteral(" &nbsp; <span style=\"color:gray\">%1</span>")
                        .arg(ref.isEmpty() ? tr("self-consistency only (no model given)")
                                           : tr("against %1").arg(ref.toHtmlEscaped()));
            if (d.fixable()) head += tr("<br>Fixable: <i>Apply fix and save as…</i> writes a corrected copy.");
            // what each load path does (the same words as the CLI's), and how the inputs were read
            if (!d.verdicts.empty()) {
                head += QStringLiteral("<br><b>%1</b> <span style=\"color:gray\">%2</span>"
                                       "<table cellspacing=\"0\" cellpadding=\"1\">")
                            .arg(QString::fromStdString(d.verdictsTitle()).toHtmlEscaped(),
                                tr("(one line per way of loading it; the one your code uses is the one that counts)"));
                for (const auto& v : d.verdicts) {
                    const char* colour = v.outcome == LoadOutcome::Raises ? "#d62728"
                        : v.outcome == LoadOutcome::Loads && !v.stepAfterLoad.empty() && v.stepAfterLoad != "ok"
                        ? "#b35900"
                        : v.outcome == LoadOutcome::Loads ? "#2e7d32"
                                                          : "gray";
                    QString text = Format::withDisplayPaths(v.outcomeText());
                    if (text.size() > 160) text = text.left(157) + QStringLiteral("…");
                    head += QStringLiteral("<tr><td><tt>%1</tt>&nbsp;</td><td style=\"color:%2\">%3</td></tr>")
                                .arg(QString::fromLatin1(loadPathName(v.path)), QLatin1String(colour),
                                    text.toHtmlEscaped());
                }
                head += QStringLiteral("</table>");
            }
            for (const auto& n : d.notes)
                head += QStringLiteral("<br><span style=\"color:gray\">%1</span>")
                            .arg(Format::withDisplayPaths(n).toHtmlEscaped());
            // the fixed copy just written: which findings the fix resolved and which remain, first
            if (m_beforeFix && !m_lastFixed.isEmpty() && m_context->path() == m_lastFixed)
                head = changeText(compareDiagnoses(*m_beforeFix, d)) + QStringLiteral("<br>") + head;
            m_summary->setText(head);
            m_model->setData(std::move(d));
            // the finding's name whole ("zero-world-size-mismatch (fixable)" was cut at a fixed width), the
            // message keeping most of the row
            for (const int column : {int(DiagnosisModel::SeverityColumn), int(DiagnosisModel::CodeColumn),
                     int(DiagnosisModel::OptimizerColumn)}) {
                m_view->resizeColumnToContents(column);
                m_view->setColumnWidth(column, std::clamp(m_view->columnWidth(column) + 8, 70, 360));
            }
            setBusy(false);
            if (m_proxy->rowCount() > 0)
                m_view->setCurrentIndex(m_proxy->index(0, 0));
            else
                m_details->clear();
            Q_EMIT finished(true);
        },
        [this](const QString& message, bool cancelled) {
            setBusy(false);
            m_summary->setText(cancelled
                    ? tr("Cancelled.")
                    : tr("<b style=\"color:#d62728\">Cannot diagnose:</b> %1").arg(message.toHtmlEscaped()));
            Q_EMIT finished(false);
        });
}

void DiagnosePanel::onCurrentChanged()
{
    const QModelIndex current = m_view->currentIndex();
    const QModelIndex source = m_proxy->mapToSource(current);
    const DiagnosisFinding* f = current.isValid() ? m_model->finding(source) : nullptr;
    const int alike = m_model->findingCount(source);
    if (!f) {
        m_details->clear();
        return;
    }
    auto esc = [](const std::string& s) { return Format::withDisplayPaths(s).toHtmlEscaped(); };
    QString html
        = QStringLiteral("<h3 style=\"margin:0\">%1 <span style=\"font-weight:normal;color:gray\">%2</span></h3>")
              .arg(esc(f->name()), esc(severityName(f->severity)));
    html += QStringLiteral("<p>%1</p>").arg(esc(f->message));
    if (alike > 1)
        html += tr("<p><i>One of %1 findings alike (the same error and fix); expand the row to see each.</i></p>")
                    .arg(Format::count(alike));
    // the loader's own words: DeepSpeed's for a ZeRO folder's zero-* findings
    const QString loader = QString::fromLatin1(findingLoader(f->code));
    if (!f->pytorchError.empty())
        html += tr("<p><b>%1 would raise:</b></p>").arg(loader)
            + QStringLiteral(
                "<p style=\"background:#fdecea;color:#611a15;font-family:monospace;white-space:pre-wrap\">%1</p>")
                  .arg(esc(f->pytorchError));
    else
        html += tr("<p><i>%1 would load this silently.</i></p>").arg(loader);
    // the GUI's wording: no CLI options ("--model") where the app has its own control
    if (!f->fix.empty()) html += tr("<p><b>Fix:</b> %1</p>").arg(esc(f->fixText(false)));
    if (!f->actions.empty()) {
        html += tr("<p><b>Apply fix</b> will:</p><ul>");
        for (const auto& a : f->actions)
            html += QStringLiteral("<li><tt>%1</tt> %2</li>").arg(esc(fixActionKindName(a.kind)), esc(a.description));
        html += QStringLiteral("</ul>");
    }
    if (!f->keys.empty()) {
        QStringList keys;
        for (const auto& k : f->keys)
            keys << esc(k);
        html += tr("<p><b>Keys:</b> <tt>%1</tt></p>").arg(keys.join(QLatin1String(", ")));
    }
    m_details->setHtml(html);
}

QString DiagnosePanel::changeText(const DiagnosisChange& change)
{
    // each code with how many it had: "name (2)" resolved or new, "name (1 of 3)" still there
    auto codes = [](const std::vector<DiagnosisChange::CodeCount>& list) {
        QStringList out;
        for (const auto& c : list)
            out << QStringLiteral("<i>%1</i> (%2)")
                       .arg(QLatin1String(findingName(c.code)), QString::fromStdString(c.countText()));
        return out.join(QStringLiteral(", "));
    };
    QString text = tr("<b>After the fix</b>: ");
    if (change.resolved.empty() && change.remaining.empty() && change.added.empty() && change.broken.empty())
        return text + tr("no problems, before or after.");
    text += tr("resolved %1").arg(change.resolved.empty() ? tr("nothing") : codes(change.resolved));
    if (!change.remaining.empty()) text += tr("; still there: %1").arg(codes(change.remaining));
    if (!change.added.empty()) text += tr("; new: %1").arg(codes(change.added));
    if (!change.broken.empty())
        text += tr("; it fails where the original loads: %1").arg(Format::text(change.brokenText()).toHtmlEscaped());
    return text
        + (change.noErrorsLeft() ? tr(". <b style=\"color:#2e7d32\">No error is left.</b>")
                                 : tr(". <b style=\"color:#d62728\">Errors are left.</b>"));
}

void DiagnosePanel::applyFixesTo(const QString& output)
{
    const CheckpointPtr cp = m_context->checkpoint();
    if (!cp || !m_model->diagnosis().fixable()) return;
    const Diagnosis d = m_model->diagnosis();
    const std::string out = output.toStdString();
    WriteOptions write;
    if (!m_reference->text().isEmpty()) write.inputs.push_back(m_reference->text().toStdString()); // never over it
    setBusy(true);
    m_context->runner()->run(
        QStringLiteral("fix"), tr("Apply fixes"), this,
        [cp, d, out, write](const Progress& progress) { return applyFixes(*cp, d, out, progress, write); },
        [this, d](FixResult r) {
            setBusy(false);
            m_lastFixed = QString::fromStdString(r.output);
            m_beforeFix = d; // what Open fixed then compares the fixed copy's diagnosis with
            QStringList applied;
            for (const auto& a : r.applied)
                applied << QString::fromStdString(a).toHtmlEscaped();
            m_summary->setText(tr("<b style=\"color:#2e7d32\">Fixed copy written</b> to %1 (%n key(s) renamed)",
                                   nullptr, static_cast<int>(r.renamedKeys))
                                   .arg(m_lastFixed.toHtmlEscaped())
                + (applied.isEmpty() ? QString() : QStringLiteral("<br>") + applied.join(QStringLiteral("<br>"))));
            m_openFixed->show();
            Q_EMIT fixFinished(true, m_lastFixed);
        },
        [this, output](const QString& message, bool cancelled) {
            setBusy(false);
            m_summary->setText(cancelled
                    ? tr("Cancelled.")
                    : tr("<b style=\"color:#d62728\">Cannot fix:</b> %1").arg(message.toHtmlEscaped()));
            Q_EMIT fixFinished(false, output);
        });
}

} // namespace optscope::ui
