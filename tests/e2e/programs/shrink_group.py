"""torch's own shrink API on hpcdist's mpi backend: a rank dies after a barrier, the others call dist.shrink_group.

argv: scenario, output directory. Each rank that finishes writes rank<start>.json.
- `world` (3 ranks): rank 2 dies. Ranks 0 and 1 catch the all_reduce's error, shrink the subgroup [0, 1, 2] by its
  rank 2 and all_reduce on it, then shrink the default group by [2] and all_reduce on it, then make a new mpi
  subgroup and a gloo group on the shrunk world (their store is the store over MPI, moved to the survivors), and
  train one DistributedDataParallel step on it.
- `refused` (4 ranks): rank 2 dies while rank 3 waits. Ranks 0 and 1 ask for [2, 3] while rank 3 still runs, then
  (rank 3 killed) for [2] alone, then for [2, 3]: the first two are refused, each with its own error; the third
  shrinks.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import hpcdist

scenario, out = sys.argv[1], Path(sys.argv[2])


def total(group: dist.ProcessGroup | None = None) -> float:
    """The all_reduce over `group` of this rank's start rank + 1."""
    value = torch.tensor([float(me + 1)])
    dist.all_reduce(value, group=group)
    return value.item()


def refused(ranks: list[int]) -> list[str]:
    """What shrink_group(ranks) of the default group raised: [type, text] (a failure if it did not raise)."""
    try:
        dist.shrink_group(ranks)
    except (ValueError, RuntimeError) as exc:
        return [type(exc).__name__, str(exc)]
    raise AssertionError(f"shrink_group({ranks}) was not refused")


def ddp_step() -> list[object]:
    """One DistributedDataParallel step on the default group, each rank on its own input: its backend's name as torch
    registered it, and the parameters after the step (equal on every rank)."""
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.full((2, 4), float(me + 1))).sum().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    return [
        dist.get_backend(),
        [round(p, 6) for p in torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()],
    ]


def wait_for(path: Path) -> None:
    """Wait (up to 120 s) until `path` exists."""
    deadline = time.monotonic() + 120
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {me} waited 120 s for {path}")
        time.sleep(0.01)


with hpcdist.init("mpi"):
    me = dist.get_rank()
    sub = dist.new_group([0, 1, 2])
    dist.barrier()
    if me == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    if scenario == "refused" and me == 3:  # alive, in no call, until ranks 0 and 1 were refused for excluding it
        wait_for(out / "alive-refused")
        os.kill(os.getpid(), signal.SIGKILL)
    record: dict[str, object] = {}
    try:
        total(sub if scenario == "world" else None)
        raise AssertionError("the all_reduce with a dead rank did not raise")
    except dist.DistError as exc:  # RanksLostError (Python backend) or DistBackendError (compiled), both DistErrors
        record["error"] = type(exc).__name__
    if scenario == "world":
        small = dist.shrink_group([2], group=sub)
        record["sub"] = [small.size(), total(small)]
        world = dist.shrink_group([2])
        record["world"] = [world.size(), dist.get_world_size(), dist.get_rank(), total(world), total()]
        record["new_group"] = total(dist.new_group([0, 1]))
        record["gloo"] = total(dist.new_group([0, 1], backend="gloo"))
        record["ddp"] = ddp_step()
    else:
        record["alive"] = refused([2, 3])
        if me == 0:
            (out / "alive-refused").touch()
        record["missing"] = refused([2])
        world = dist.shrink_group([2, 3])
        record["world"] = [world.size(), total(world)]
    (out / f"rank{me}.json").write_text(json.dumps(record))
