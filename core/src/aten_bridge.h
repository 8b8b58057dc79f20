// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Internal seam to ATen (libtorch's tensor library). Only aten_*.cpp files include torch headers; everything else
// in the core calls these functions with plain pointers and shapes.

#include "optscope/chunk_reader.h"

#include <cstdint>
#include <vector>

namespace optscope::aten {

/// Copies the block [srcBegin, srcBegin + extent) of a chunk (coordinates inside the chunk) into the dense
/// row-major array @p dst of shape @p dstShape at @p dstBegin, converting to little-endian. An at::Tensor view over
/// the mapped bytes (from_blob) is narrowed and copy_'d; element types are moved as bytes, so every dtype works.
void copyBlock(const ChunkData& src, const std::vector<int64_t>& srcBegin, const std::vector<int64_t>& extent,
    uint8_t* dst, const std::vector<int64_t>& dstShape, const std::vector<int64_t>& dstBegin);

} // namespace optscope::aten

namespace optscope::aten {

/// @p n elements of @p dtype at @p data (dense, little-endian) as doubles: ATen's to(kDouble) for the types it has
/// in every supported libtorch version, exact decoding for float8 and uint16-64 otherwise. Complex: the real part.
std::vector<double> toDoubles(const uint8_t* data, DType dtype, int64_t n);

} // namespace optscope::aten
