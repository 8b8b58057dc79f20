// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/read_guard.h"

namespace optscope {

namespace {

void checkAll(const std::vector<const Checkpoint*>& checkpoints)
{
    for (const Checkpoint* cp : checkpoints)
        if (cp && cp->files) cp->files->checkUnchanged();
}

} // namespace

void runReadGuarded(const std::vector<const Checkpoint*>& checkpoints, const std::function<void()>& read)
{
    try {
        read();
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::Cancelled) throw;
        checkAll(checkpoints);
        throw;
    }
    checkAll(checkpoints);
}

WriteOptions guardedWrite(WriteOptions options, const std::vector<const Checkpoint*>& checkpoints)
{
    for (const Checkpoint* cp : checkpoints) {
        if (!cp) continue;
        options.inputs.push_back(cp->path);
        if (cp->files)
            for (auto& f : cp->files->knownFiles())
                options.inputs.push_back(std::move(f));
    }
    auto previous = std::move(options.beforeCommit);
    options.beforeCommit = [checkpoints, previous] {
        checkAll(checkpoints);
        if (previous) previous();
    };
    return options;
}

} // namespace optscope
