// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"

#include <QWidget>

#include <memory>

class QLabel;
class QMenu;
class QModelIndex;
class QLineEdit;
class QTimer;
class QTreeView;

namespace optscope::ui {

class CheckpointContext;
class KeyTree;
class StateKeysModel;

/// The "State keys" dock: the checkpoint as a key tree with a filter, sizes and ranks; drives the selection.
class StateKeysPanel : public QWidget
{
    Q_OBJECT
public:
    explicit StateKeysPanel(CheckpointContext* context, QWidget* parent = nullptr);

    StateKeysModel* model() const { return m_model; }
    QTreeView* view() const { return m_view; }
    QLineEdit* filterEdit() const { return m_filter; }
    /// the security banner's text: empty when the checkpoint names no unsafe global
    QString bannerText() const;
    /// what the filter line says under the box: a malformed term, values being read, or that nothing matches
    QString filterMessage() const;
    /// the line under the tree: entries, tensors, ranks, format; or how many keys a load has found so far
    QString summaryText() const;
    /// the reader's warnings under it (empty when none is shown)
    QString warningsText() const;

    /// puts the focus into the filter box (Ctrl+F)
    void focusFilter();
    /// the context menu of a row: Copy full key, Copy value (scalars), Show in shard layout, Diff this key (when a
    /// comparison is open); its actions are named copyKey, copyValue, showShards, diffKey. The caller owns it.
    QMenu* contextMenu(const QModelIndex& index);
    /// whether a comparison is open, so that "Diff this key" can show something
    void setDiffAvailable(bool available) { m_diffAvailable = available; }

Q_SIGNALS:
    void showInShardLayoutRequested(const QString& key);
    void diffKeyRequested(const QString& key);

private:
    void onCheckpointChanged();
    /// the keys a load has found so far: shown until the checkpoint is complete, not selectable
    void onLoadPreview(const CheckpointPtr& preview, const std::shared_ptr<const KeyTree>& tree);
    void onSelectionChanged(const QString& key);
    void applyFilter();
    void expandMatches();
    /// the filter asks about values: read them once per checkpoint in the background, then filter again
    void readValuesForFilter();
    void updateSummary();

    CheckpointContext* m_context;
    StateKeysModel* m_model;
    QLineEdit* m_filter;
    QTreeView* m_view;
    QLabel* m_summary;
    QLabel* m_warnings;
    QLabel* m_banner;
    QLabel* m_filterMessage;
    QTimer* m_filterTimer;
    bool m_selecting = false;
    bool m_diffAvailable = false;
    bool m_previewing = false; ///< the tree shows a load's preview, not the context's checkpoint
};

} // namespace optscope::ui
