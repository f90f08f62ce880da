"""A rank's signals: its non-Python program (`run_child`), a child of the shim, gets the signals the rank receives;
`relay_sigterm` makes the signal a launcher passes on for SIGTERM (contract.RELAYED_SIGTERM) SIGTERM.

A rank's program that is not Python runs as a child of the shim with the torch variables set, and the signals the
rank receives (mpirun passes on Ctrl-C, SIGTERM and the others) are passed on to it. (A tool whose output hang
forensics reads, such as py-spy, runs through `proctree.capture`.)
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping, Sequence
from types import FrameType

from ..contract import RELAYED_SIGTERM

__all__ = ["relay_sigterm", "run_child"]


def relay_sigterm() -> None:
    """From now on, RELAYED_SIGTERM is SIGTERM to this rank: its own handler runs, or it ends as SIGTERM ends it."""
    if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
        signal.signal(RELAYED_SIGTERM, _sigterm)


def _sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM to this process (a child program then gets it from run_child's handler)."""
    os.kill(os.getpid(), signal.SIGTERM)


def run_child(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run a rank's non-Python program with `env`, passing on the signals this process receives; its status
    (negative: killed by that signal).

    Raises:
        UsageError: the program cannot start (missing, not executable, no program); the message says what to do.
    """
    from .. import proctree  # subprocess's cost, paid by a rank whose program is not Python only

    proc = proctree.start(argv, env=dict(env))

    def forward(signum: int, frame: FrameType | None) -> None:
        proc.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()  # only the main thread may set handlers
    previous = {sig: signal.signal(sig, forward) for sig in proctree.FORWARDED} if main else {}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
