// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Every algorithm that reads mapped bytes runs through readGuarded: a failure, or success, is checked against the
// files on disk (MappedFile::checkUnchanged), so that a checkpoint rewritten while it is read gives "FILE changed
// while being read (was N bytes, now M)" instead of garbage, a parse error or a result computed from zeros; and
// guardedWrite makes an output's commit wait for the same check, so no output is published from a changed input.

#include "optscope/checkpoint.h"
#include "optscope/error.h"
#include "optscope/output_file.h"

#include <initializer_list>
#include <type_traits>
#include <utility>

namespace optscope {

inline void checkUnchanged(std::initializer_list<const Checkpoint*> checkpoints)
{
    for (const Checkpoint* cp : checkpoints)
        if (cp && cp->files) cp->files->checkUnchanged();
}

template<typename F> auto readGuarded(std::initializer_list<const Checkpoint*> checkpoints, F&& f) -> decltype(f())
{
    try {
        if constexpr (std::is_void_v<decltype(f())>) {
            f();
            checkUnchanged(checkpoints);
        } else {
            auto result = f();
            checkUnchanged(checkpoints);
            return result;
        }
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::Cancelled) throw;
        checkUnchanged(checkpoints); // a changed input explains the failure better than what it caused
        throw;
    }
}

/// @p options with a commit hook that first checks @p checkpoints (keeping any hook already there)
inline WriteOptions guardedWrite(WriteOptions options, std::initializer_list<const Checkpoint*> checkpoints)
{
    std::vector<const Checkpoint*> list(checkpoints);
    auto previous = std::move(options.beforeCommit);
    options.beforeCommit = [list, previous] {
        for (const Checkpoint* cp : list)
            if (cp && cp->files) cp->files->checkUnchanged();
        if (previous) previous();
    };
    return options;
}

} // namespace optscope
