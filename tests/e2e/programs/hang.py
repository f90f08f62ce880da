"""Provoke a hang on BACKEND: HANG=p2p (rank 2 receives from rank 0, which is in all_reduce), collective
(rank 1 broadcasts while the others all_reduce) or skip (rank 1 leaves out an all_reduce); STOP=N: rank N stops
itself (SIGSTOP) instead of its second all_reduce."""

import os
import signal
import time

import torch
import torch.distributed as dist

import hpcdist

with hpcdist.init(os.environ.get("BACKEND", "gloo")) as session:
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if os.environ["HANG"] == "p2p" and session.rank == 2:
        dist.recv(tensor, src=0)
    elif os.environ["HANG"] == "collective" and session.rank == 1:
        dist.broadcast(tensor, src=1)
    elif os.environ["HANG"] == "skip" and session.rank == 1:
        time.sleep(600)  # the behaviour under test: longer than any test waits, so only the abort ends the job
    elif str(session.rank) == os.environ.get("STOP"):
        os.kill(os.getpid(), signal.SIGSTOP)  # its watchdog thread stops too: it answers nobody
    else:
        dist.all_reduce(tensor)
    dist.barrier()
