"""Rank FLOOD_RANK prints FLOOD_LINES numbered lines as fast as it can and exits with FLOOD_STATUS; the others
print one line. No torch, no MPI: output only."""

import os
import sys

rank = int(os.environ["RANK"])
if rank == int(os.environ["FLOOD_RANK"]):
    out = sys.stdout
    for i in range(int(os.environ["FLOOD_LINES"])):
        out.write(f"flood {i:07d} " + "x" * 80 + "\n")
    out.flush()
    sys.exit(int(os.environ["FLOOD_STATUS"]))
print(f"rank {rank} done")
