"""DDP on BACKEND in which rank 1 gets stuck at step 3: STUCK=before_backward, in_backward (a gradient hook that
sleeps) or in_step (an optimizer step pre-hook that sleeps). Rank 1 prints `stuck at <wall clock>` first."""

import os
import sys
import time

import torch
import torch.distributed as dist

import hpcdist

STUCK = os.environ["STUCK"]


def stall(*_: object) -> None:
    print(f"stuck at {time.time():.3f}", file=sys.stderr, flush=True)
    time.sleep(300)  # the behaviour under test: stuck, until the job is ended


def stall_in_backward(grad: torch.Tensor) -> torch.Tensor:
    stall()
    return grad


with hpcdist.init(os.environ.get("BACKEND", "gloo")) as session:
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        stuck = session.rank == 1 and step == 3
        if stuck and STUCK == "in_backward":
            model.module.weight.register_hook(stall_in_backward)
        if stuck and STUCK == "in_step":
            optimizer.register_step_pre_hook(stall)
        optimizer.zero_grad()
        loss = model(torch.ones(4, 8)).sum()
        if stuck and STUCK == "before_backward":
            stall()
        loss.backward()
        optimizer.step()
    dist.barrier()
