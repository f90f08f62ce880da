"""`--step-log FILE`: rank 0 appends `epoch step world_size unix_time` for every completed step (torch-free).

The line is written and flushed as the step completes, so a reader (`hpcdist bench recovery`) sees the steps as they
happen, and a rank killed right after a step has already logged it. The file is opened for each line: a job that
shrinks or restarts appends to the same file from whichever rank is rank 0 then, and each line costs tens of
microseconds. Epochs and steps are counted from 1; `step` is the step's number within its epoch.
"""

from __future__ import annotations

import time

from .. import records
from ..errors import UsageError

__all__ = ["LoggedStep", "read", "record"]


@records.record(frozen=True)
class LoggedStep:
    """One line of a step log."""

    epoch: int
    step: int
    world_size: int
    time: float  # seconds since the epoch (time.time()) when the step completed


def record(path: str | None, rank: int, world_size: int, epoch: int, step: int) -> None:
    """On rank 0, with a path: append `epoch step world_size unix_time` to it, flushed; elsewhere nothing."""
    if path is None or rank != 0:
        return
    line = f"{epoch} {step} {world_size} {time.time():.6f}\n"
    with open(path, "a", encoding="ascii") as log:
        log.write(line)


def read(path: str) -> list[LoggedStep]:
    """The steps a log holds, in order; a last line cut short (its writer killed mid-line) is left out.

    Raises:
        UsageError: a line that is not `epoch step world_size unix_time`, naming the file and line.
    """
    with open(path, encoding="ascii", errors="replace") as log:
        lines = log.read().split("\n")
    steps = []
    for number, line in enumerate(lines[:-1], 1):  # the text after the last newline is an unfinished line
        fields = line.split()
        try:
            if len(fields) != 4:
                raise ValueError
            steps.append(LoggedStep(int(fields[0]), int(fields[1]), int(fields[2]), float(fields[3])))
        except ValueError:
            raise UsageError(
                f"{path}:{number}: expected `epoch step world_size unix_time`, got {line!r}; "
                f"give a file written by `hpcdist run ddp --step-log`"
            ) from None
    return steps
