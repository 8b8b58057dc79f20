// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/analysis/reshard.h"

#include <QObject>
#include <QString>

#include <optional>

namespace optscope::ui {

/// The reshard the app previews, apart from any widget (as the comparison is): the target layout the Reshard panel's
/// options describe while its "Preview layout" is on (none: each tensor as it is), and the folder that layout was last
/// written to. The Reshard panel sets it, the Shard layout panel draws it; neither talks to the other.
class ReshardPreview : public QObject
{
    Q_OBJECT
public:
    explicit ReshardPreview(QObject* parent = nullptr);

    /// the previewed target layout; nullopt when nothing is previewed
    const std::optional<ReshardOptions>& target() const { return m_target; }
    /// where the previewed layout was written ("Reshard and save"); empty while nothing of it is written
    QString writtenTo() const { return m_writtenTo; }

    /// previews @p target (nullopt: stops); what was written of an earlier target no longer counts
    void setTarget(std::optional<ReshardOptions> target);
    /// @p outDir was written in the layout @p options describe: recorded when that is the previewed layout
    void setWritten(const QString& outDir, const ReshardOptions& options);

Q_SIGNALS:
    /// the previewed target changed (on, off, or other options)
    void targetChanged();
    /// writtenTo() changed
    void writtenChanged();

private:
    std::optional<ReshardOptions> m_target;
    QString m_writtenTo;
};

} // namespace optscope::ui
