"""Raw mpi4py on Open MPI's ULFM: a loop of Allreduce in which one rank SIGKILLs itself; the survivors shrink.

argv: OUT_DIR VICTIM. Each survivor writes OUT_DIR/rank-R.txt: `SIZE SUM` after the shrink, where SUM is the
Allreduce of the survivors' start ranks on the shrunk communicator. Buffer collectives only: mpi4py's pickled ones
(`allreduce`) run their point-to-point messages on a duplicate of the communicator that Revoke does not reach, and a
survivor waiting there for a peer that has moved on to Shrink waits forever.
"""

import os
import signal
import sys

from array import array

from mpi4py import MPI

out_dir, victim = sys.argv[1], int(sys.argv[2])
comm = MPI.COMM_WORLD.Dup()
comm.Set_errhandler(MPI.ERRORS_RETURN)
rank = comm.Get_rank()
lost = (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED)
for step in range(1000):
    if step == 5 and rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        comm.Allreduce(MPI.IN_PLACE, array("l", [step]))
    except MPI.Exception as exc:
        if exc.Get_error_class() not in lost:
            raise
        comm.Revoke()
        survivors = comm.Shrink()
        total = array("l", [rank])
        survivors.Allreduce(MPI.IN_PLACE, total)
        with open(os.path.join(out_dir, f"rank-{rank}.txt"), "w") as marker:
            marker.write(f"{survivors.Get_size()} {total[0]}\n")
        break
else:
    raise SystemExit(f"rank {rank}: no failure was seen in 1000 steps")
