// SPDX-License-Identifier: GPL-3.0-or-later
#include "session/comparisonsession.h"

#include "common/format.h"
#include "models/diffmodel.h"
#include "session/checkpointcontext.h"
#include "session/jobrunner.h"

#include "optscope/formats/checkpoint_loader.h"
#include "optscope/optim/optimizer_steps.h"

#include <QTimer>

#include <mutex>

namespace optscope::ui {

struct ComparisonSession::PendingRows
{
    std::mutex mutex;
    std::vector<DiffEntry> rows;
    int shown = 0;
};

namespace {
const QString kChannel = QStringLiteral("diff");

/// what a comparison job hands back to the UI thread
struct Outcome
{
    DiffReport report;
    CheckpointPtr other;
    bool openIsA = true;
    ComparisonSession::OrderedBy orderedBy = ComparisonSession::OrderedBy::Opened;
    std::string steps;
};
} // namespace

ComparisonSession::ComparisonSession(CheckpointContext* context, QObject* parent)
    : QObject(parent)
    , m_context(context)
    , m_model(new DiffModel(this))
    , m_drain(new QTimer(this))
{
    // rows appear as they are compared: the worker threads hand them over, this timer shows them
    m_drain->setInterval(250);
    connect(m_drain, &QTimer::timeout, this, [this] {
        if (!m_pending) return;
        std::vector<DiffEntry> rows;
        {
            std::lock_guard<std::mutex> lock(m_pending->mutex);
            rows.swap(m_pending->rows);
        }
        if (rows.empty()) return;
        m_pending->shown += static_cast<int>(rows.size());
        m_model->appendEntries(std::move(rows));
        Q_EMIT progressed(m_pending->shown);
    });
    connect(m_context, &CheckpointContext::checkpointChanged, this, [this] {
        // a comparison of the checkpoint that was open means nothing for the next one
        ++m_generation;
        m_context->runner()->cancel(kChannel);
        m_drain->stop();
        m_pending.reset();
        m_model->setData({});
        m_shown = {};
        m_saved.reset();
        Q_EMIT otherChanged(nullptr);
        Q_EMIT cleared();
    });
}

ComparisonSession::~ComparisonSession() = default;

const DiffReport& ComparisonSession::report() const
{
    return m_model->report();
}

bool ComparisonSession::hasReport() const
{
    return m_model->rowCount() > 0 && !isRunning();
}

bool ComparisonSession::isRunning() const
{
    return m_drain->isActive();
}

CheckpointPtr ComparisonSession::checkpointA() const
{
    return m_shown.openIsA ? m_context->checkpoint() : m_shown.other;
}

CheckpointPtr ComparisonSession::checkpointB() const
{
    if (showingRanks()) return nullptr;
    return m_shown.openIsA ? m_shown.other : m_context->checkpoint();
}

std::string ComparisonSession::openKey(const DiffEntry& entry) const
{
    return m_shown.openIsA ? entry.keyA : entry.keyB;
}

QString ComparisonSession::pathB() const
{
    if (showingRanks() || m_shown.otherPath.isEmpty()) return {};
    return m_shown.openIsA ? m_shown.otherPath : Format::location(m_context->path());
}

DiffOptions ComparisonSession::options() const
{
    DiffOptions options;
    options.rtol = m_rtol;
    options.atol = m_atol;
    // no histogram per entry: the selected pair's is computed when it is shown (diffHistogram), so a comparison of
    // 100k keys neither holds 100k histograms nor reads every tensor twice
    return options;
}

void ComparisonSession::setTolerances(double rtol, double atol)
{
    if (rtol == m_rtol && atol == m_atol) return;
    m_rtol = rtol;
    m_atol = atol;
    if (hasReport() && m_context->checkpoint()) run(m_shown, Order::Kept);
}

void ComparisonSession::compareWith(const QString& path)
{
    Shown what;
    what.otherPath = Format::location(path);
    run(std::move(what), Order::Training);
}

void ComparisonSession::swap()
{
    if (!hasReport() || showingRanks() || !m_shown.other) return;
    Shown what = m_shown;
    what.openIsA = !what.openIsA;
    what.swapped = !what.swapped;
    run(std::move(what), Order::Kept);
}

void ComparisonSession::compareRanks(int rankA, int rankB)
{
    Shown what;
    what.rankA = rankA;
    what.rankB = rankB;
    what.label = tr("Diff of rank %1 and rank %2").arg(rankA).arg(rankB);
    run(std::move(what), Order::Kept);
}

QString ComparisonSession::checkpointLabel(const Shown& what) const
{
    const QString open = Format::location(m_context->path());
    // two folders both named ckpt: their parents tell them apart
    const auto [nameA, nameB]
        = what.openIsA ? Format::distinctNames(open, what.otherPath) : Format::distinctNames(what.otherPath, open);
    return tr("A: %1 ↔ B: %2").arg(nameA, nameB);
}

void ComparisonSession::run(Shown what, Order order)
{
    const CheckpointPtr open = m_context->checkpoint();
    if (!open) return;
    what.rtol = m_rtol;
    what.atol = m_atol;
    DiffOptions options = this->options();
    // two ranks of one checkpoint: the report carries its histograms (its keys are not a second checkpoint's)
    if (what.rankA >= 0) options.histogramBins = HistogramBins;
    m_pending = std::make_shared<PendingRows>();
    options.onEntry = [pending = m_pending](const DiffEntry& e) {
        std::lock_guard<std::mutex> lock(pending->mutex);
        pending->rows.push_back(e);
    };
    // a rank comparison keeps the checkpoint comparison it replaces, one back() away
    if (what.rankA >= 0 && !showingRanks() && m_shown.other && hasReport())
        m_saved = std::make_pair(m_shown, m_model->report());
    QString running = what.label;
    if (what.rankA < 0 && running.isEmpty()) {
        const auto [openName, otherName] = Format::distinctNames(Format::location(m_context->path()), what.otherPath);
        running = tr("Comparing %1 with %2").arg(openName, otherName);
    }
    m_model->setData({});
    m_shown = what;
    m_drain->start();
    const uint64_t generation = ++m_generation;
    Q_EMIT started(running);
    m_context->runner()->run(
        kChannel, running, this,
        [open, what, order, options](const Progress& progress) {
            Outcome out;
            if (what.rankA >= 0) {
                out.report = diffRanks(*open, what.rankA, what.rankB, options, progress);
                return out;
            }
            out.other = what.other ? what.other : openCheckpoint(what.otherPath.toStdString(), progress);
            out.openIsA = what.openIsA;
            out.orderedBy = what.orderedBy;
            if (order == Order::Training) {
                const TrainingOrder t = trainingOrder(*open, *out.other);
                out.openIsA = t.later >= 0;
                out.orderedBy = t.by == TrainingOrder::By::Step ? OrderedBy::Step
                    : t.by == TrainingOrder::By::WriteTime      ? OrderedBy::WriteTime
                                                                : OrderedBy::Opened;
            }
            const Checkpoint& a = out.openIsA ? *open : *out.other;
            const Checkpoint& b = out.openIsA ? *out.other : *open;
            out.report = diffCheckpoints(a, b, options, progress);
            // training's progress reads from the earlier to the later: B to A
            out.steps = stepChangeText(b, a);
            return out;
        },
        [this, asked = what, generation](Outcome out) {
            if (generation != m_generation) return;
            m_drain->stop();
            m_pending.reset();
            Shown what = asked;
            if (what.rankA < 0) {
                what.other = out.other;
                what.openIsA = out.openIsA;
                what.orderedBy = out.orderedBy;
                what.steps = QString::fromStdString(out.steps);
                what.label = checkpointLabel(what);
            }
            show(std::move(what), std::move(out.report));
            Q_EMIT finished();
        },
        [this, generation](const QString& message, bool cancelled) {
            if (generation != m_generation) return;
            m_drain->stop();
            m_pending.reset();
            Q_EMIT failed(message, cancelled);
        });
}

void ComparisonSession::show(Shown what, DiffReport report)
{
    if (what.rankA < 0) m_saved.reset();
    m_shown = std::move(what);
    m_model->setData(std::move(report));
    Q_EMIT otherChanged(m_shown.other);
}

void ComparisonSession::showComparison(
    const QString& otherPath, const CheckpointPtr& other, DiffReport report, const DiffOptions& options)
{
    const CheckpointPtr open = m_context->checkpoint();
    if (!open || !other) return;
    ++m_generation; // a comparison the user started before is superseded
    m_context->runner()->cancel(kChannel);
    m_drain->stop();
    m_pending.reset();
    Shown what;
    what.otherPath = Format::location(otherPath);
    what.other = other;
    what.openIsA = true; // the step just read is the later one
    what.orderedBy = OrderedBy::Step;
    what.rtol = options.rtol;
    what.atol = options.atol;
    what.steps = QString::fromStdString(stepChangeText(*other, *open));
    what.label = checkpointLabel(what);
    show(std::move(what), std::move(report));
    Q_EMIT finished();
}

bool ComparisonSession::back()
{
    if (!m_saved) return false;
    auto saved = std::move(*m_saved);
    m_saved.reset();
    show(std::move(saved.first), std::move(saved.second));
    Q_EMIT finished();
    return true;
}

QString ComparisonSession::backPath() const
{
    return m_saved ? m_saved->first.otherPath : QString();
}

void ComparisonSession::cancel()
{
    m_context->runner()->cancel(kChannel);
}

} // namespace optscope::ui
