// SPDX-License-Identifier: GPL-3.0-or-later
// The fused diff kernel compiled for AVX2 (this file only gets -mavx2); diff_kernel.cpp calls it when the CPU has it.
#define OPTSCOPE_DIFF_KERNEL_NS avx2
#include "optscope/analysis/diff_kernel_impl.h"
