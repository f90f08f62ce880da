"""Many agreements over the ULFM world while another thread of each rank calls MPI, as the hang watchdog does.

argv: output directory. Each rank writes agree<rank>.json: the result of every agreement, in order.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from mpi4py import MPI

import hpcdist
from hpcdist.abort import agreeing
from hpcdist.resilience import ulfm

ROUNDS = 100
ALL = 0b1111

out = Path(sys.argv[1])
with hpcdist.init("gloo"):
    world = ulfm.world()
    rank = world.rank
    other, third = world.Dup(), world.Dup()  # the busy thread's, as the watchdog and the failure detector have
    pending = third.Irecv([bytearray(1), MPI.BYTE], MPI.ANY_SOURCE, 9)  # a receive from any rank, as the detector's
    stop = threading.Event()

    def busy() -> None:
        """Probe and test for messages that never come, as the rank's own threads do, between the agreement's tests."""
        while not stop.is_set():
            with agreeing():
                other.improbe(source=MPI.ANY_SOURCE, tag=7)
                pending.Test()

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    # in round i, rank r clears its own bit when (i + r) % 3 == 0: every round's result is known in advance
    results = [ulfm.agree(world, ALL & ~(1 << rank) if (i + rank) % 3 == 0 else ALL) for i in range(ROUNDS)]
    stop.set()
    thread.join()
    pending.Cancel()
    pending.Wait()
    other.Free()
    third.Free()
    (out / f"agree{rank}.json").write_text(json.dumps(results))
