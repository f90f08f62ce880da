"""Rank 0 holds the GIL in a loop for BUSY seconds while the others wait in a barrier; STOP_RANK stops itself."""

import os
import signal
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if str(rank) == os.environ.get("STOP_RANK"):
    os.killpg(os.getpgid(0), signal.SIGSTOP)  # the rank and its tagger freeze, as behind a cut link
if rank == 0:
    began = time.monotonic()
    while time.monotonic() - began < float(os.environ.get("BUSY", "0")):
        pass  # pure Python: the GIL is never released
dist.barrier()  # the others block here meanwhile
print(f"rank {rank} passed the barrier", flush=True)
