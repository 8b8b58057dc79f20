// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/diff_report.h"
#include "optscope/model/checkpoint.h"

#include <QObject>
#include <QString>

#include <memory>
#include <optional>

class QTimer;

namespace optscope::ui {

class CheckpointContext;
class DiffModel;

/// The comparison the app shows, apart from any widget (as RenderDoc's capture context): which two checkpoints (or
/// two ranks of the open one) are compared, in which order, with which tolerances, and the report, whose rows live in
/// model(). The Diff panel shows it, Tensor details sets the other checkpoint beside the open one, Watch hands it the
/// comparison of a step with the one before; none of them talk to each other.
///
/// Two checkpoints are put in training order, as git diff puts old before new, whichever was opened first: A is the
/// later (core trainingOrder: the optimizers' step, then the time written), B the earlier, so Δ = A − B is what
/// training changed and relative changes are relative to the earlier step. When neither can be told later, A is the
/// open checkpoint. swap() turns a comparison round. Two ranks: A is the first rank named.
class ComparisonSession : public QObject
{
    Q_OBJECT
public:
    /// the bins of a Δ histogram (a rank comparison's per entry, the selected pair's of two checkpoints)
    static constexpr int HistogramBins = 48;

    explicit ComparisonSession(CheckpointContext* context, QObject* parent = nullptr);
    ~ComparisonSession() override;

    /// the report's rows (and the report, model()->report()); rows appear while a comparison runs
    DiffModel* model() const { return m_model; }
    const DiffReport& report() const;
    /// whether a finished comparison with keys is shown
    bool hasReport() const;
    bool isRunning() const;

    /// why A is the later: by the optimizers' step, by the time written, or (cannot tell) A is the open one
    enum class OrderedBy { Opened, Step, WriteTime };
    struct Shown
    {
        QString label; ///< "A: step4.pt ↔ B: step3.pt", "Diff of rank 0 and rank 1"
        QString otherPath; ///< the checkpoint compared with the open one; empty for ranks
        CheckpointPtr other; ///< it, read; null for ranks
        bool openIsA = true;
        OrderedBy orderedBy = OrderedBy::Opened;
        bool swapped = false; ///< the user turned the training order round (swap())
        int rankA = -1; ///< two ranks of the open checkpoint; -1 for two checkpoints
        int rankB = -1;
        double rtol = 0;
        double atol = 0;
        QString steps; ///< how the step changed from B to A ("step 3 → 4"), empty when equal or unknown
    };
    /// what is shown (or running); a default Shown when nothing is
    const Shown& shown() const { return m_shown; }
    bool showingRanks() const { return m_shown.rankA >= 0; }
    /// the report's side A and B: for ranks, A is the open checkpoint and B null
    CheckpointPtr checkpointA() const;
    CheckpointPtr checkpointB() const;
    /// an entry's key in the open checkpoint (empty when it is only in the other one)
    std::string openKey(const DiffEntry& entry) const;
    /// the location of B, for a checkpoint comparison
    QString pathB() const;

    /// the options a comparison started now uses: the tolerances
    DiffOptions options() const;
    /// sets the tolerances; a shown comparison is run again with them
    void setTolerances(double rtol, double atol);
    /// compares the open checkpoint with @p path in the background, in training order
    void compareWith(const QString& path);
    /// the shown checkpoint comparison again, with A and B exchanged
    void swap();
    /// compares two ranks of the open checkpoint; a checkpoint comparison shown before stays one back() away
    void compareRanks(int rankA, int rankB);
    /// shows a comparison made elsewhere (Watch: the step just read, now the open checkpoint, against the one
    /// before, @p other at @p otherPath; A is the open one): nothing is read or compared again
    void showComparison(
        const QString& otherPath, const CheckpointPtr& other, DiffReport report, const DiffOptions& options);
    /// back from a rank comparison to the checkpoint comparison it replaced; false if there is none
    bool back();
    /// the checkpoint comparison back() returns to (its other checkpoint's location), empty when none
    QString backPath() const;
    void cancel();

Q_SIGNALS:
    /// a comparison started; its rows follow in model()
    void started(const QString& what);
    /// @p rows keys compared so far of the running comparison
    void progressed(int rows);
    /// a comparison is shown, finished
    void finished();
    void failed(const QString& message, bool cancelled);
    /// the open checkpoint changed: nothing is compared any more
    void cleared();
    /// the other checkpoint of the shown comparison; null when there is none (or two ranks are compared)
    void otherChanged(optscope::CheckpointPtr other);

private:
    enum class Order { Training, Kept };
    void run(Shown what, Order order);
    void show(Shown what, DiffReport report);
    QString checkpointLabel(const Shown& what) const;

    CheckpointContext* m_context;
    DiffModel* m_model;
    QTimer* m_drain;
    struct PendingRows;
    std::shared_ptr<PendingRows> m_pending; ///< rows of the running comparison, handed over by its worker threads
    Shown m_shown;
    uint64_t m_generation = 0; ///< a superseded comparison's results are dropped
    double m_rtol = 0;
    double m_atol = 0;
    /// a checkpoint comparison replaced by a rank comparison, with its report
    std::optional<std::pair<Shown, DiffReport>> m_saved;
};

} // namespace optscope::ui
