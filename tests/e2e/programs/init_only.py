"""Start-up probe: initialise gloo from torchrun's variables (or Open MPI's, for plain mpirun) and barrier."""

import os

import torch.distributed as dist

rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
size = int(os.environ.get("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
dist.init_process_group("gloo", rank=rank, world_size=size)
dist.barrier()
dist.destroy_process_group()
