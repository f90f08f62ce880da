"""Each rank: where it runs (inside a podman container or not), its MPI, and an allreduce of rank + 1."""

import os
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank + 1)
inside = "in a container" if os.path.exists("/run/.containerenv") else "on the host"
library = MPI.Get_library_version().split(",")[0]
print(f"rank {rank} of {size} on {socket.gethostname()} {inside}, {library}: allreduce {total}", flush=True)
