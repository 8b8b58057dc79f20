// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// a - b of two integers of one width, as diff's kernels take it (the fused one and the ATen one, and the latter's
// histogram): exact in the unsigned type of the width (|a - b| always fits), then rounded once to a double. As a
// difference of doubles, values past 2^53 that differ by little were one number: 2^63 - 1 against 2^63 - 2 read
// "1 of 2 elements differ, max |a - b| = 0".

#include <type_traits>

namespace optscope {

template<typename I> inline double integerDifference(I a, I b)
{
    static_assert(std::is_integral_v<I>, "integers only");
    using U = std::make_unsigned_t<I>;
    const U magnitude = a >= b ? static_cast<U>(static_cast<U>(a) - static_cast<U>(b))
                               : static_cast<U>(static_cast<U>(b) - static_cast<U>(a));
    return a >= b ? static_cast<double>(magnitude) : -static_cast<double>(magnitude);
}

} // namespace optscope
