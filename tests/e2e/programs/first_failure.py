"""Rank FAIL_RANK ends on its own after an all_reduce (HOW: raise, or exit 0) while the others go on to the next:
it ends once each of them said it goes there (markers.py, in $MARKERS).

BACKEND (gloo or mpi) is the process group's; API=init starts it with hpcdist.init, otherwise init_process_group.
"""

import os
import sys

import torch
import torch.distributed as dist
from markers import mark, wait_for_marks

rank = int(os.environ["RANK"])
if os.environ.get("API") == "init":
    import hpcdist

    hpcdist.init(backend=os.environ["BACKEND"])
else:
    dist.init_process_group(os.environ["BACKEND"])
tensor = torch.ones(4)
dist.all_reduce(tensor)
if rank == int(os.environ["FAIL_RANK"]):
    wait_for_marks([f"second-{r}" for r in range(dist.get_world_size()) if r != rank], f"rank {rank}")
    if os.environ["HOW"] == "raise":
        raise ValueError(f"NaN in the gradients on rank {rank}")
    sys.exit(0)
mark(f"second-{rank}")
dist.all_reduce(tensor)
print(f"rank {rank} finished", flush=True)
