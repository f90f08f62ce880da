"""A torchrun-style script that knows nothing of hpcdist: init_process_group(BACKEND), two all_reduces.

HANG makes rank 1 misbehave: `sleep` (it sleeps before its first all_reduce), `noinit` (it never calls
init_process_group), `exit` (it exits 0 after the first all_reduce while the others wait in the second).
USER_TIMEOUT passes init_process_group a timeout of that many seconds.
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
hang = os.environ.get("HANG", "")
if hang == "noinit" and rank == 1:
    time.sleep(600)  # the behaviour under test (here and below): longer than any test waits
    sys.exit(0)
user_timeout = os.environ.get("USER_TIMEOUT")
timeout = timedelta(seconds=float(user_timeout)) if user_timeout else None
dist.init_process_group(os.environ.get("BACKEND", "gloo"), timeout=timeout)
tensor = torch.full((4,), float(rank + 1))
if hang == "sleep" and rank == 1:
    time.sleep(600)
dist.all_reduce(tensor)
if hang == "exit" and rank == 1:
    sys.exit(0)
dist.all_reduce(tensor)
store = dist.distributed_c10d._get_default_store()
store_timeout = store.timeout.total_seconds()  # type: ignore[attr-defined]  # a property torch's stubs leave out
print(f"rank {rank}: backend {dist.get_backend()} timeout {store_timeout:g} result {tensor.tolist()}")
dist.destroy_process_group()
