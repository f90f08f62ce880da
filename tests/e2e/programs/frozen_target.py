"""Four ranks step through all-reduces (about 30 s in all); each writes its pid to $MARKERS/pid-RANK once it runs, for
the test to stop (SIGSTOP) or freeze (its cgroup) one of them."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
with open(os.path.join(os.environ["MARKERS"], f".pid-{rank}"), "w") as pid:  # whole when the test sees it
    pid.write(str(os.getpid()))
os.replace(os.path.join(os.environ["MARKERS"], f".pid-{rank}"), os.path.join(os.environ["MARKERS"], f"pid-{rank}"))
for _ in range(600):
    dist.all_reduce(torch.ones(1))
    time.sleep(0.05)  # a step's work
print(f"rank {rank} finished", flush=True)
