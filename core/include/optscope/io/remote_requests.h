// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The process's remote requests as a whole (io/remote_object.cpp), apart from io/storage.h's locations: what the
// app does with them when it closes.

namespace optscope {

/// The process is closing (the app's window is gone): every remote request in flight is given up at once and every
/// later one fails at once, with an error saying so. Threads still reading remote data then end in about a second,
/// where the exit would otherwise wait out their requests (a stalled server: the stall timeout, retried). For good.
void abandonRemoteRequests();

} // namespace optscope
