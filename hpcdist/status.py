"""How a process ended, in words: `exit code 3`, `killed by SIGKILL` (a leaf: both sides of a launch say it so)."""

from __future__ import annotations

import re
import signal

__all__ = ["ABORTED", "describe_status", "status_of"]

ABORTED = "called MPI_Abort"  # how a rank ended that called MPI_Abort: said by the rank itself, or by its launcher

_DESCRIBED = re.compile(r"exit code (?P<code>\d+)|killed by (?:signal (?P<number>\d+)|(?P<name>SIG[A-Z0-9]+))")


def describe_status(code: int) -> str:
    """'exit code 3', or for a negative status or a signal number 'killed by SIGKILL' ('killed by signal 40')."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:  # a number Python has no name for, e.g. a real-time signal
        return f"killed by signal {-code}"


def status_of(described: str) -> int | None:
    """A shell's status for what `describe_status` said (`exit code 3`: 3, `killed by SIGTERM`: 143), None if none."""
    match = _DESCRIBED.search(described)
    if match is None:
        return None
    if match["code"] is not None:
        return int(match["code"])
    number = match["number"]
    return 128 + (int(number) if number is not None else signal.Signals[match["name"]].value)
