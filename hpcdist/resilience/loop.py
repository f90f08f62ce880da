"""`hpcdist.Survivors`: a training loop whose survivors carry on from memory when ranks die (ULFM).

It holds the model (wrapped in DDP as `loop.model`), the optimizer and the data set. Each step's samples come
from the epoch's order (`sharding`), split over the ranks there are now; leaving `with loop.step():` the ranks
agree that every one of them finished the step (`membership.commit`) before any of them steps the optimizer, so
the parameters and the optimizer's state after the last committed step are the same on every survivor. When a rank
is lost inside a step or in the agreement, the survivors shrink (`membership.recover`), wrap the same module in a
new DDP over the new default group, and redo the step with the samples it had, shared among themselves; rank 0
prints one line per failure. The new DDP reduces its first step in rank 0's old DDP's gradient buckets (buckets.py),
not in the single forward-order bucket a fresh DDP starts with: gloo's ring sums each element in an order set by
its place in the bucket, so only the same layout gives the same gradients, bit for bit, as a run without the loss.
Under `--spares N`, as many spares as ranks were lost join in the recovery and take the state from rank 0
(spares.py), so the world is back to its size. Outside `--on-failure shrink` the same loop trains as plain DDP.

With `checkpoint=PATH`, rank 0 writes PATH atomically at the end of every epoch (the model, the optimizer, the epochs
and steps done), and a loop made with PATH present starts after that epoch: what a restart (`--max-restarts`) resumes
from when the survivors are too few (`TooFewRanks`) or a host is lost. The survivors of a shrink never read it.

Sharded state (`sharded`): with a ZeroRedundancyOptimizer a lost rank takes its shard of the optimizer's state, so
the survivors end (`StateLost`) for a restart from the checkpoint; a model sharded by FSDP is refused.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import default_collate

from ..errors import RanksLost, TooFewRanks, UsageError, lost_text
from ..runtime.process import current
from ..values import check_count
from . import checkpoint as files
from . import detector, sharded, spares
from .buckets import laid_out, layout_of
from .membership import Recovery, commit, failure_of, recover
from .sharding import epoch_order, share, step_size

__all__ = ["CHECKPOINT_FORMAT", "Survivors"]

CHECKPOINT_FORMAT = "survivors/1"
_MUST_MATCH = ("seed", "samples")  # what the epochs' sample order depends on


class Indexable(Protocol):
    """A map-style data set: `len(dataset)` samples, `dataset[i]` for each (a torch Dataset with __len__)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


