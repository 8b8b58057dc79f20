# SPDX-License-Identifier: GPL-3.0-or-later
"""PyTorch's own way to read a DCP checkpoint's index: FileSystemReader(path).read_metadata().
Prints: tensors chunks wall_seconds peak_rss_kib cpu_seconds, for read_metadata alone (the import of torch is not in
the seconds; it is in the peak RSS)."""
import resource
import sys
import time

from torch.distributed.checkpoint import FileSystemReader

t0, c0 = time.perf_counter(), time.process_time()
md = FileSystemReader(sys.argv[1]).read_metadata()
dt, dc = time.perf_counter() - t0, time.process_time() - c0
chunks = sum(len(getattr(t, "chunks", [])) for t in md.state_dict_metadata.values())
print(len(md.state_dict_metadata), chunks, f"{dt:.3f}", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, f"{dc:.3f}")
