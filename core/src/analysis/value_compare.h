// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// How diff compares two value entries (param_groups hyperparameters, a step kept as a number, a scheduler's state, a
// sparse or quantized tensor kept inert, a tensor inside an object): as Python's == would, with diff's number rule.
//
//   numbers     bit-identical by default, as tensors are: floats by their bits (-0.0 is not 0.0, a NaN equals the
//               same NaN); an int and a float by exact value (2**53 + 1 is not 2.0**53, 10**20 is 1e20); with
//               --rtol/--atol, |a - b| <= atol + rtol * |b| (NaN equals NaN, an infinity only itself). A bool is not
//               a number here: True and 1 differ.
//   containers  the same kind (a list is not a tuple), the same length, item by item; dicts by key, in any order;
//               sets by their items' text
//   objects     the same callable, arguments, state and items
//   tensors and storages inside a value: dtype, shape, strides, offset, and the bytes a tensor's view looks at (a
//               storage's: all of them), read from the file each side names (Entry::valueFile); where no file is
//               known their data is not compared, and the reason says so

#include "optscope/model/checkpoint.h"

#include <string>

namespace optscope {

struct ValueComparison
{
    bool equal = true;
    std::string reason; ///< why not equal ("type int -> str", "values differ", ...), or what was not compared
    bool partly = false; ///< equal as far as compared: the data of tensors inside was not (all) compared
};

ValueComparison compareValueEntries(const Checkpoint& a, const Entry& entryA, const PyValue* valueA,
    const Checkpoint& b, const Entry& entryB, const PyValue* valueB, double rtol, double atol);

} // namespace optscope
