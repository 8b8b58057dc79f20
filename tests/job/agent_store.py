# SPDX-License-Identifier: GPL-3.0-or-later
"""The store torchrun >= 2.x (its elastic agent) serves to its workers, run in the PyTorch chroot by job_test.py:

    agent_store.py PORT      a TCPStore server of PyTorch's own (libuv in 2.4+) on 127.0.0.1:PORT until stdin closes

The workers then get TORCHELASTIC_USE_AGENT_STORE=True and connect to it as clients, keys under
/worker/attempt_<TORCHELASTIC_RESTART_COUNT>/, as init_process_group(env://) does under torchrun.
"""
import sys
from datetime import timedelta

import torch.distributed as dist

# (Debian's PyTorch is built without libuv: the classic server, which torchrun then uses too)
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), None, True, timedelta(seconds=120), wait_for_workers=False,
                     use_libuv=False)
print("ready", flush=True)
sys.stdin.read()
