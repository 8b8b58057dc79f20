// SPDX-License-Identifier: GPL-3.0-or-later
// The entry point of liboptscope_aten.so: the table of kernels the core calls through (aten_loader.cpp).
#include "optscope/aten/aten_impl.h"

extern "C" __attribute__((visibility("default"))) const optscope::aten::Ops* optscope_aten_ops_v1()
{
    namespace impl = optscope::aten::impl;
    static const optscope::aten::Ops table {optscope::aten::kOpsAbiVersion, &impl::copyBlock, &impl::toDoubles,
        &impl::diffBlock, &impl::diffHistogram, &impl::statsBlock, &impl::statsHistogram, &impl::linspace,
        &impl::statsSupported};
    return &table;
}
