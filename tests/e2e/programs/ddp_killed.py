"""`hpcdist run ddp ARGS` in which, on the first attempt, the last rank SIGKILLs itself mid-training.

It waits (in a thread) until rank 0 has saved the first epoch's checkpoint DIR/ddp.pt, where DIR is the
value of --checkpoint-dir, and kills itself then: no handler runs, nothing more is saved.
"""

import os
import signal
import sys
import threading
import time
from pathlib import Path

from hpcdist.cli import main


def _kill_after_first_checkpoint(path: Path) -> None:
    deadline = time.monotonic() + 300
    while not path.exists():
        if time.monotonic() > deadline:
            print(f"ddp_killed.py: waited 300 s for {path}; killing this rank anyway", file=sys.stderr, flush=True)
            break
        time.sleep(0.005)  # between two looks
    os.kill(os.getpid(), signal.SIGKILL)


args = sys.argv[1:]
last = os.environ["OMPI_COMM_WORLD_RANK"] == str(int(os.environ["OMPI_COMM_WORLD_SIZE"]) - 1)
if os.environ.get("HPCDIST_RESTART_COUNT") == "0" and last:
    checkpoint = Path(args[args.index("--checkpoint-dir") + 1], "ddp.pt")
    threading.Thread(target=_kill_after_first_checkpoint, args=(checkpoint,), daemon=True).start()
sys.exit(main(["run", "ddp", *args]))
