// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/optim/fqn_normalizer.h"

namespace optscope {

const std::vector<std::string>& wrapperPrefixes()
{
    static const std::vector<std::string> p
        = {"module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_fpw_module."};
    return p;
}

bool isKnownBufferName(const std::string& fqn)
{
    const auto dot = fqn.rfind('.');
    const std::string leaf = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
    return leaf == "running_mean" || leaf == "running_var" || leaf == "num_batches_tracked";
}

NormalizedFqn normalizeFqn(const std::string& fqn)
{
    NormalizedFqn n;
    std::string s = fqn;
    // DDP's "module." only ever leads: the root is the DDP wrapper, or the module torch.compile wraps
    // (torch.compile(DDP(model)) names "_orig_mod.module.x"), so it is stripped again once "_orig_mod." is gone
    auto stripLeadingModule = [&] {
        while (s.rfind("module.", 0) == 0) {
            s.erase(0, 7);
            n.stripped.push_back("module.");
        }
    };
    stripLeadingModule();
    // the others wrap submodules too: remove them wherever a segment starts with them
    for (const char* prefix : {"_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_fpw_module."}) {
        const std::string p(prefix);
        size_t pos = 0;
        while ((pos = s.find(p, pos)) != std::string::npos) {
            if (pos == 0 || s[pos - 1] == '.') {
                s.erase(pos, p.size());
                n.stripped.push_back(p);
            } else {
                pos += p.size();
            }
        }
    }
    stripLeadingModule();
    n.fqn = s;
    return n;
}

} // namespace optscope
