// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QWidget>

class QLabel;

namespace optscope::ui {

class CheckpointContext;
class ShardLayoutWidget;

/// The "Shard layout" dock: the selected tensor's chunks per rank (ShardLayout), with what is wrong with them.
class ShardLayoutPanel : public QWidget
{
    Q_OBJECT
public:
    explicit ShardLayoutPanel(CheckpointContext* context, QWidget* parent = nullptr);

    ShardLayoutWidget* layoutWidget() const { return m_widget; }
    QString summaryText() const;

private:
    void onSelectionChanged();

    CheckpointContext* m_context;
    QLabel* m_title;
    ShardLayoutWidget* m_widget;
    QLabel* m_summary;
};

} // namespace optscope::ui
