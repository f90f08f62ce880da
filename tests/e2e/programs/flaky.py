"""Fails on the first attempt only (or without restart counters): rank FAIL_RANK (FAIL_HOW: exit | kill).

It fails once every rank initialised.

Each rank writes MARKERS/attempt-<n>-rank-<r> holding both restart counters.
"""

import os
import signal
import sys
from pathlib import Path

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
attempt = os.environ.get("HPCDIST_RESTART_COUNT", "unset")
counters = f"{attempt} {os.environ.get('TORCHELASTIC_RESTART_COUNT', 'unset')}"
Path(os.environ["MARKERS"], f"attempt-{attempt}-rank-{rank}").write_text(counters)
dist.barrier()
if attempt in ("0", "unset") and rank == int(os.environ["FAIL_RANK"]):
    if os.environ["FAIL_HOW"] == "exit":
        sys.exit(3)
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
dist.destroy_process_group()
