# SPDX-License-Identifier: GPL-3.0-or-later
"""PyTorch's own way to read a DCP checkpoint's index: FileSystemReader(path).read_metadata().
Prints: tensors chunks seconds_for_read_metadata peak_rss_kib (the import of torch is not in the seconds)."""
import resource
import sys
import time

from torch.distributed.checkpoint import FileSystemReader

t0 = time.perf_counter()
md = FileSystemReader(sys.argv[1]).read_metadata()
dt = time.perf_counter() - t0
chunks = sum(len(getattr(t, "chunks", [])) for t in md.state_dict_metadata.values())
print(len(md.state_dict_metadata), chunks, f"{dt:.3f}", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
