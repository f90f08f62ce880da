"""A rank's non-Python program (`run_child`): a child of the shim, with the rank's signals passed on.

A rank's program that is not Python runs as a child of the shim with the torch variables set, and the signals the
rank receives (mpirun passes on Ctrl-C, SIGTERM and the others) are passed on to it. (A tool whose output hang
forensics reads, such as py-spy, runs through `proctree.capture`.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from types import FrameType

from ..errors import UsageError

__all__ = ["run_child"]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def run_child(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run a rank's non-Python program with `env`, passing on the signals this process receives; its status
    (negative: killed by that signal).

    Raises:
        UsageError: the program cannot start (missing, not executable, no program); the message says what to do.
    """
    try:
        proc = subprocess.Popen(list(argv), env=dict(env))
    except FileNotFoundError:
        raise UsageError(_not_found(argv[0])) from None
    except PermissionError:
        raise UsageError(f"program {argv[0]!r} is not executable; chmod +x it or run it with its interpreter") from None
    except OSError as exc:  # e.g. ENOEXEC: an executable file that is no program
        raise UsageError(
            f"program {argv[0]!r} cannot be started: {exc.strerror or exc}; check that it is a program"
        ) from None

    def forward(signum: int, frame: FrameType | None) -> None:
        proc.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()  # only the main thread may set handlers
    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED} if main else {}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _not_found(program: str) -> str:
    """Why `program` could not start although exec found nothing wrong with the call, and what to do."""
    if os.sep not in program:
        return f"program {program!r} not found on PATH; check the name, give its full path or add its directory to PATH"
    if os.path.exists(program):
        return f"program {program!r} names an interpreter on its #! line that does not exist; fix that line"
    return f"program {program!r} does not exist; check the path, or give the name of a program on PATH"
