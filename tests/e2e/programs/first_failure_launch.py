"""hpcdist.launch on 4 gloo ranks: rank 2 raises (HOW=raise) or returns (HOW=return) after one all_reduce while
the others go on to a second; prints the RankFailed the caller gets as JSON."""

import json
import os
import time

import torch
import torch.distributed as dist

import hpcdist


def step(rank: int, how: str) -> str:
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if rank == 2:
        time.sleep(0.2)  # the others are in the second all_reduce
        if how == "raise":
            raise ValueError(f"NaN in the gradients on rank {rank}")
        return "early"
    dist.all_reduce(tensor)
    return "done"


if __name__ == "__main__":
    try:
        hpcdist.launch(step, hpcdist.RANK, os.environ["HOW"], np=4, backend="gloo", timeout=120)
    except hpcdist.RankFailed as exc:
        print(json.dumps({"rank": exc.rank, "host": exc.host, "text": str(exc)}))
