// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/base/core_library.h"

#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <unistd.h>

namespace optscope {

namespace {

std::string executableDir()
{
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return {};
    buf[n] = '\0';
    return std::filesystem::path(buf).parent_path().string();
}

} // namespace

const void* openCoreLibrary(const std::string& fileName, const char* envVar,
    const std::vector<std::string>& builtInPaths, const char* entrySymbol,
    const void* (*enter)(void* symbol, std::string& why), std::string& tried)
{
    std::vector<std::string> candidates;
    if (const char* env = std::getenv(envVar)) candidates.emplace_back(env);
    const std::string exe = executableDir();
    if (!exe.empty()) {
        candidates.push_back(exe + "/" + fileName); // next to the binary
        candidates.push_back(exe + "/../lib/optscope/" + fileName); // installed: bin/ and lib/optscope/
    }
    candidates.insert(candidates.end(), builtInPaths.begin(), builtInPaths.end());
    candidates.push_back(fileName); // the dynamic linker's search path
    for (const auto& c : candidates) {
        std::error_code ec;
        if (c.find('/') != std::string::npos && !std::filesystem::exists(c, ec)) continue;
        void* lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            tried += "\n  " + c + ": " + ::dlerror();
            continue;
        }
        void* symbol = ::dlsym(lib, entrySymbol);
        std::string why = "no " + std::string(entrySymbol);
        if (const void* table = symbol ? enter(symbol, why) : nullptr) return table; // stays loaded
        tried += "\n  " + c + ": " + why;
        ::dlclose(lib);
    }
    return nullptr;
}

} // namespace optscope
