"""The compiled mpi backend (native.cpp): choosing it, loading it (built by building.py), its watchdog.

The MPI_NATIVE setting picks the implementation: `auto` (the default: the compiled one when it builds, otherwise
the Python group, with one line saying why), `1` (the compiled one or an error), `0` (the Python group only).
building.py builds it once per cache (one process of however many start together; a failure is recorded, not
retried), keyed by the source, torch, Python and the libmpi mpi4py loaded, in the CACHE_DIR setting's directory,
else `<venv>/share/hpcdist/native` if writable, else ~/.cache/hpcdist/native; `python -m hpcdist.mpi_backend.native`
builds it ahead of time (`make env` does, for each MPI venv): the variant the MPI_SANITIZER setting names, a test
build under a sanitizer for hpcdist's own tests (variants.py), else the normal one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import ModuleType

from mpi4py import MPI

from .. import abort, settings
from ..errors import UsageError
from ..records import record
from . import variants
from .building import BuildFailed, BuildFailedBefore, build, built
from .errors import NativeUnavailable

__all__ = ["active", "build", "load", "loaded", "mode", "start_watchdog"]

_WATCH_EVERY = 0.2  # seconds between the watchdog's looks at the calls in flight


@record
class _Native:
    """The compiled module once `load` decided (None: the Python group), and the thread that watches its calls.

    One per process (`_NATIVE`): an extension module is loaded once per process, and torch's creator hook asks.
    """

    decided: bool = False
    module: ModuleType | None = None
    watchdog: threading.Thread | None = None


_NATIVE = _Native()


def mode() -> str:
    """`auto`, `1` or `0`, from the MPI_NATIVE setting.

    Raises:
        NativeUnavailable: the variable holds anything else.
    """
    try:
        return settings.mpi_native(os.environ)
    except UsageError as exc:
        raise NativeUnavailable(str(exc)) from None


def load() -> ModuleType | None:
    """The compiled module if the MPI_NATIVE setting allows it and it builds; else None (auto says why, once).

    Raises:
        NativeUnavailable: the setting is 1 and it cannot be had.
    """
    if _NATIVE.decided:
        return _NATIVE.module
    module = None
    chosen = mode()
    if chosen != "0":
        try:
            module = build()
        except NativeUnavailable as exc:
            if chosen == "1":
                raise
            # Said once: by the process whose build failed, else (a reason every rank meets alike) by rank 0; a
            # failure recorded by an earlier build is not said again.
            alike = not isinstance(exc, BuildFailedBefore) and MPI.COMM_WORLD.Get_rank() == 0
            if isinstance(exc, BuildFailed) or alike:
                print(f"hpcdist: the native mpi backend is unavailable, using the Python one: {exc}", file=sys.stderr)
    _NATIVE.decided, _NATIVE.module = True, module
    return module


def loaded() -> ModuleType | None:
    """The compiled module if a group of this process runs on it, else None (never builds or loads it)."""
    return _NATIVE.module


def active() -> bool:
    """Whether this process's mpi4py groups run on the compiled backend (known once the first group exists)."""
    return _NATIVE.module is not None


def start_watchdog(module: ModuleType) -> None:
    """Start (once) the thread that ends the job when a compiled call outlives its group's timeout."""
    if _NATIVE.watchdog is not None:
        return
    thread = threading.Thread(target=_watch, args=(module,), name="hpcdist-mpi-watchdog", daemon=True)
    _NATIVE.watchdog = thread
    thread.start()


def _watch(module: ModuleType) -> None:
    while True:
        time.sleep(_WATCH_EVERY)
        late = module.overdue()
        if late:
            for text in late:
                print(f"hpcdist.mpi_backend: {text}", file=sys.stderr, flush=True)
            abort.abort_job(1)
            os._exit(1)  # MPI is not initialised any more: nobody else can end this process


def _main() -> int:
    """Build the variant the environment names (retrying a recorded failure); load the normal one to prove it."""
    try:
        variant = variants.chosen(os.environ)
        path = built(verbose="-v" in sys.argv, retry=True)  # by hand: also where a failure is recorded
        if variant.runtime is None:
            build()
    except UsageError as exc:  # NativeUnavailable too
        print(f"hpcdist: error: {exc}", file=sys.stderr)
        return 2
    if variant.runtime is None:
        print(f"hpcdist: native mpi backend ready: {path}")
    else:
        print(f"hpcdist: native mpi backend's {variant.name} test build ready (loads where {variant.runtime} is "
              f"preloaded): {path}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(_main())
