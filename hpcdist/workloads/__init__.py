"""Workloads run as `hpcdist run NAME`: each checks its own result and returns a problem or None.

Also the user-facing pieces they are built on: `hpcdist.map` (`taskmap`), stopping at a step boundary on preemption
(`preemption`) and the per-step log that recovery is timed by (`steplog`).
May import: the leaves (errors, values, waits, contract, settings, settingtable), runtime, resilience (the survivors'
loop, atomic checkpoints), forensics (regions, --report). Never the CLI. Listing the workloads never imports torch.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from ..records import record
from ..values import ON_FAILURE, check_count

__all__ = ["MAX_SEED", "WORKLOADS", "WorkloadOptions", "load"]

MAX_SEED = 2**62  # torch's generators take up to 2**64 - 1; epochs and ranks are added to the seed

# name -> "module:function"; imported only when run, so listing them never imports torch
WORKLOADS = {
    "p2p": "p2p:run",
    "broadcast": "collectives:broadcast",
    "allreduce": "collectives:allreduce",
    "reduce": "collectives:reduce",
    "gather": "collectives:gather",
    "ddp": "ddp:run",
    "taskmap": "taskmap:run",
}

# workloads whose function is fn(session, options); the others are fn(session)
_WITH_OPTIONS = frozenset({"ddp"})


@record(frozen=True)
class WorkloadOptions:
    """The workloads' own options (`hpcdist run ddp --epochs 3 ...`), each field named after its option."""

    epochs: int = 3  # epochs to train
    batch_size: int = 32  # samples per rank per step
    samples: int = 2048  # size of the synthetic data set
    seed: int = 0  # of the data, the model and the shuffling
    checkpoint_dir: str | None = None  # DIR/ddp.pt written atomically after every epoch
    resume: bool = False  # continue from DIR/ddp.pt if it exists
    stop_after_epoch: int | None = None  # stop after this epoch is checkpointed, as if killed (for tests)
    report: bool = False  # trace the training; rank 0 prints the straggler table after it
    step_log: str | None = None  # rank 0 appends `epoch step world_size unix_time` per completed step (steplog)
    on_failure: str = "end"  # "shrink": the survivors of a lost rank carry on from memory (ULFM; ddp only), and
    # with checkpoint_dir a restart resumes from the last epoch's checkpoint

    def __post_init__(self) -> None:
        """Refuse what training would refuse, before anything starts.

        Raises:
            UsageError: a count below 1, a seed out of torch's range, a checkpoint directory that is a file, or
                --resume without --checkpoint-dir, an unknown --on-failure, or --on-failure shrink with --report.
        """
        for name in ("epochs", "batch_size", "samples"):
            check_count(getattr(self, name), f"--{name.replace('_', '-')}", 1, f"e.g. --{name.replace('_', '-')} 8")
        check_count(self.seed, "--seed", 0, f"a seed from 0 to {MAX_SEED}, e.g. --seed 1", high=MAX_SEED)
        if self.stop_after_epoch is not None:
            check_count(self.stop_after_epoch, "--stop-after-epoch", 1, "e.g. --stop-after-epoch 2")
        if self.checkpoint_dir is not None:
            _check_directory(self.checkpoint_dir)
        elif self.resume:
            raise UsageError("--resume needs --checkpoint-dir DIR (the directory holding ddp.pt)")
        _check_on_failure(self)


def load(name: str) -> Callable[[Any, WorkloadOptions | None], str | None]:
    """The workload for a name in WORKLOADS, called as fn(session, options); options may be None (defaults)."""
    module, func = WORKLOADS[name].split(":")
    fn = getattr(importlib.import_module(f"{__name__}.{module}"), func)
    if name in _WITH_OPTIONS:
        return fn

    def without_options(session: Any, options: WorkloadOptions | None = None) -> str | None:
        return fn(session)

    return without_options


def _check_directory(text: str) -> None:
    """Refuse a path that is no directory and where none can be made (its nearest existing parent is a file)."""
    path = os.path.abspath(text)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise UsageError(
            f"--checkpoint-dir {text!r}: {path!r} is a file, not a directory; give a directory (made if missing)"
        )


def _check_on_failure(options: WorkloadOptions) -> None:
    """--on-failure is end or shrink; shrink trains through hpcdist.Survivors, whose calls --report cannot trace."""
    if options.on_failure not in ON_FAILURE:
        raise UsageError(f"--on-failure {options.on_failure!r}: choose one of {', '.join(ON_FAILURE)}")
    if options.on_failure == "shrink" and options.report:
        raise UsageError(
            "--on-failure shrink does not take --report: its training through hpcdist.Survivors is not traced; "
            "leave out --report, or use --on-failure end"
        )
