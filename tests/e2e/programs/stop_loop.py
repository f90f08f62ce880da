"""The README's training loop with hpcdist.StopAtStepBoundary: a running sum, checkpointed when preempted.

PREEMPT_RANK (if set) sends itself SIGTERM after step 10, as Slurm would; every rank stops at the same step.
"""

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import hpcdist

STEPS = 40
path = Path(sys.argv[1])
with hpcdist.init("gloo") as session, hpcdist.StopAtStepBoundary(every=4) as stop:
    state: dict[str, Any] = torch.load(path) if path.exists() else {"step": 0, "total": torch.zeros(1)}
    start, total = state["step"], state["total"]
    print(f"rank {session.rank}: attempt {stop.restart_count}, starting at step {start}", flush=True)
    for step in range(start, STEPS):
        x = torch.tensor([float(step * (session.rank + 1))])
        dist.all_reduce(x)
        total += x
        if step == 10 and str(session.rank) == os.environ.get("PREEMPT_RANK"):
            os.kill(os.getpid(), signal.SIGTERM)
        if stop.should_stop(step):
            if session.rank == 0:
                torch.save({"step": step + 1, "total": total}, path)
            dist.barrier()
            print(f"rank {session.rank}: stopped after step {step} ({stop.signal_name})", flush=True)
            stop.exit()
    print(f"rank {session.rank}: total {total.item():.0f}", flush=True)
