// SPDX-License-Identifier: GPL-3.0-or-later
#include "session/reshardpreview.h"

namespace optscope::ui {

ReshardPreview::ReshardPreview(QObject* parent)
    : QObject(parent)
{ }

void ReshardPreview::setTarget(std::optional<ReshardOptions> target)
{
    m_target = std::move(target);
    m_writtenTo.clear();
    Q_EMIT targetChanged();
}

void ReshardPreview::setWritten(const QString& outDir, const ReshardOptions& options)
{
    if (!m_target || m_target->worldSize != options.worldSize || m_target->layout != options.layout) return;
    m_writtenTo = outDir;
    Q_EMIT writtenChanged();
}

} // namespace optscope::ui
