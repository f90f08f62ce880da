"""Every rank prints 30 steps on stdout; rank FAIL_RANK then raises at once while the others wait in a barrier."""

import os

from mpi4py import MPI

rank = int(os.environ["RANK"])
for step in range(30):
    print(f"rank {rank} step {step}", flush=True)
if rank == int(os.environ["FAIL_RANK"]):
    raise ValueError(f"NaN in the gradients on rank {rank}")
MPI.COMM_WORLD.Barrier()  # ended by mpirun when the failing rank takes the job down
