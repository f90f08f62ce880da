"""Ranks SIGKILL themselves mid-loop; the survivors recover (--on-failure shrink) and go on to step 8.

argv: backend (mpi, gloo), scenario (one, two, during, rebuild; frozen: rank 2 SIGSTOPs itself instead, for hpcdist
mpirun to find frozen and end; ring: every step's all_reduce is of 64 MiB, large enough for the backends' rings, and
rank 2 is killed 50 ms into its step's; away: 64 MiB too, rank 2 dies before its step's, and ranks 1 and 3 stay out of
MPI until rank 0's has raised), output directory. Each survivor writes
rank<start>.json: its committed steps with the world size and the all_reduce's sum, each recovery, the error each
failure raised with the calls hang forensics then saw it in (or, below $HPCDIST_MIN_NP, the TooFewRanks it met), and
how long each failed all_reduce ran before it raised.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

import hpcdist
from hpcdist.forensics import sources
from hpcdist.forensics.recording import LEDGER
from hpcdist.resilience import membership

STEPS = 8
DEATHS = {  # scenario -> {start rank: the step at which it kills itself}
    "one": {2: 3},
    "two": {2: 2, 1: 5},
    "during": {2: 3},
    "rebuild": {2: 3},
    "frozen": {2: 3},
    "ring": {2: 3},
    "away": {2: 3},
}
ELEMENTS = (64 << 20) // 4 if sys.argv[2] in ("ring", "away") else 1
AWAY = 60.0  # seconds ranks 1 and 3 stay away at most: rank 0's ring must end on rank 2's failure well before
backend, scenario, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
with hpcdist.init(backend):
    me = dist.get_rank()  # the rank at start
    sub = dist.new_group([0, 2, 3])  # rebuilt over its survivors at each recovery
    if scenario == "rebuild" and me == 3:  # dies in the recovery, once the world is shrunk, as the groups are rebuilt
        membership._rebuild = lambda *_: os.kill(os.getpid(), 9)  # type: ignore[assignment]
    steps, recoveries, errors, subsums, took = [], [], [], [], []
    raised = out / "raised"  # away: rank 0's step 3 all_reduce has raised
    step = 0
    while step < STEPS:
        if DEATHS[scenario].get(me) == step:
            how = signal.SIGSTOP if scenario == "frozen" else signal.SIGKILL
            if scenario == "ring":  # in the middle of the ring's messages
                threading.Timer(0.05, os.kill, (os.getpid(), how)).start()
            else:
                os.kill(os.getpid(), how)
        if scenario == "away" and step == 3 and me in (1, 3):
            deadline = time.monotonic() + AWAY
            while not raised.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        began = time.monotonic()
        try:
            total = torch.full((ELEMENTS,), float(me + 1))
            dist.all_reduce(total)
            membership.commit()
            assert bool((total == total[0]).all()), f"step {step}: the all_reduce's elements differ"
            steps.append([step, dist.get_world_size(), total[0].item()])
            step += 1
        except (hpcdist.RanksLost, RuntimeError) as exc:  # gloo raises a plain RuntimeError
            took.append(round(time.monotonic() - began, 3))
            if scenario == "away" and me == 0:
                raised.write_text("")
            lost = membership.failure_of(exc)  # what gloo's error hides
            errors.append([type(exc).__name__, isinstance(exc, hpcdist.RanksLost), str(exc), lost and list(lost.ranks)])
            waiting = [call.op for call in sources.snapshot(LEDGER) if not call.done]  # as a hang report would see
            errors[-1].append(waiting)
            if scenario == "during" and me == 3 and len(errors) == 1:
                os.kill(os.getpid(), 9)  # dies while the others recover
            try:
                recovery = membership.recover(exc)
            except hpcdist.TooFewRanks as few:  # below $HPCDIST_MIN_NP: this survivor says so and ends
                (out / f"rank{me}.json").write_text(json.dumps({"too_few": [list(few.ranks), str(few)]}))
                os._exit(3)
            recoveries.append([list(recovery.lost), recovery.before, recovery.after, recovery.rank, recovery.seconds])
            if recovery.rank == 0:
                print(recovery.line(step), flush=True)
            sub = recovery.groups.get(sub, dist.GroupMember.NON_GROUP_MEMBER)
            if sub != dist.GroupMember.NON_GROUP_MEMBER:
                part = torch.tensor([float(me + 1)])
                dist.all_reduce(part, group=sub)
                subsums.append([dist.get_process_group_ranks(sub), part.item()])
    (out / f"rank{me}.json").write_text(
        json.dumps({"steps": steps, "recoveries": recoveries, "errors": errors, "subsums": subsums, "took": took})
    )
