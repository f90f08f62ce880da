"""A survivor's own exit: rank 2 SIGKILLs itself, ranks 0 and 1 recover; rank 0, which registered an atexit hook
before the failure, then ends with `sys.exit($CODE)` (3 when unset), rank 1 ends well."""

import atexit
import os
import signal
import sys

import torch
import torch.distributed as dist

import hpcdist
from hpcdist.resilience import membership

with hpcdist.init("mpi"):
    me = dist.get_rank()
    if me == 0:
        atexit.register(print, "rank 0: its atexit hook ran", flush=True)
    if me == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        dist.all_reduce(torch.ones(1))
        membership.commit()
    except (hpcdist.RanksLost, RuntimeError) as exc:
        recovery = membership.recover(exc)
        print(f"rank {me}: recovered, {recovery.after} ranks", flush=True)
sys.exit(int(os.environ.get("CODE", "3")) if me == 0 else 0)
