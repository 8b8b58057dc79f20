// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include "optscope/model/checkpoint.h"
#include "optscope/tensor/chunk_reader.h"
#include "optscope/tensor/tensor_stats.h"

#include <optional>
#include <vector>

namespace optscope {

/// The first @p maxElements elements (row-major) of the entry's full tensor as doubles. Throws Error if the data
/// cannot be read.
std::vector<double> readTensorValues(const Checkpoint& checkpoint, const Entry& entry, size_t maxElements);

/// countNonFinite over every element of one chunk as stored (any strides, either byte order), without ATen; the
/// pages of a large contiguous chunk leave this process once counted. Counts (and numel) are of the chunk's logical
/// elements, as torch.isnan(t).sum() counts them.
NonFiniteCounts countNonFinite(const ChunkData& chunk);

/// A single number: a one-element tensor, or a Python int/float/bool value. nullopt for anything else.
std::optional<double> readScalar(const Checkpoint& checkpoint, const Entry& entry);

/// One entry a Python number (int or float), the other a 0-dim tensor holding the same number: one scalar state
/// stored two ways, as an optimizer's step is by Megatron (a number) and by PyTorch (a float32 tensor), which
/// reshard converts (planReshard). Throws Error if the tensor cannot be read.
bool sameNumberStoredTwoWays(const Checkpoint& a, const Entry& ea, const Checkpoint& b, const Entry& eb);

} // namespace optscope
