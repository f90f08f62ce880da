"""How a process ended, in words: `exit code 3`, `killed by SIGKILL` (a leaf: both sides of a launch say it so)."""

from __future__ import annotations

import signal

__all__ = ["describe_status"]


def describe_status(code: int) -> str:
    """'exit code 3', or for a negative status or a signal number 'killed by SIGKILL' ('killed by signal 40')."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:  # a number Python has no name for, e.g. a real-time signal
        return f"killed by signal {-code}"
