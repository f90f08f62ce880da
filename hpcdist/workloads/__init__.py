"""Workloads run as `hpcdist run NAME`: each checks its own result and returns a problem or None.

Also the user-facing pieces they are built on: `hpcdist.map` (`taskmap`), atomic checkpoints (`checkpoint`) and
stopping at a step boundary on preemption (`preemption`).
May import: errors, values, waits, control, runtime. Never the CLI. Listing the workloads never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable
from typing import Any

from ..values import MAX_COUNT, parse_whole

__all__ = ["WORKLOADS", "add_arguments", "defaults", "load"]

_MAX_SEED = 2**62  # torch's generators take up to 2**64 - 1; epochs and ranks are added to the seed

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every workload's own options to `hpcdist run`, one group per workload (never imports torch)."""
    ddp = parser.add_argument_group("ddp", "options of the ddp workload")
    ddp.add_argument("--epochs", type=_positive, default=3, help="epochs to train (default: 3)")
    ddp.add_argument("--batch-size", type=_positive, default=32, help="samples per rank per step (default: 32)")
    ddp.add_argument("--samples", type=_positive, default=2048, help="size of the synthetic data set (default: 2048)")
    ddp.add_argument("--seed", type=_seed, default=0, help="seed of the data, the model and the shuffling (default: 0)")
    ddp.add_argument(
        "--checkpoint-dir",
        type=_directory,
        metavar="DIR",
        help="write DIR/ddp.pt atomically after every epoch (default: no checkpoints)",
    )
    ddp.add_argument(
        "--resume",
        action="store_true",
        help="continue from DIR/ddp.pt if it exists (needs --checkpoint-dir and the same world size)",
    )
    ddp.add_argument(
        "--stop-after-epoch",
        type=_positive,
        metavar="N",
        help="stop after epoch N has been checkpointed, as if the job had been killed (for tests)",
    )


def load(name: str) -> Callable[[Any, argparse.Namespace | None], str | None]:
    """The workload for a name in WORKLOADS, called as fn(session, options); options may be None (defaults)."""
    module, func = WORKLOADS[name].split(":")
    fn = getattr(importlib.import_module(f"{__name__}.{module}"), func)
    if name in _WITH_OPTIONS:
        return fn

    def without_options(session: Any, options: argparse.Namespace | None = None) -> str | None:
        return fn(session)

    return without_options


def defaults() -> argparse.Namespace:
    """Every workload option at its default value, for callers that bring no command line."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return parser.parse_args([])


def _positive(text: str) -> int:
    """An integer from 1 to MAX_COUNT, for argparse."""
    value = parse_whole(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    if not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at least 1 and at most {MAX_COUNT}, got {text!r}")
    return value


def _seed(text: str) -> int:
    """A seed torch's generators take whole (0 to 2**62), for argparse."""
    value = parse_whole(text)
    if value is None or value > _MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {_MAX_SEED}, got {text!r}")
    return value


def _directory(text: str) -> str:
    """A directory, or a path where one can be made (its nearest existing parent is a directory), for argparse."""
    path = os.path.abspath(text)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path!r} is a file, not a directory; give a directory (made if missing)")
    return text
