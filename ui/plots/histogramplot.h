// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "plots/qcp.h"

#include <cstdint>
#include <vector>

namespace optscope::ui {

/// A histogram (bars over bin edges) with an optional logarithmic count axis and a centred message when empty.
class HistogramPlot : public QCustomPlot
{
    Q_OBJECT
public:
    explicit HistogramPlot(QWidget* parent = nullptr);

    void setHistogram(const std::vector<double>& edges, const std::vector<int64_t>& counts, const QString& xLabel);
    /// no data: show @p message instead
    void clearHistogram(const QString& message = {});
    void setLogScale(bool log);
    bool logScale() const { return m_log; }
    int binCount() const { return static_cast<int>(m_counts.size()); }
    int64_t totalCount() const;
    /// the message shown instead of data (empty while a histogram is shown)
    QString message() const;

private:
    void rescale();

    QCPBars* m_bars;
    QCPItemText* m_message;
    std::vector<double> m_edges;
    std::vector<int64_t> m_counts;
    bool m_log = false;
};

} // namespace optscope::ui
