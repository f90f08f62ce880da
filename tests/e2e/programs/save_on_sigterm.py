"""A rank that saves its work on SIGTERM, as a training script does when its job is cancelled or preempted.

It writes ready-RANK in $MARKERS and waits; on SIGTERM it spends a second on its "checkpoint" (longer than Open MPI's
launcher leaves a rank it passed SIGTERM to), writes saved-RANK holding the signal's name, and exits 0. With
IGNORE=1 it ignores SIGTERM instead, and waits to be killed. SAVE_ON=USR1 saves on SIGUSR1 as well (a requeue
notice passed on by a job script).
"""

import os
import signal
import sys
import time

rank = int(os.environ["RANK"])
markers = os.environ["MARKERS"]


def save(signum: int, frame: object) -> None:
    """The checkpoint: a second's work, then the file that says it was written."""
    time.sleep(1)
    with open(os.path.join(markers, f"saved-{rank}"), "w") as saved:
        saved.write(signal.Signals(signum).name)
    sys.exit(0)


signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ.get("IGNORE") == "1" else save)
if os.environ.get("SAVE_ON") == "USR1":
    signal.signal(signal.SIGUSR1, save)
open(os.path.join(markers, f"ready-{rank}"), "w").close()
while True:
    signal.pause()
