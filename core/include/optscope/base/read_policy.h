// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// What a reader may open. A checkpoint's metadata or index can name any path (`../x`, `/etc/x`), and a data file can
// be a symlink out of the folder: by default only files inside the checkpoint the user named are read (statInside in
// the io layer), and the others are findings (path-outside-checkpoint). PyTorch's own loaders read them.

namespace optscope {

/// process-wide, off by default: read data files outside the checkpoint's folder too (the CLI's
/// --allow-outside-reads); set it before opening a checkpoint
void allowReadsOutsideCheckpoint(bool allow);
bool readsOutsideCheckpointAllowed();

} // namespace optscope
