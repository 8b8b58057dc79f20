// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/base/progress.h"
#include "optscope/base/error.h"

namespace optscope {

void Progress::checkCancelled() const
{
    if (isCancelled()) throw Error(ErrorKind::Cancelled, {}, "cancelled");
}

namespace {
thread_local const CancelScope* t_innermost = nullptr;
}

CancelScope::CancelScope(std::function<bool()> cancelled)
    : m_cancelled(std::move(cancelled))
    , m_outer(t_innermost)
{
    t_innermost = this;
}

CancelScope::~CancelScope()
{
    t_innermost = m_outer;
}

std::function<bool()> CancelScope::current()
{
    return t_innermost ? t_innermost->m_cancelled : std::function<bool()> {};
}

bool CancelScope::cancelled()
{
    return t_innermost && t_innermost->m_cancelled && t_innermost->m_cancelled();
}

void CancelScope::check(const std::string& location)
{
    if (cancelled()) throw Error(ErrorKind::Cancelled, location, "cancelled");
}

} // namespace optscope
