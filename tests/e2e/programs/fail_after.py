"""Every rank prints 50 lines; rank FAIL_RANK then fails (FAIL_HOW: raise | kill), once every other rank has
printed its lines (markers.py, in $MARKERS), while the others wait. No torch."""

import os
import signal
import time

from markers import mark, wait_for_marks

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
for i in range(50):
    print(f"rank {rank} line {i}", flush=True)
if rank == int(os.environ["FAIL_RANK"]):
    wait_for_marks([f"printed-{r}" for r in range(size) if r != rank], f"rank {rank}")
    if os.environ["FAIL_HOW"] == "raise":
        raise RuntimeError(f"deliberate failure on rank {rank}")
    os.kill(os.getpid(), signal.SIGKILL)
mark(f"printed-{rank}")
time.sleep(600)  # the behaviour: waiting, until the failing rank takes the job down
