// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer entry point; OPTSCOPE_FUZZ_TARGET names the harness (fuzzPickle, fuzzZip, fuzzTorchSave, fuzzDcp,
// fuzzSafetensors).
#include "fuzz_targets.h"

#include <cstdlib>

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    // ATen (tensor statistics) would start a thread pool per core; one thread keeps executions comparable
    setenv("OMP_NUM_THREADS", "1", 0);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    optscope::fuzz::OPTSCOPE_FUZZ_TARGET(data, size);
    return 0;
}
