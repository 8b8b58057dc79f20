// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/diagnosis.h"

#include <QAbstractItemModel>

#include <vector>

namespace optscope::ui {

/// The findings of a Diagnosis: severity, code, optimizer and message. Findings alike (groupAlikeFindings: 1,024
/// ranks' unreadable files) are one row, "×1,024" with the ranks named, whose children are the findings.
class DiagnosisModel : public QAbstractItemModel
{
    Q_OBJECT
public:
    enum Columns { SeverityColumn, CodeColumn, OptimizerColumn, MessageColumn, ColumnCount };
    enum Roles { SortRole = Qt::UserRole, SeverityRole, FixableRole };

    explicit DiagnosisModel(QObject* parent = nullptr);

    void setData(Diagnosis diagnosis);
    const Diagnosis& diagnosis() const { return m_diagnosis; }
    /// the finding of a row; a group's row gives its first finding
    const DiagnosisFinding* finding(const QModelIndex& index) const;
    /// the findings a row stands for: 1, or a group's size
    int findingCount(const QModelIndex& index) const;

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    /// 0 error, 1 warning, 2 info (sort order)
    static int severityRank(Severity severity);

private:
    const std::vector<size_t>* group(const QModelIndex& index) const;

    Diagnosis m_diagnosis;
    std::vector<std::vector<size_t>> m_groups; ///< top-level rows: indices into the findings
    std::vector<QString> m_groupRanks; ///< per top-level row: the ranks its group names ("r0-1023"), or empty
};

} // namespace optscope::ui
