"""A torchrun-style program whose rank FAIL_RANK fails (FAIL_HOW: raise | exit | kill) while the others wait."""

import os
import signal
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == int(os.environ["FAIL_RANK"]):
    how = os.environ["FAIL_HOW"]
    if how == "raise":
        raise ValueError(f"deliberate failure on rank {rank}")
    if how == "exit":
        sys.exit(3)
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()  # the healthy ranks would wait here forever
time.sleep(600)  # the behaviour: never ending on its own, should the barrier return
