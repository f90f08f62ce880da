"""Rank 1 stands apart while the others wait in an all_reduce on BACKEND.

MODE=hang: it sleeps past HPCDIST_TIMEOUT; gil: it holds the GIL past it; fail: it raises (with $ENTERED set, once
every other rank has written its file there, about to enter the second all_reduce); signal: it waits until the
file $GO exists, then joins in and the job ends well. API=init: hpcdist.init; plain: init_process_group itself
(an unmodified script); launch: the same function through hpcdist.launch.
"""

import os
import time

import torch
import torch.distributed as dist

import hpcdist


def exchange(tensor: torch.Tensor) -> None:
    dist.all_reduce(tensor)


def hold_the_gil() -> int:
    return sum(range(10**12))  # in C, without letting another thread run: its watchdog cannot answer


def others_entered(folder: str) -> None:
    """Wait (60 s at most) until every other rank has written its file in `folder`, about to enter its second call."""
    deadline, size = time.monotonic() + 60, int(os.environ["WORLD_SIZE"])
    while time.monotonic() < deadline and len(os.listdir(folder)) < size - 1:
        time.sleep(0.01)


def elsewhere(mode: str) -> None:
    if mode == "fail":
        if "ENTERED" in os.environ:  # the others all in one state when it fails: in their second all_reduce
            others_entered(os.environ["ENTERED"])
        raise RuntimeError("rank 1 gave up")
    if mode == "gil":
        hold_the_gil()
    deadline = time.monotonic() + 60  # hang: past HPCDIST_TIMEOUT (the behaviour); signal: until $GO exists
    while time.monotonic() < deadline and not (mode == "signal" and os.path.exists(os.environ["GO"])):
        time.sleep(0.05)


def work(rank: int, mode: str) -> int:
    print(f"rank {rank} pid {os.getpid()}", flush=True)
    tensor = torch.ones(4)
    exchange(tensor)  # every rank once: all are in step
    print(f"rank {rank} past the first", flush=True)
    if rank == 1:
        elsewhere(mode)
    elif "ENTERED" in os.environ:
        open(os.path.join(os.environ["ENTERED"], str(rank)), "w").close()
    exchange(tensor)
    print(f"rank {rank} done", flush=True)
    return rank


if __name__ == "__main__":
    api, mode, backend = os.environ["API"], os.environ["MODE"], os.environ.get("BACKEND", "gloo")
    if api == "launch":
        print(hpcdist.launch(work, hpcdist.RANK, mode, np=4, backend=backend))
    elif api == "init":
        with hpcdist.init(backend) as session:
            work(session.rank, mode)
    else:
        dist.init_process_group(backend)
        work(dist.get_rank(), mode)
        dist.destroy_process_group()
