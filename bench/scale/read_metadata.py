# SPDX-License-Identifier: GPL-3.0-or-later
"""PyTorch's own way to read a DCP checkpoint's index: FileSystemReader(path).read_metadata()."""
import sys
from torch.distributed.checkpoint import FileSystemReader
md = FileSystemReader(sys.argv[1]).read_metadata()
print(len(md.state_dict_metadata), sum(len(getattr(t, "chunks", [])) for t in md.state_dict_metadata.values()))
