"""Rank FAIL_RANK exits with status 3 before init_process_group, on every attempt; the others wait for it."""

import os
import sys

import torch.distributed as dist

if os.environ["OMPI_COMM_WORLD_RANK"] == os.environ["FAIL_RANK"]:
    sys.exit(3)
dist.init_process_group("gloo")
dist.barrier()
