"""Under --on-failure shrink, rank 2 sleeps SLEEP seconds in Python before the second all_reduce; every rank writes
OUT/rank<N>.txt with what its second all_reduce did (`sum 4`, or `raised <type>; sum 3` after the recovery)."""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

import hpcdist
from hpcdist.resilience import membership

with hpcdist.init(os.environ.get("BACKEND", "gloo")) as session:
    out = Path(os.environ["OUT"], f"rank{session.rank}.txt")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    if session.rank == 2:
        time.sleep(float(os.environ["SLEEP"]))  # the behaviour under test: hung, past HPCDIST_TIMEOUT
    tensor.fill_(1)
    raised = ""
    try:
        dist.all_reduce(tensor)
    except (hpcdist.RanksLost, RuntimeError) as exc:  # the hung rank ended itself: the survivors shrink
        raised = f"raised {type(exc).__name__}; "
        recovery = membership.recover(exc)
        if recovery.rank == 0:
            print(recovery.line(), flush=True)
        tensor.fill_(1)
        dist.all_reduce(tensor)
    out.write_text(f"{raised}sum {tensor.item():g}\n")
