"""A traced job: 20 all_reduces, each in a marked region; the rank named in $SLEEPER sleeps before each."""

import os
import time

import torch
import torch.distributed as dist

import hpcdist

dist.init_process_group("gloo")
rank = dist.get_rank()
sleeper = int(os.environ.get("SLEEPER", "-1"))
tensor = torch.ones(4)
for step in range(20):
    with hpcdist.region(f"step {step}"):
        if rank == sleeper:
            time.sleep(0.25)  # the behaviour under test: late to every all_reduce, by more than a loaded machine
        dist.all_reduce(tensor)
dist.barrier()
dist.destroy_process_group()
