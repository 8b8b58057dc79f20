// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Every algorithm that reads mapped bytes runs through readGuarded: a failure, or success, is checked against the
// files on disk (MappedFile::checkUnchanged), so that a checkpoint rewritten while it is read gives "FILE changed
// while being read (was N bytes, now M)" instead of garbage, a parse error or a result computed from zeros; and
// guardedWrite makes an output's commit wait for the same check, so no output is published from a changed input.

#include "optscope/base/error.h"
#include "optscope/io/output_file.h"
#include "optscope/model/checkpoint.h"

#include <functional>
#include <initializer_list>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace optscope {

/// runs @p read, then checks @p checkpoints' files; on an Error (not cancellation) checks them first (a changed input
/// explains the failure better than what it caused), then rethrows
void runReadGuarded(const std::vector<const Checkpoint*>& checkpoints, const std::function<void()>& read);

template<typename F> auto readGuarded(std::initializer_list<const Checkpoint*> checkpoints, F&& f) -> decltype(f())
{
    if constexpr (std::is_void_v<decltype(f())>) {
        runReadGuarded(checkpoints, f);
    } else {
        std::optional<decltype(f())> result;
        runReadGuarded(checkpoints, [&] { result.emplace(f()); });
        return std::move(*result);
    }
}

/// @p options with a commit hook that first checks @p checkpoints (keeping any hook already there)
WriteOptions guardedWrite(WriteOptions options, const std::vector<const Checkpoint*>& checkpoints);

} // namespace optscope
