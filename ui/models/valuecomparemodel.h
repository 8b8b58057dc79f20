// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "models/valuespreviewmodel.h"

#include <QAbstractTableModel>

#include <vector>

namespace optscope::ui {

/// A | B | Δ of one key's values side by side: the same window of both tensors (ValuesPreviewModel::read), one row
/// per element. Elements outside the comparison's tolerance (|a − b| > atol + rtol·|b|; bitwise when both are 0, NaN
/// equal to NaN) are marked, and can be the only rows shown.
class ValueCompareModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Columns { IndexColumn, AColumn, BColumn, DeltaColumn, ColumnCount };
    enum Roles { DiffersRole = Qt::UserRole, SortRole };

    explicit ValueCompareModel(QObject* parent = nullptr);

    /// both windows must come from ValuesPreviewModel::read with the same offsets; elements past the shorter are left
    /// out
    void setData(ValuesPreviewModel::Slice a, ValuesPreviewModel::Slice b, double rtol, double atol);
    void clear();
    void setOnlyDiffering(bool on);
    /// elements of the window that differ
    int differingCount() const { return m_differing; }
    /// elements of the window
    int elementCount() const { return static_cast<int>(m_differs.size()); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    void rebuildRows();
    QString indexText(size_t element) const;

    ValuesPreviewModel::Slice m_a, m_b;
    std::vector<char> m_differs; ///< per element of the window
    std::vector<size_t> m_rows; ///< elements shown
    int m_differing = 0;
    bool m_onlyDiffering = false;
};

} // namespace optscope::ui
