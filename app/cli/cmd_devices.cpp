// SPDX-License-Identifier: GPL-3.0-or-later
// optscope-cli devices [--json]: the GPUs the core can use, asked at run time
#include "cli_common.h"

#include "optscope/gpu/gpu_devices.h"

#include <iostream>
#include <nlohmann/json.hpp>

namespace optscope::cli {

int runDevices(const std::vector<std::string>& argv)
{
    const Args args(argv, {{"--json", false, "print JSON"}, {"--help", false, "show this help", "-h"}});
    if (args.has("--help")) {
        std::cout << "usage: optscope-cli devices [--json]\n";
        return ExitOk;
    }
    if (!args.positional().empty()) throw UsageError("devices takes no arguments");
    const GpuInfo info = queryGpus();
    if (args.has("--json")) {
        nlohmann::ordered_json j;
        j["compiled_with_cuda"] = info.compiledWithCuda;
        j["status"] = info.status;
        j["nccl"] = info.ncclAvailable ? nlohmann::ordered_json(info.ncclVersion) : nlohmann::ordered_json(nullptr);
        j["devices"] = nlohmann::ordered_json::array();
        for (const auto& d : info.devices)
            j["devices"].push_back({{"index", d.index}, {"name", d.name}, {"memory_bytes", d.totalMemory},
                {"compute_capability", std::to_string(d.computeMajor) + "." + std::to_string(d.computeMinor)}});
        std::cout << j.dump(2) << std::endl;
        return ExitOk;
    }
    std::cout << "cpu: always available\n";
    std::cout << "cuda: " << info.status << (info.ncclAvailable ? ", NCCL " + info.ncclVersion : "") << "\n";
    for (const auto& d : info.devices)
        std::cout << "  cuda:" << d.index << "  " << d.name << "  " << humanBytes(d.totalMemory) << "  sm_"
                  << d.computeMajor << d.computeMinor << "\n";
    return ExitOk;
}

} // namespace optscope::cli
