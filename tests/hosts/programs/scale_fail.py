"""Every rank says a line, then waits for the others in a barrier; rank $FAIL_RANK raises instead (no torch)."""

import os

from mpi4py import MPI

rank = MPI.COMM_WORLD.Get_rank()
print(f"line {rank}", flush=True)
if rank == int(os.environ["FAIL_RANK"]):
    raise ValueError(f"deliberate failure on rank {rank}")
MPI.COMM_WORLD.Barrier()  # the others wait here for the rank that never comes
