"""An epoch's sample order and each rank's share of a step, for whatever world size is left (pure, torch-free).

Every rank draws the same order of the epoch's samples from (seed, epoch) alone. The cursor counts the samples of
that order that committed steps have consumed; it is the same on every survivor. Each step takes the next samples
from the cursor and splits them over the ranks there are now, so that after a shrink the remaining samples are
shared by the survivors: no sample of the epoch is seen twice and none is left out.

What differs from a fixed world size (the deviation, exactly):
- A step takes `batch_size` samples per rank, so the global batch is batch_size * world_size: after a shrink from
  W to W' ranks it goes from b*W to b*W' (the learning rate is not rescaled), and the epoch has more steps.
- The epoch's last step takes all the samples left when fewer than (b + 1) * W remain, so the step before never
  leaves fewer samples than ranks: every rank has at least one sample in every step, and at most b + 1.
- A step's samples are split into consecutive runs whose sizes differ by at most one. DDP averages the ranks'
  gradients, each the mean over its own run: where the runs differ in size (only in an epoch's last step), a
  sample of a shorter run weighs slightly more than one of a longer run.
"""

from __future__ import annotations

import random

from ..errors import UsageError

__all__ = ["epoch_order", "share", "step_size", "steps_left"]


def epoch_order(samples: int, seed: int, epoch: int) -> list[int]:
    """The indices 0..samples-1 in the epoch's order: a permutation drawn from (seed, epoch) only."""
    order = list(range(samples))
    random.Random(seed * 2**32 + epoch).shuffle(order)
    return order


def step_size(remaining: int, world_size: int, batch_size: int) -> int:
    """How many of the `remaining` samples the next step takes: b per rank, or all of them at the epoch's end.

    Raises:
        UsageError: fewer samples remain than there are ranks (a data set smaller than the world size).
    """
    if remaining < world_size:
        raise UsageError(
            f"{remaining} samples for {world_size} ranks: every rank needs at least one sample per step; "
            f"use a data set of at least {world_size} samples, or fewer ranks"
        )
    full = batch_size * world_size
    return remaining if remaining < full + world_size else full


def share(cursor: int, size: int, world_size: int, rank: int) -> range:
    """The positions in the epoch's order that `rank` trains on in the step taking `size` samples from `cursor`."""
    return range(cursor + rank * size // world_size, cursor + (rank + 1) * size // world_size)


def steps_left(remaining: int, world_size: int, batch_size: int) -> int:
    """The steps it takes to consume `remaining` samples at this world size."""
    steps = 0
    while remaining:
        remaining -= step_size(remaining, world_size, batch_size)
        steps += 1
    return steps
