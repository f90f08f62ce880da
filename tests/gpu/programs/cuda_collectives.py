"""CUDA tensors through a CPU backend (gloo, or hpcdist's mpi backend, p2p too): each rank checks what it received."""

import json
import sys

import torch
import torch.distributed as dist

import hpcdist

backend = sys.argv[1]
with hpcdist.init(backend) as session:
    rank, size = session.rank, session.world_size
    device = torch.device("cuda", session.env.local_rank % torch.cuda.device_count())
    seen: dict[str, object] = {}
    total = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(total)
    seen["all_reduce"] = total[0].item()
    data = torch.arange(8, dtype=torch.float32, device=device) if rank == 0 else torch.zeros(8, device=device)
    dist.broadcast(data, src=0)
    seen["broadcast"] = data.tolist()
    gathered = [torch.zeros(2, device=device) for _ in range(size)]
    dist.all_gather(gathered, torch.full((2,), float(rank), device=device))
    seen["all_gather"] = [t[0].item() for t in gathered]
    if size > 1 and backend == "mpi":  # gloo's send/recv take CPU tensors only: a CUDA one crashed torch 2.11's gloo
        if rank == 0:
            dist.send(torch.full((4,), 7.0, device=device), dst=1)
        elif rank == 1:
            got = torch.zeros(4, device=device)
            dist.recv(got, src=0)
            seen["recv"] = got.tolist()
    seen["device"] = str(total.device)
    print("RESULT " + json.dumps({"rank": rank, "size": size, **seen}), flush=True)
