// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QWidget>

class QLabel;
class QLineEdit;
class QTimer;
class QTreeView;

namespace optscope::ui {

class CheckpointContext;
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

    /// puts the focus into the filter box (Ctrl+F)
    void focusFilter();

private:
    void onCheckpointChanged();
    void onSelectionChanged(const QString& key);
    void applyFilter();
    void updateSummary();

    CheckpointContext* m_context;
    StateKeysModel* m_model;
    QLineEdit* m_filter;
    QTreeView* m_view;
    QLabel* m_summary;
    QLabel* m_warnings;
    QTimer* m_filterTimer;
    bool m_selecting = false;
};

} // namespace optscope::ui
