// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "plots/qcp.h"

#include "optscope/analysis/diff_report.h"

#include <QStringList>

namespace optscope::ui {

/// max |Δ| per key × rank of a DiffReport as a colour map; equal cells left blank. Shows the keys with the largest
/// differences first, as many as can each have a label at the widget's height (at most MaxKeys). Colours are
/// normalised per state kind by default (each row against the largest max |Δ| of keys with the same last name:
/// `step` differs by 1 where moments differ by 1e-6, and would otherwise leave every moment the palest colour), or
/// on one logarithmic scale. Hovering a cell says its key, rank and numbers.
class DiffHeatmap : public QCustomPlot
{
    Q_OBJECT
public:
    static constexpr int MaxKeys = 40;
    enum class Normalization { PerKind, LogScale };

    explicit DiffHeatmap(QWidget* parent = nullptr);

    void setReport(const DiffReport& report);
    /// the keys shown, top row first
    QStringList keys() const { return m_keys; }
    int rankCount() const { return m_ranks; }
    /// max |Δ| at (key row, rank column); NaN when equal or absent
    double cell(int keyRow, int rankColumn) const;
    /// the colour value drawn there: a fraction of the kind's largest (PerKind) or max |Δ| itself (LogScale)
    double colourValue(int keyRow, int rankColumn) const;
    void setNormalization(Normalization normalization);
    Normalization normalization() const { return m_normalization; }
    /// the labels of the rows, top first: one per row
    QStringList rowLabels() const { return m_labels; }
    /// the tooltip of a cell: key, rank, max |Δ|, differing elements
    QString toolTipAt(int keyRow, int rankColumn) const;
    /// the title above the map: the prefix the labels leave out and how many keys are shown of how many
    QString titleText() const;

Q_SIGNALS:
    void keyClicked(const QString& key);

protected:
    void resizeEvent(QResizeEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;

private:
    QCPColorMap* m_map;
    QCPColorScale* m_scale;
    QCPItemText* m_message;
    QCPTextElement* m_title;
    int m_titleExtraLines = 0; ///< lines of the title past the first, at the last layout
    bool m_relayout = false;
    QStringList m_keys;
    QStringList m_labels;
    void layoutRows();

    std::vector<const DiffEntry*> m_rows; ///< into m_top
    std::vector<int> m_rankIds; ///< rank of each column (empty: one column for the whole tensor)
    std::vector<double> m_values; ///< max |Δ| per cell, row-major; NaN where equal
    Normalization m_normalization = Normalization::PerKind;
    /// the tensors the map can show (MaxKeys, differences first), copied without their histograms: a report of
    /// 100k keys is not copied whole (the Diff panel's model holds it)
    std::vector<DiffEntry> m_top;
    size_t m_candidates = 0; ///< tensors compared
    size_t m_differing = 0;
    bool m_anyEntry = false; ///< the report had entries at all
    int m_ranks = 0;
};

} // namespace optscope::ui
