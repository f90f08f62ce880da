"""The last rank is killed before hpcdist.init("gloo"); the others would make torch's group and all_reduce."""

from __future__ import annotations

import os
import signal

import hpcdist

if os.environ["RANK"] == str(int(os.environ["WORLD_SIZE"]) - 1):
    os.kill(os.getpid(), signal.SIGKILL)
with hpcdist.init("gloo"):
    import torch
    import torch.distributed as dist

    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"sum {total.item():g}")
