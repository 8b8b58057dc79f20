// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/fault_injection.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace optscope {

void pausePoint(const char* name)
{
    static const char* const at = std::getenv("OPTSCOPE_PAUSE_AT");
    static const char* const fifo = std::getenv("OPTSCOPE_PAUSE_FIFO");
    static std::atomic<bool> done {false};
    if (!at || !fifo || std::strcmp(at, name) != 0 || done.exchange(true)) return;
    {
        std::ofstream out(std::string(fifo) + ".out");
        out << name << "\n";
    }
    std::ifstream in(std::string(fifo) + ".in");
    std::string line;
    std::getline(in, line);
}

} // namespace optscope