class Survivors:
    """Model, optimizer and data set, trained so that when ranks die the others carry on from the last committed step.

    ```python
    loop = hpcdist.Survivors(model, optimizer, dataset, batch_size=32, seed=0)
    for epoch in loop.epochs(3):
        for x, y in loop.batches():
            with loop.step():
                loss_fn(loop.model(x), y).backward()
    ```
    `dataset` is indexable (`dataset[i]`, `len(dataset)`); a batch is `collate([dataset[i] for i in indices])`.
    `checkpoint`: a file written atomically by rank 0 after every epoch, and resumed from when it exists (unless
    `resume` is False). Keyword arguments beyond these are DistributedDataParallel's.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        dataset: Indexable,
        *,
        batch_size: int,
        seed: int = 0,
        collate: Callable[[list[Any]], Any] = default_collate,
        checkpoint: str | os.PathLike[str] | None = None,
        resume: bool = True,
        **ddp_options: Any,
    ) -> None:
        """Hold them, resume from the checkpoint if there is one, wrap the module in DDP. Under `--spares N` the
        last N ranks wait here, outside torch's world, until a recovery makes them take lost ranks' places: then
        they take the model, the optimizer's state and the loop's place from rank 0, and return.

        Raises:
            UsageError: a batch size below 1, a model sharded by FSDP, or a checkpoint of another format, seed or
                data set size.
            SystemExit: on a spare never needed, with status 0, as the job ends.
        """
        check_count(batch_size, "batch_size", 1, "e.g. batch_size=32")
        sharded.check_model(model)
        self.module, self.optimizer, self.dataset = model, optimizer, dataset
        self.batch_size, self.seed = batch_size, seed
        self.recoveries: list[Recovery] = []  # one per failure survived, in order
        self.epoch = 0  # the current epoch, counted from 0
        self.epoch_step = 0  # steps committed in this epoch
        self.steps = 0  # steps committed since the start
        self.committed = False  # whether the last `with loop.step():` was committed (False: it is redone)
        self.indices: list[int] = []  # the data set's indices in this rank's current batch
        self.checkpoint = os.fspath(checkpoint) if checkpoint is not None else None
        self.resumed = 0  # the epochs done by the checkpoint resumed from (0: none)
        self.saved: int | None = None  # the step the last checkpoint was written after (None: none yet)
        self._collate, self._ddp_options = collate, ddp_options
        process = current()
        contract = process.contract
        self._shrink = contract.shrinks
        self._shard = sharded.shard_of(optimizer)  # state each rank holds alone (None: every rank holds it all)
        self._restarts = contract.max_restarts - (contract.restart_count or 0)  # those left to --max-restarts
        self._order: list[int] = []
        self._cursor = 0  # samples of the epoch's order consumed by committed steps: the same on every survivor
        self._taking: int | None = None  # samples the current step takes, until it is committed or redone
        self._joined_at: tuple[int, int, int] | None = None  # a spare's (epoch, epoch_step, cursor) as it joined
        self._layout: list[list[int]] | None = None  # the last DDP's gradient buckets, for the next (buckets.py)
        if self._shrink and spares.stand_by(process):  # a spare waits there until it takes a lost rank's place
            self._recover(None)
        else:
            if self.checkpoint is not None and resume:
                self._resume(self.checkpoint)
            self.model = self._wrap()
        if self._shrink:
            detector.start(process)  # for gloo and nccl, MPI watches for failures (collective, once)

    @property
    def rank(self) -> int:
        """This rank's rank now (it changes when ranks before it are lost)."""
        return dist.get_rank()

    @property
    def world_size(self) -> int:
        """The number of ranks now."""
        return dist.get_world_size()

    def epochs(self, count: int, start: int = 0) -> Iterator[int]:
        """The epochs start..count-1, after those the checkpoint resumed from; each begins at the first sample of its
        order, drawn from (seed, epoch). A spare that joined begins where the others are."""
        joined, self._joined_at = self._joined_at, None
        first = joined[0] if joined is not None else 0
        for epoch in range(max(start, self.resumed, first), count):
            self.epoch, self.epoch_step, self._cursor = epoch, 0, 0
            if joined is not None and epoch == joined[0]:
                self.epoch_step, self._cursor = joined[1], joined[2]
            self._order = epoch_order(len(self.dataset), self.seed, epoch)
            yield epoch

    def batches(self) -> Iterator[Any]:
        """This rank's batch of each step of the epoch, shared from the cursor among the ranks there are now.

        A step that was not committed (a rank was lost) gives this rank its share of the same samples again.

        Raises:
            UsageError: a batch was not trained inside `with loop.step():`, or the data set has fewer samples
                than there are ranks.
        """
        while self._cursor < len(self._order):
            world, rank = self.world_size, self.rank
            size = step_size(len(self._order) - self._cursor, world, self.batch_size)
            self.indices = [self._order[p] for p in share(self._cursor, size, world, rank)]
            self._taking = size
            yield self._collate([self.dataset[i] for i in self.indices])
            if self._taking is not None:
                raise UsageError(
                    "a batch of Survivors.batches() was used without `with loop.step():`; train each batch inside "
                    "`with loop.step():` (it commits the step, then steps the optimizer)"
                )
        if self.checkpoint is not None and self._order:  # the epoch's every step committed: its end is kept
            self._save(self.checkpoint)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Forward and backward go inside; leaving it, the ranks commit the step, then step the optimizer.

        If a rank is lost inside or in the commit, no survivor steps the optimizer: they recover, re-wrap DDP,
        and the same samples come again from `batches()`, shared among the survivors (`loop.committed` is False).

        Raises:
            TooFewRanks: the survivors would be fewer than --min-np, every rank that trained was lost, or
                (`StateLost`) the lost ranks held a shard of the optimizer's state.
            UsageError: outside a batch of `batches()`.
        """
        if self._taking is None:
            raise UsageError("loop.step() outside a batch: use it inside `for batch in loop.batches():`")
        self.committed = False
        try:
            yield
            if self._shrink:
                commit()
        except Exception as error:
            lost = _lost(error) if self._shrink else None
            if lost is None:
                raise
            self._taking = None  # batches() gives this step's samples again, shared among the survivors
            self._recover(lost)
            return
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._cursor += self._taking
        self._taking = None
        self.epoch_step += 1
        self.steps += 1
        self.committed = True

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the ranks there are, in place; a rank lost meanwhile: recover, sum over the survivors.

        Raises:
            TooFewRanks: the survivors would be fewer than --min-np, or (`StateLost`) the lost ranks held a shard
                of the optimizer's state.
        """
        while True:
            summed = tensor.clone()
            try:
                dist.all_reduce(summed)
                if self._shrink:
                    commit()
            except Exception as error:
                lost = _lost(error) if self._shrink else None
                if lost is None:
                    raise
                self._recover(lost)
                continue
            return tensor.copy_(summed)

    def _save(self, path: str) -> None:
        """Rank 0 writes the state after the epoch's last step atomically (the same on every survivor).

        Raises:
            StateLost: a rank was lost while a sharded optimizer's state was gathered on rank 0.
        """
        try:
            sharded.gather(self.optimizer)  # a sharded optimizer's whole state, on rank 0 (collective)
        except Exception as error:
            lost = _lost(error) if self._shrink else None
            if lost is None:
                raise
            self._recover(lost)  # raises StateLost: only a sharded optimizer gathers
        if self.rank == 0:
            state = {
                "format": CHECKPOINT_FORMAT,
                "seed": self.seed,
                "samples": len(self.dataset),
                "epoch": self.epoch + 1,
                "steps": self.steps,
                "world_size": self.world_size,
                "model": self.module.state_dict(),
                "optimizer": self.optimizer.state_dict(),
            }
            files.save(state, path)
        self.saved = self.steps

    def _resume(self, path: str) -> None:
        """Rank 0 reads the checkpoint, if there is one, for every rank; load it and say so on rank 0.

        Raises:
            UsageError: it was written in another format, or for another seed or data set size.
        """
        box: list[Any] = [files.load(path) if self.rank == 0 and os.path.exists(path) else None]
        dist.broadcast_object_list(box, src=0)
        state = box[0]
        if state is None:
            return
        if state.get("format") != CHECKPOINT_FORMAT:
            raise UsageError(
                f"{path} is not a checkpoint of hpcdist.Survivors (format {state.get('format')!r}, not "
                f"{CHECKPOINT_FORMAT!r}); give another path, or move the file away to start afresh"
            )
        here = {"seed": self.seed, "samples": len(self.dataset)}
        for key in _MUST_MATCH:
            if state[key] != here[key]:
                raise UsageError(
                    f"{path} was written with {key}={state[key]}, this loop has {key}={here[key]}; the epochs' "
                    f"order depends on it: pass {key} {state[key]}, or move the file away to start afresh"
                )
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.resumed, self.steps = state["epoch"], state["steps"]
        if self.rank == 0:
            print(
                f"hpcdist: resumed from {path} after epoch {self.resumed}, step {self.steps} (written by "
                f"{state['world_size']} ranks; {self.world_size} now)",
                flush=True,
            )

    def _hand_over(self) -> None:
        """Rank 0 sends the model, the optimizer's state and the loop's place to every rank; the spares that joined
        take them (the others hold them already, the same as rank 0's)."""
        place = (self.epoch, self.epoch_step, self._cursor, self.steps, self.saved)
        state = {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(), "place": place}
        box: list[Any] = [state if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        if spares.joining():
            self.module.load_state_dict(box[0]["model"])
            self.optimizer.load_state_dict(box[0]["optimizer"])
            epoch, epoch_step, cursor, self.steps, self.saved = box[0]["place"]
            self._joined_at = (epoch, epoch_step, cursor)

    def _wrap(self, layout: list[list[int]] | None = None) -> DistributedDataParallel:
        """The module in a DDP over the current default group (its device's index for CUDA), its gradient buckets
        laid out as `layout` from its first step (None: as DDP lays them out)."""
        device = next(self.module.parameters()).device
        ids = [device.index] if device.type == "cuda" else None
        with laid_out(self.module, layout):
            return DistributedDataParallel(self.module, device_ids=ids, **self._ddp_options)

    def _agree_layout(self) -> list[list[int]] | None:
        """Rank 0's last DDP's gradient buckets, for every rank (a spare has none; a survivor's own may differ if a
        rank was lost as DDP rebuilt them)."""
        box: list[Any] = [self._layout if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        self._layout = box[0]
        return self._layout

    def _recover(self, error: BaseException | None) -> None:
        """Shrink to the survivors, drop the failed step's gradients, hand joining spares the state, wrap the module in
        a new DDP; say it on rank 0.

        A rank lost while the new DDP is made (it broadcasts rank 0's parameters) is one more failure: recover again.

        Raises:
            StateLost: the lost ranks held a shard of the optimizer's state (said once for the job).
        """
        with contextlib.suppress(AttributeError):  # a spare that joins has none yet
            self._layout = layout_of(self.model, self.module)
            del self.model  # its reducer's hooks on the module's parameters go with it
        while True:
            recovery = recover(error)
            self.recoveries.append(recovery)
            if self._shard is not None:  # said once for the job, as TooFewRanks is (hpcdist mpirun, or survivor 0)
                raise sharded.lost_state(recovery, self._shard, self.checkpoint, self._restarts)
            if recovery.rank == 0:
                print(recovery.line(self.steps + 1), flush=True)  # the step they redo, counted from 1
            self.optimizer.zero_grad(set_to_none=True)
            if len(recovery.joined) == recovery.after:  # every rank that trained was lost: no one holds the state
                raise TooFewRanks(
                    recovery.lost,
                    recovery.hosts,
                    recovery.during,
                    why=f"{lost_text(recovery.lost, recovery.hosts, recovery.during)}: every rank that trained was "
                    "lost, so the spares have no state to take; the job ends (or restarts from its checkpoint)",
                    survivor=recovery.rank,
                )
            try:
                if recovery.joined:
                    self._hand_over()
                self.model = self._wrap(self._agree_layout())
                return
            except Exception as again:
                lost = _lost(again)
                if lost is None:
                    raise
                error = lost


def _lost(error: BaseException) -> RanksLost | None:
    """The RanksLost behind `error` (hpcdist's own, or a torch collective's error while MPI reports a failure), or
    None: then `error` is the program's own (an error that no collective raises is never waited on)."""
    if not isinstance(error, (RanksLost, RuntimeError)):  # torch's DistError is a RuntimeError
        return None
    return failure_of(error)
