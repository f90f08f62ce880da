"""Sharded state under `hpcdist.Survivors`: what a lost rank takes with it that the survivors do not hold.

With DDP every rank holds the whole model and optimizer state, so the survivors have everything. A
ZeroRedundancyOptimizer replicates the parameters (DDP) but each rank alone holds its shard of the optimizer's state:
a lost rank's shard is gone, so the survivors refuse to carry on from memory (`StateLost`, a `TooFewRanks`: the job
ends, and `--max-restarts` resumes it from Survivors' checkpoint). FSDP shards the parameters themselves, which
Survivors cannot replicate with DDP: refused when the loop is made.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
from torch.distributed.optim import ZeroRedundancyOptimizer

from ..errors import TooFewRanks, UsageError
from ..ranklist import by_host
from .membership import Recovery

__all__ = ["StateLost", "check_model", "gather", "lost_state", "shard_of"]


class StateLost(TooFewRanks):
    """State that only the lost ranks held (an optimizer's shard) is gone: the survivors end, and a restart resumes
    from the checkpoint. Every survivor raises it alike; the job says it once (`survivor` 0, or its launcher)."""

    def line(self) -> str:
        """What the job says of it, once: the loss, the state gone with it, and what happens next (it says)."""
        return str(self)


def check_model(model: nn.Module) -> None:
    """Refuse a model sharded by FSDP (FullyShardedDataParallel, or fully_shard's FSDPModule).

    Raises:
        UsageError: naming the sharded module, and what to do instead.
    """
    for name, module in model.named_modules():
        if isinstance(module, (FullyShardedDataParallel, FSDPModule)):
            where = f"its submodule {name!r}" if name else "the model itself"
            raise UsageError(
                f"hpcdist.Survivors was given a model sharded by FSDP ({where}, a {type(module).__name__}): a lost "
                "rank would take its parameter shards with it, and Survivors replicates the model with DDP; pass "
                "the module unsharded (Survivors wraps it in DDP), or train the FSDP model without Survivors under "
                "--on-failure end with your own checkpoint and --max-restarts"
            )


def shard_of(optimizer: torch.optim.Optimizer) -> str | None:
    """What of the optimizer's state each rank holds alone (`ZeroRedundancyOptimizer shard`), or None: all of it."""
    return "ZeroRedundancyOptimizer shard" if isinstance(optimizer, ZeroRedundancyOptimizer) else None


def gather(optimizer: torch.optim.Optimizer) -> None:
    """Bring every rank's shard to rank 0, so that its `state_dict()` is whole (collective; nothing if unsharded)."""
    if isinstance(optimizer, ZeroRedundancyOptimizer):
        optimizer.consolidate_state_dict(to=0)


def lost_state(recovery: Recovery, shard: str, checkpoint: str | None, restarts: int) -> StateLost:
    """The error each survivor raises when the lost ranks held `shard` (`restarts`: those --max-restarts has left).

    A recovery that lost no rank (the ranks' agreement failed) still rebuilt the groups, which the sharded optimizer
    keeps its own of: it cannot step on them either.
    """
    ranks = ", ".join(str(rank) for rank in recovery.lost)
    whose, them = (f"rank {ranks}", "it") if len(recovery.lost) == 1 else (f"ranks {ranks}", "them")
    gone = by_host(recovery.lost, recovery.hosts)
    lost = f"{gone} lost; the optimizer's state of {whose} ({shard}) was lost with {them}"
    if not recovery.lost:
        lost = f"the optimizer ({shard}s) cannot step on the survivors' rebuilt groups"
    if checkpoint is not None and restarts > 0:
        then = f"the job resumes from its checkpoint {checkpoint}"
    elif checkpoint is not None:
        then = f"the job ends (hpcdist mpirun --max-restarts N resumes it from its checkpoint {checkpoint})"
    else:
        then = "the job ends (give Survivors checkpoint=PATH and hpcdist mpirun --max-restarts N to resume from it)"
    return StateLost(
        recovery.lost,
        recovery.hosts,
        recovery.during,
        why=f"{lost}; {then}",
        survivor=recovery.rank,
    )
