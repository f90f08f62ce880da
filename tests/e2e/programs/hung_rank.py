"""Under --on-failure shrink, rank 2 sleeps SLEEP seconds in Python before the second all_reduce; every rank writes
OUT/rank<N>.txt with what its second all_reduce did (`raised <type>` or `sum <value>`)."""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import hpcdist

with hpcdist.init(os.environ.get("BACKEND", "gloo")) as session:
    out = Path(os.environ["OUT"], f"rank{session.rank}.txt")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    if session.rank == 2:
        time.sleep(float(os.environ["SLEEP"]))
    tensor.fill_(1)
    try:
        dist.all_reduce(tensor)
        out.write_text(f"sum {tensor.item():g}\n")
    except RuntimeError as exc:  # the hung rank ended: the survivors' call fails (DistBackendError)
        out.write_text(f"raised {type(exc).__name__}\n")
        print(f"rank {session.rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(0)  # nothing to recover with yet: leave without the group's teardown
