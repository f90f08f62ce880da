"""The only module that spawns processes: mpirun for `hpcdist mpirun`, and a rank's child program."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence
from types import FrameType

from .errors import UsageError

__all__ = ["run_child", "run_mpirun"]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _spawn(argv: Sequence[str], env: Mapping[str, str] | None, what: str) -> int:
    """Run argv to completion, passing on the signals this process receives; return its status."""
    try:
        proc = subprocess.Popen(list(argv), env=None if env is None else dict(env))
    except FileNotFoundError:
        raise UsageError(f"{what} {argv[0]!r} not found on PATH; check the name or give its full path") from None
    except PermissionError:
        raise UsageError(f"{what} {argv[0]!r} is not executable; chmod +x it or run it with its interpreter") from None

    def forward(signum: int, frame: FrameType | None) -> None:
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_mpirun(argv: Sequence[str]) -> int:
    """Run the mpirun command line built by hpcdist and return mpirun's exit status."""
    return _spawn(argv, None, "the MPI launcher")


def run_child(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run a rank's non-Python program with the torch variables set; negative status = killed by signal."""
    return _spawn(argv, env, "program")
