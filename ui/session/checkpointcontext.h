// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"
#include "optscope/optim/optimizer_view.h"

#include <QObject>
#include <QString>

#include <memory>
#include <vector>

namespace optscope::ui {

class JobRunner;
class KeyTree;

/// What every panel shares: the open checkpoint (immutable, with its key tree and optimizer views, all computed off
/// the UI thread), the selected key, the reference model used to name parameters and diagnose, and the job runner.
/// Panels observe checkpointChanged / selectionChanged / referenceChanged and never talk to each other directly.
class CheckpointContext : public QObject
{
    Q_OBJECT
public:
    explicit CheckpointContext(QObject* parent = nullptr);
    ~CheckpointContext() override;

    JobRunner* runner() const { return m_runner; }

    /// How open() reads a path: as the checkpoint it belongs to, or one file as the torch.save / safetensors file
    /// it is (a DeepSpeed rank file's raw flat partitions: core openCheckpointFile, the CLI's inspect --raw)
    enum class OpenAs { Checkpoint, RawFile };
    /// Opens @p path in the background; checkpointChanged() follows on success, loadFailed() or loadCancelled()
    /// otherwise.
    void open(const QString& path, OpenAs as = OpenAs::Checkpoint);
    /// shows @p checkpoint, already read from @p path elsewhere (File > Watch folder), as open() would: its key tree
    /// and optimizers are built in the background, its files are not read again
    void adopt(const QString& path, CheckpointPtr checkpoint);
    /// Opens @p path as the reference model (a checkpoint with the model's parameters) in the background.
    void openReference(const QString& path);
    void clearReference();
    void close();

    const CheckpointPtr& checkpoint() const { return m_checkpoint; }
    const std::shared_ptr<const KeyTree>& keyTree() const { return m_tree; }
    const std::vector<OptimizerView>& optimizers() const { return m_optimizers; }
    QString path() const { return m_path; }
    /// whether the checkpoint now open continues the one before it: the same folder (the next step of a run, as
    /// Watch shows them, or the same file again). Panels keep what the user set up (filters) only then; another
    /// checkpoint starts clean
    bool continuesPrevious() const { return m_continuesPrevious; }
    /// the open checkpoint is one file read raw (OpenAs::RawFile)
    bool isRaw() const { return m_raw; }
    bool isLoading() const;

    const CheckpointPtr& reference() const { return m_reference; }
    QString referencePath() const { return m_referencePath; }

    /// Selects a key: an entry key or an inner node of the key tree ("optim.state.fc.weight"). Emits
    /// selectionChanged if it differs.
    void select(const QString& key);
    QString selectedKey() const { return m_selectedKey; }
    /// the selected entry, or null when the selection is an inner node or nothing
    const Entry* selectedEntry() const;
    /// a tensor worth showing first: the first optimizer moment (exp_avg, ...) of 2+ dims, else the first tensor
    QString representativeKey() const;

Q_SIGNALS:
    void loadStarted(const QString& path);
    /// While open() reads: the entries found so far (keys, dtypes, shapes; no chunks), for the State keys tree to
    /// fill as the file is read. Not the checkpoint: checkpointChanged() replaces it when the load is complete.
    void loadPreview(const CheckpointPtr& preview, const std::shared_ptr<const KeyTree>& tree);
    void checkpointChanged();
    void loadFailed(const QString& path, const QString& message);
    /// open() of @p path was cancelled (Esc, Stop, another open or Close): what was open stays open
    void loadCancelled(const QString& path);
    void selectionChanged(const QString& key);
    void referenceChanged();
    void referenceFailed(const QString& path, const QString& message);

private:
    /// the end of an open() or adopt() that did not install its checkpoint
    void loadEnded(const QString& path, const QString& message, bool cancelled);
    /// makes @p checkpoint the open one (the end of open() and adopt())
    void install(CheckpointPtr checkpoint, std::shared_ptr<const KeyTree> tree, std::vector<OptimizerView> optimizers,
        const QString& path, bool raw);
    JobRunner* m_runner;
    uint64_t m_loadGeneration = 0; ///< previews of an open() that was superseded or has ended are dropped
    CheckpointPtr m_checkpoint;
    std::shared_ptr<const KeyTree> m_tree;
    std::vector<OptimizerView> m_optimizers;
    QString m_path;
    bool m_continuesPrevious = false;
    bool m_raw = false;
    QString m_selectedKey;
    CheckpointPtr m_reference;
    QString m_referencePath;
};

} // namespace optscope::ui
