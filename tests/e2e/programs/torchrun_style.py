"""An unmodified torchrun-style program: torch's env:// rendezvous from the variables torchrun would set, one
all_reduce of rank + 1, then its place in the job as one JSON line. With --hpcdist-init, hpcdist.init() instead."""

import json
import os
import sys

import torch
import torch.distributed as dist

if "--hpcdist-init" in sys.argv:
    import hpcdist

    hpcdist.init(backend="gloo")
else:
    dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
place = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")}
print(json.dumps({**place, "sum": total.item()}), flush=True)
dist.destroy_process_group()
