// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Finds and opens one of the core's own shared libraries (liboptscope_aten.so, liboptscope_c10d.so: the code that
// links libtorch, loaded only by runs that need it) and returns its entry table.

#include <string>
#include <vector>

namespace optscope {

/// dlopen()s the first of: $ENV_VAR, next to the executable, ../lib/optscope/ beside it, @p builtInPaths (the build
/// tree, the install prefix), then @p fileName on the dynamic linker's path; hands @p entrySymbol's address to
/// @p enter, which calls it as the function type it is (a call through another type is undefined) and returns its
/// table, or nullptr with why; keeps that library loaded for the life of the process. nullptr when none was
/// found; @p tried then lists each candidate and why it was refused.
const void* openCoreLibrary(const std::string& fileName, const char* envVar,
    const std::vector<std::string>& builtInPaths, const char* entrySymbol,
    const void* (*enter)(void* symbol, std::string& why), std::string& tried);

} // namespace optscope
