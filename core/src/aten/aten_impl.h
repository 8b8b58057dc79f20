// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal, inside liboptscope_aten.so only: the kernels behind aten_bridge.h's functions.

#include "optscope/tensor/aten_bridge.h"

namespace optscope::aten::impl {

void copyBlock(const ChunkData& src, const std::vector<int64_t>& srcBegin, const std::vector<int64_t>& extent,
    uint8_t* dst, const std::vector<int64_t>& dstShape, const std::vector<int64_t>& dstBegin);
std::vector<double> toDoubles(const uint8_t* data, DType dtype, int64_t n);
void diffBlock(
    const uint8_t* a, DType da, const uint8_t* b, DType db, int64_t n, double rtol, double atol, DiffAccumulator& acc);
void diffHistogram(const uint8_t* a, DType da, const uint8_t* b, DType db, int64_t n, double lo, double hi,
    std::vector<int64_t>& counts);
StatsBlock statsBlock(const uint8_t* data, DType dtype, int64_t n);
void statsHistogram(
    const uint8_t* data, DType dtype, int64_t n, double scale, double lo, double hi, std::vector<double>& counts);
std::vector<double> linspace(double lo, double hi, int64_t n);
bool statsSupported(DType dtype);

} // namespace optscope::aten::impl
