"""`hpcdist run ddp --on-failure shrink`: the ddp workload's model and data trained through `hpcdist.Survivors`.

When a rank dies the survivors shrink and carry on from the last committed step, from memory (no checkpoint); the
epoch's remaining samples are shared among them (see `resilience.sharding` for how the batches differ). Rank 0
prints each epoch's loss: the mean over the samples whose steps were committed by ranks alive at the epoch's end.
With --checkpoint-dir, DIR/ddp.pt is written after every epoch as without shrink, and with --resume the job starts
after its epoch: what a restart (`--max-restarts`) goes on from when the survivors are fewer than --min-np.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import Dataset

from ..errors import UsageError
from ..resilience.loop import Survivors
from ..resilience.ulfm import unavailable
from ..runtime.bootstrap import Session
from . import WorkloadOptions, steplog

__all__ = ["train"]


def train(
    session: Session,
    opts: WorkloadOptions,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    dataset: Dataset,
    path: str | None = None,
) -> nn.Module:
    """Train `module` for opts.epochs through Survivors, checkpointing to `path` (--checkpoint-dir's ddp.pt) after
    every epoch and, with --resume, starting after its epoch; return it (the same on every survivor).

    Raises:
        UsageError: this process cannot shrink (not started with `hpcdist mpirun --on-failure shrink`).
        TooFewRanks: the survivors would be fewer than --min-np.
    """
    reason = unavailable()
    if reason is not None:
        raise UsageError(
            f"--on-failure shrink: {reason}; start the job with `hpcdist mpirun --on-failure shrink`, "
            "or train with --on-failure end"
        )
    loop = Survivors(
        module,
        optimizer,
        dataset,  # type: ignore[arg-type]
        batch_size=opts.batch_size,
        seed=opts.seed,
        checkpoint=path,
        resume=opts.resume,
    )
    torch.manual_seed(opts.seed + 1 + loop.rank)  # each rank its own dropout masks
    _say(
        loop,
        f"ddp: {loop.world_size} ranks, backend {session.backend}, device {session.device}, {opts.samples} samples, "
        f"batch {opts.batch_size} per rank, epochs {loop.resumed + 1}..{opts.epochs}, on failure: shrink",
    )
    device = next(module.parameters()).device
    for epoch in loop.epochs(opts.epochs):
        start = time.perf_counter()
        totals = torch.zeros(2, dtype=torch.float64, device=device)  # sum of loss * n, n
        for x, y in loop.batches():
            x, y = x.to(device), y.to(device)
            with loop.step():
                loss = nn.functional.mse_loss(loop.model(x), y)
                loss.backward()
            if loop.committed:
                totals[0] += loss.detach().double() * len(x)
                totals[1] += len(x)
                steplog.record(opts.step_log, loop.rank, loop.world_size, loop.epoch + 1, loop.epoch_step)
        loop.all_reduce(totals)
        seconds = time.perf_counter() - start
        saved = f", saved {path} after step {loop.saved}" if path is not None else ""
        _say(
            loop,
            f"epoch {epoch + 1}/{opts.epochs} loss {(totals[0] / totals[1]).item():.6f} "
            f"samples/s {totals[1].item() / seconds:.0f}, {loop.world_size} ranks{saved}",
        )
        if opts.stop_after_epoch == epoch + 1 and epoch + 1 < opts.epochs:
            _say(loop, f"stopping after epoch {epoch + 1} as asked (--stop-after-epoch)")
            break
    return module


def _say(loop: Survivors, line: str) -> None:
    """Print a progress line on rank 0 only (rank 0 of the ranks there are now)."""
    if loop.rank == 0:
        print(f"rank 0: {line}", flush=True)
