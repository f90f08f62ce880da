"""A subgroup (gloo, or the mpi backend's own: argv[2]) under the mpi default group, waiting on a survivor that
left for the recovery.

Rank 3 dies. Ranks 1 and 2 meet it in a world all_reduce and recover; rank 0 is by then in an all_reduce of the gloo
subgroup [0, 1], waiting for rank 1. Each survivor then all_reduces its start rank + 1 on the shrunk world and
10 ** its start rank on the subgroup remade over its survivors, and writes rank<start>.json: what its first call
raised, and both sums.
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
from hpcdist.resilience import membership

out = Path(sys.argv[1])
with hpcdist.init("mpi"):
    me = dist.get_rank()
    sub = dist.new_group([0, 1], backend=sys.argv[2])
    membership.commit()  # the ranks agree whether a gloo group exists: then MPI watches for failures from here on
    if me == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    value = torch.tensor([float(me + 1)])
    try:
        if me == 0:
            time.sleep(0.5)  # the behaviour: rank 0 is in the subgroup's call as rank 1 leaves for the recovery
            dist.all_reduce(value, group=sub)
        else:
            dist.all_reduce(value)
        raise AssertionError("a call with a lost rank did not raise")
    except (hpcdist.RanksLost, RuntimeError) as exc:  # gloo raises a plain RuntimeError, the mpi backend a DistError
        lost = membership.failure_of(exc)
        raised = [type(exc).__name__, lost and list(lost.ranks)]
        recovery = membership.recover(exc)
    world = torch.tensor([float(me + 1)])
    dist.all_reduce(world)
    rebuilt = recovery.groups.get(sub, dist.GroupMember.NON_GROUP_MEMBER)
    part = torch.tensor([10.0**me])
    if rebuilt != dist.GroupMember.NON_GROUP_MEMBER:
        dist.all_reduce(part, group=rebuilt)
    record = {"raised": raised, "world": world.item(), "sub": part.item(), "size": dist.get_world_size()}
    (out / f"rank{me}.json").write_text(json.dumps(record))
