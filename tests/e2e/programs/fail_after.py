"""Every rank prints 50 lines; rank FAIL_RANK then fails (FAIL_HOW: raise | kill) while the others wait. No torch."""

import os
import signal
import time

rank = int(os.environ["RANK"])
for i in range(50):
    print(f"rank {rank} line {i}", flush=True)
if rank == int(os.environ["FAIL_RANK"]):
    time.sleep(0.5)  # the others have printed their lines too
    if os.environ["FAIL_HOW"] == "raise":
        raise RuntimeError(f"deliberate failure on rank {rank}")
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)  # ended by mpirun when the failing rank takes the job down
