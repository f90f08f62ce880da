"""Raw mpi4py on Open MPI's ULFM: a loop of Allreduce in which one rank SIGKILLs itself; the survivors shrink.

argv: OUT_DIR VICTIM HOW (kill: SIGKILL, raise: an uncaught RuntimeError, wait: no rank fails by itself; the test
breaks a host). Every rank writes OUT_DIR/ready-R after 5 steps; each survivor writes OUT_DIR/rank-R.txt: `SIZE SUM`
after the shrink, where SUM is the Allreduce of the survivors' start ranks on the shrunk communicator (under wait,
OUT_DIR/seen-R: the time.time() at which it saw the failure). A restart (HPCDIST_RESTART_COUNT above 0) fails
nowhere: each rank writes its rank-R.txt after 5 steps.
Buffer collectives only: mpi4py's pickled ones (`allreduce`) run their point-to-point messages on a duplicate of the
communicator that Revoke does not reach, and a survivor waiting there for a peer that has moved on to Shrink waits
forever (measured with mpi4py 4.1.2).
"""

import itertools
import os
import signal
import sys
import time
from array import array
from pathlib import Path

from mpi4py import MPI

out_dir, victim, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
comm = MPI.COMM_WORLD.Dup()
comm.Set_errhandler(MPI.ERRORS_RETURN)
rank = comm.Get_rank()
lost = (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED)
if os.environ.get("HPCDIST_RESTART_COUNT", "0") != "0":
    total = array("l", [rank])
    for _ in range(5):
        comm.Allreduce(MPI.IN_PLACE, array("l", [0]))
    comm.Allreduce(MPI.IN_PLACE, total)
    Path(out_dir, f"rank-{rank}.txt").write_text(f"{comm.Get_size()} {total[0]}\n")
    sys.exit(0)
deadline = time.monotonic() + 300
for step in itertools.count():
    if time.monotonic() > deadline:
        raise SystemExit(f"rank {rank}: no failure was seen in 300 s")
    if step == 5:
        Path(out_dir, f"ready-{rank}").touch()
        if rank == victim and how == "raise":
            raise RuntimeError(f"rank {rank} fails on purpose")
        if rank == victim and how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    try:
        comm.Allreduce(MPI.IN_PLACE, array("l", [step]))
        time.sleep(0.01)  # the behaviour: a training loop's steps, until a failure is seen
    except MPI.Exception as exc:
        if exc.Get_error_class() not in lost:
            raise
        if how == "wait":
            Path(out_dir, f"seen-{rank}").write_text(f"{time.time():.3f}\n")
        comm.Revoke()
        survivors = comm.Shrink()
        total = array("l", [rank])
        survivors.Allreduce(MPI.IN_PLACE, total)
        with open(os.path.join(out_dir, f"rank-{rank}.txt"), "w") as marker:
            marker.write(f"{survivors.Get_size()} {total[0]}\n")
        break
