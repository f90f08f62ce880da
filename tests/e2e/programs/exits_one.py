"""Rank 2 exits at once (os._exit(9)); the others write OUT/rank<N>.txt a second later and end well."""

import os
import time
from pathlib import Path

from mpi4py import MPI

rank = MPI.COMM_WORLD.Get_rank()
if rank == 2:
    os._exit(9)
time.sleep(1)
Path(os.environ["OUT"], f"rank{rank}.txt").write_text("done\n")
