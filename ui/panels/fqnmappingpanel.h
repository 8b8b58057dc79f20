// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <QWidget>

class QLabel;
class QLineEdit;
class QSortFilterProxyModel;
class QSpinBox;
class QTableView;
class QToolButton;

namespace optscope::ui {

class CheckpointContext;
class FqnMappingModel;

/// The "FQN mapping" dock: parameter id <-> FQN <-> normalised FQN <-> FSDP1 flat parameter <-> shape, with search;
/// double-click shows the parameter's state in the State keys view.
class FqnMappingPanel : public QWidget
{
    Q_OBJECT
public:
    explicit FqnMappingPanel(CheckpointContext* context, QWidget* parent = nullptr);

    FqnMappingModel* model() const { return m_model; }
    QSortFilterProxyModel* proxy() const { return m_proxy; }
    QTableView* view() const { return m_view; }
    QLineEdit* searchEdit() const { return m_search; }
    QLineEdit* unitsEdit() const { return m_units; }

    /// selects the key of a row (as a double-click does)
    void activateRow(int proxyRow);

Q_SIGNALS:
    /// the user asked to see a parameter's state: the main window raises State keys
    void jumpRequested(const QString& key);
    void mappingReady();

private:
    void rebuild();
    void chooseModel(bool folder);

    CheckpointContext* m_context;
    FqnMappingModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QLineEdit* m_search;
    QToolButton* m_modelButton;
    QLineEdit* m_units;
    QSpinBox* m_world;
    QLabel* m_notes;
    QTableView* m_view;
};

} // namespace optscope::ui
