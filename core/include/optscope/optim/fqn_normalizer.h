// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <string>
#include <vector>

namespace optscope {

/// The prefixes module wrappers put into parameter FQNs, and what stripping them gives.
///  - "module."                      DDP / DataParallel (leading, possibly repeated)
///  - "_orig_mod."                   torch.compile (OptimizedModule; any segment)
///  - "_fsdp_wrapped_module."        FSDP1 (any segment)
///  - "_checkpoint_wrapped_module."  activation checkpointing wrapper (any segment)
///  - "_fpw_module."                 FSDP 1.12/1.13 FlattenParamsWrapper (any segment)
struct NormalizedFqn
{
    std::string fqn; ///< with every wrapper prefix removed
    std::vector<std::string> stripped; ///< the prefixes removed, in order ("module.", "_orig_mod.", ...)
};

NormalizedFqn normalizeFqn(const std::string& fqn);

/// the wrapper prefixes normalizeFqn knows, in the order they are listed above
const std::vector<std::string>& wrapperPrefixes();

/// Whether an FQN names one of the well-known module buffers (BatchNorm running statistics), which live in a
/// model state dict but never have optimizer state.
bool isKnownBufferName(const std::string& fqn);

} // namespace optscope
