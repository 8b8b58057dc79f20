// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "qcp.h"

#include "optscope/diff_report.h"

#include <QStringList>

namespace optscope::ui {

/// max |Δ| per key × rank of a DiffReport as a colour map (log colour scale; equal cells left blank). Shows the keys
/// with the largest differences first, at most MaxKeys of them.
class DiffHeatmap : public QCustomPlot
{
    Q_OBJECT
public:
    static constexpr int MaxKeys = 40;

    explicit DiffHeatmap(QWidget* parent = nullptr);

    void setReport(const DiffReport& report);
    /// the keys shown, top row first
    QStringList keys() const { return m_keys; }
    int rankCount() const { return m_ranks; }
    /// the value drawn at (key row, rank column); NaN when equal or absent
    double cell(int keyRow, int rankColumn) const;

Q_SIGNALS:
    void keyClicked(const QString& key);

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    QCPColorMap* m_map;
    QCPColorScale* m_scale;
    QCPItemText* m_message;
    QStringList m_keys;
    DiffReport m_report;
    int m_ranks = 0;
};

} // namespace optscope::ui
