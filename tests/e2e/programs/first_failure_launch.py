"""hpcdist.launch on 4 gloo ranks: rank 2 raises (HOW=raise) or returns (HOW=return) after one all_reduce while
the others go on to a second (once each said it goes there: a file in $MARKERS); prints the RankFailed the caller gets
as JSON."""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import hpcdist


def step(rank: int, how: str) -> str:
    markers = Path(os.environ["MARKERS"])  # (this function goes to the ranks by value: no import of markers.py)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if rank == 2:
        deadline = time.monotonic() + 120
        while not all((markers / f"second-{r}").exists() for r in (0, 1, 3)):
            if time.monotonic() > deadline:
                sys.exit(f"rank 2 waited 120 s for the others to go to the second all_reduce ({markers})")
            time.sleep(0.01)  # between two looks
        if how == "raise":
            raise ValueError(f"NaN in the gradients on rank {rank}")
        return "early"
    (markers / f"second-{rank}").touch()
    dist.all_reduce(tensor)
    return "done"


if __name__ == "__main__":
    try:
        hpcdist.launch(step, hpcdist.RANK, os.environ["HOW"], np=4, backend="gloo", timeout=120)
    except hpcdist.RankFailed as exc:
        print(json.dumps({"rank": exc.rank, "host": exc.host, "text": str(exc)}))
