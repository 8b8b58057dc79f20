// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/diagnosis.h"

#include <QAbstractTableModel>

namespace optscope::ui {

/// The findings of a Diagnosis: severity, code, optimizer and message.
class DiagnosisModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Columns { SeverityColumn, CodeColumn, OptimizerColumn, MessageColumn, ColumnCount };
    enum Roles { SortRole = Qt::UserRole, SeverityRole, FixableRole };

    explicit DiagnosisModel(QObject* parent = nullptr);

    void setData(Diagnosis diagnosis);
    const Diagnosis& diagnosis() const { return m_diagnosis; }
    const DiagnosisFinding* finding(int row) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    /// 0 error, 1 warning, 2 info (sort order)
    static int severityRank(Severity severity);

private:
    Diagnosis m_diagnosis;
};

} // namespace optscope::ui
