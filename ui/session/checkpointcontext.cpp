// SPDX-License-Identifier: GPL-3.0-or-later
#include "session/checkpointcontext.h"

#include <QFileInfo>

#include "session/jobrunner.h"
#include "session/keytree.h"

#include "optscope/formats/checkpoint_loader.h"

#include <QPointer>

namespace optscope::ui {

namespace {

struct Loaded
{
    CheckpointPtr checkpoint;
    std::shared_ptr<const KeyTree> tree;
    std::vector<OptimizerView> optimizers;
};

} // namespace

CheckpointContext::CheckpointContext(QObject* parent)
    : QObject(parent)
    , m_runner(new JobRunner(this))
{ }

CheckpointContext::~CheckpointContext() = default;

void CheckpointContext::open(const QString& path, OpenAs as)
{
    Q_EMIT loadStarted(path);
    const std::string p = path.toStdString();
    const uint64_t generation = ++m_loadGeneration;
    m_runner->run(
        QStringLiteral("load"), tr("Opening %1").arg(path), this,
        [p, as, generation, self = QPointer<CheckpointContext>(this)](const Progress& progress) {
            // the tree fills as the reader finds keys: each batch is added to what came before and shown as a
            // preview checkpoint with its own key tree, both built here, off the UI thread
            Progress withPreview = progress;
            auto found = std::make_shared<std::vector<Entry>>();
            withPreview.entriesFound = [p, generation, self, found](std::vector<Entry>&& batch) {
                for (auto& e : batch)
                    found->push_back(std::move(e));
                auto preview = std::make_shared<Checkpoint>();
                preview->path = p;
                preview->entries = *found;
                preview->buildIndex();
                std::shared_ptr<const KeyTree> tree = KeyTree::build(*preview);
                QMetaObject::invokeMethod(
                    self.data(),
                    [self, generation, preview = CheckpointPtr(preview), tree] {
                        if (self && self->m_loadGeneration == generation) Q_EMIT self->loadPreview(preview, tree);
                    },
                    Qt::QueuedConnection);
            };
            Loaded l;
            l.checkpoint = as == OpenAs::RawFile ? openCheckpointFile(p, withPreview) : openCheckpoint(p, withPreview);
            progress(0.95, "indexing");
            l.tree = KeyTree::build(*l.checkpoint);
            l.optimizers = findOptimizers(*l.checkpoint);
            return l;
        },
        [this, path, as](Loaded l) {
            install(std::move(l.checkpoint), std::move(l.tree), std::move(l.optimizers), path, as == OpenAs::RawFile);
        },
        [this, path](const QString& message, bool cancelled) { loadEnded(path, message, cancelled); });
}

void CheckpointContext::adopt(const QString& path, CheckpointPtr checkpoint)
{
    if (!checkpoint) return;
    Q_EMIT loadStarted(path);
    ++m_loadGeneration;
    m_runner->run(
        QStringLiteral("load"), tr("Opening %1").arg(path), this,
        [checkpoint](const Progress& progress) {
            Loaded l;
            l.checkpoint = checkpoint;
            progress(0.5, "indexing");
            l.tree = KeyTree::build(*l.checkpoint);
            l.optimizers = findOptimizers(*l.checkpoint);
            return l;
        },
        [this, path](
            Loaded l) { install(std::move(l.checkpoint), std::move(l.tree), std::move(l.optimizers), path, false); },
        [this, path](const QString& message, bool cancelled) { loadEnded(path, message, cancelled); });
}

void CheckpointContext::loadEnded(const QString& path, const QString& message, bool cancelled)
{
    // a preview the load queued before it ended must not come after this (it would stand for a load that is over)
    ++m_loadGeneration;
    if (cancelled)
        Q_EMIT loadCancelled(path);
    else
        Q_EMIT loadFailed(path, message);
}

void CheckpointContext::install(CheckpointPtr checkpoint, std::shared_ptr<const KeyTree> tree,
    std::vector<OptimizerView> optimizers, const QString& path, bool raw)
{
    // selections of the old checkpoint are meaningless now; running jobs about it are superseded
    for (const auto& channel : {"stats", "preview", "diff", "diagnose", "reshard", "fqn"})
        m_runner->cancel(QLatin1String(channel));
    m_checkpoint = std::move(checkpoint);
    m_tree = std::move(tree);
    m_optimizers = std::move(optimizers);
    m_continuesPrevious = !m_path.isEmpty() && QFileInfo(m_path).absolutePath() == QFileInfo(path).absolutePath();
    m_path = path;
    m_raw = raw;
    m_selectedKey.clear();
    Q_EMIT checkpointChanged();
    Q_EMIT selectionChanged(m_selectedKey);
}

void CheckpointContext::openReference(const QString& path)
{
    const std::string p = path.toStdString();
    m_runner->run(
        QStringLiteral("reference"), tr("Opening reference %1").arg(path), this,
        [p](const Progress& progress) { return openCheckpoint(p, progress); },
        [this, path](CheckpointPtr cp) {
            m_reference = std::move(cp);
            m_referencePath = path;
            Q_EMIT referenceChanged();
        },
        [this, path](const QString& message, bool cancelled) {
            if (!cancelled) Q_EMIT referenceFailed(path, message);
        });
}

void CheckpointContext::clearReference()
{
    m_reference.reset();
    m_referencePath.clear();
    Q_EMIT referenceChanged();
}

void CheckpointContext::close()
{
    m_runner->cancelAll();
    ++m_loadGeneration;
    m_checkpoint.reset();
    m_tree.reset();
    m_optimizers.clear();
    m_path.clear();
    m_continuesPrevious = false;
    m_raw = false;
    m_selectedKey.clear();
    Q_EMIT checkpointChanged();
    Q_EMIT selectionChanged(m_selectedKey);
}

bool CheckpointContext::isLoading() const
{
    return m_runner->isRunning(QStringLiteral("load"));
}

void CheckpointContext::select(const QString& key)
{
    if (key == m_selectedKey) return;
    m_selectedKey = key;
    Q_EMIT selectionChanged(key);
}

const Entry* CheckpointContext::selectedEntry() const
{
    if (!m_checkpoint || m_selectedKey.isEmpty()) return nullptr;
    return m_checkpoint->find(m_selectedKey.toStdString());
}

} // namespace optscope::ui

namespace optscope::ui {

QString CheckpointContext::representativeKey() const
{
    if (!m_checkpoint) return {};
    const Entry* firstTensor = nullptr;
    for (const auto& e : m_checkpoint->entries) {
        if (!e.isTensor()) continue;
        if (!firstTensor) firstTensor = &e;
        if (e.key.find("exp_avg") != std::string::npos && e.tensor->shape.size() >= 2)
            return QString::fromStdString(e.key);
    }
    return firstTensor ? QString::fromStdString(firstTensor->key) : QString();
}

} // namespace optscope::ui
