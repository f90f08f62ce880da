"""The user's settings, read: one typed reader per setting of `settingtable`, each checking its value (a leaf).

Each reader has its setting's name in lower case (`timeout(environ)` reads `TIMEOUT`) and raises UsageError naming
the variable and how to fix it. The readers take the environment as a mapping: the entry that reads the world hands
it in. The settings themselves (name, what each takes, its default, what it does) are `settingtable`'s.

What `hpcdist mpirun` hands each rank is not a setting but the launch's contract with its ranks (`contract`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import UsageError
from .settingtable import (
    CACHE_DIR,
    DEBUG,
    DEFAULT_BUILD_WAIT,
    DEFAULT_KILL_WAIT,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_TIMEOUT,
    FORENSICS,
    FR_DIR,
    HEARTBEAT_TIMEOUT,
    JOB_RATE,
    KILL_WAIT,
    LAUNCH_DIR,
    MIN_RATE,
    MPI_BUILD_WAIT,
    MPI_CUDA_AWARE,
    MPI_NATIVE,
    MPI_RING_BYTES,
    MPI_SANITIZER,
    MPIRUN,
    OUTPUT_RATE,
    SANITIZERS,
    STARTUP_TIMEOUT,
    STORE,
    SUBMIT_DIR,
    TEMPLATE_DIR,
    TIMEOUT,
    TOPOLOGY,
    Setting,
)
from .values import STORES, check_seconds, parse_seconds

__all__ = [
    "cache_dir",
    "debug",
    "forensics",
    "fr_dir",
    "heartbeat_timeout",
    "kill_wait",
    "launch_dir",
    "mpi_build_wait",
    "mpi_cuda_aware",
    "mpi_native",
    "mpi_ring_bytes",
    "mpi_sanitizer",
    "mpirun",
    "output_rate",
    "startup_timeout",
    "store",
    "submit_dir",
    "template_dir",
    "timeout",
    "topology",
]

_MAX_RATE = float(1 << 40)


def _on(raw: str | None) -> bool:
    """A switch's value: set and neither empty nor 0."""
    return raw not in (None, "", "0")


def debug(environ: Mapping[str, str]) -> bool:
    """Whether DEBUG is on: set, and neither empty nor 0."""
    return _on(DEBUG.raw(environ))


def timeout(environ: Mapping[str, str]) -> float:
    """TIMEOUT in seconds (DEFAULT_TIMEOUT when unset): finite, above 0, at most 30 days.

    Raises:
        UsageError: the value is no such number of seconds.
    """
    return _positive_seconds(TIMEOUT, environ, DEFAULT_TIMEOUT, "300")


def startup_timeout(environ: Mapping[str, str]) -> float:
    """STARTUP_TIMEOUT in seconds (DEFAULT_STARTUP_TIMEOUT when unset): finite, above 0, at most 30 days.

    Raises:
        UsageError: the value is no such number of seconds.
    """
    return _positive_seconds(STARTUP_TIMEOUT, environ, DEFAULT_STARTUP_TIMEOUT, "600")


def _positive_seconds(setting: Setting, environ: Mapping[str, str], default: float, example: str) -> float:
    """`setting` in seconds (`default` when unset): finite, above 0, at most 30 days (UsageError otherwise, with
    `e.g. NAME=example`)."""
    raw = setting.raw(environ)
    if raw is None:
        return default
    value = parse_seconds(raw)
    hint = f"e.g. {setting.name}={example}"
    if value is None:
        raise UsageError(f"{setting.name}={raw!r} is not a number of seconds; set {hint}")
    return check_seconds(value, f"{setting.name}={raw!r}", hint)


def store(environ: Mapping[str, str]) -> str:
    """STORE: one of STORES ("auto" when unset).

    Raises:
        UsageError: another value.
    """
    raw = STORE.raw(environ) or "auto"
    if raw not in STORES:
        raise UsageError(f"unknown store {raw!r}; choose one of {', '.join(STORES)} (store= or {STORE.name})")
    return raw


def forensics(environ: Mapping[str, str]) -> bool:
    """Whether FORENSICS leaves hang forensics on (anything but 0)."""
    return FORENSICS.raw(environ) != "0"


def mpirun(environ: Mapping[str, str]) -> str | None:
    """MPIRUN: the mpirun to run, None when unset (or empty)."""
    return MPIRUN.raw(environ) or None


def heartbeat_timeout(environ: Mapping[str, str]) -> float | None:
    """HEARTBEAT_TIMEOUT in seconds: None when unset, 0.0 when 0 (off), else above 0 and at most 30 days.

    Raises:
        UsageError: the value is no number of seconds, or above 30 days.
    """
    return _seconds_or_off(HEARTBEAT_TIMEOUT, environ, "30 (0: off)")


def kill_wait(environ: Mapping[str, str]) -> float:
    """KILL_WAIT in seconds (DEFAULT_KILL_WAIT when unset): 0 or more, at most 30 days.

    Raises:
        UsageError: the value is no such number of seconds.
    """
    value = _seconds_or_off(KILL_WAIT, environ, "30")
    return DEFAULT_KILL_WAIT if value is None else value


def _seconds_or_off(setting: Setting, environ: Mapping[str, str], example: str) -> float | None:
    """`setting` in seconds: None when unset, 0.0 when 0, else above 0 and at most 30 days (UsageError otherwise,
    with `e.g. NAME=example`)."""
    raw = setting.raw(environ)
    if raw is None:
        return None
    value = parse_seconds(raw)
    if value == 0:
        return 0.0
    return check_seconds(
        value if value is not None else raw, f"{setting.name}={raw!r}", f"e.g. {setting.name}={example}"
    )


def output_rate(environ: Mapping[str, str], np: int) -> float:
    """OUTPUT_RATE in bytes per second for each of `np` ranks (0: no limit); when unset, each rank's share of
    JOB_RATE, at least MIN_RATE.

    Raises:
        UsageError: the value is no plain number.
    """
    raw = OUTPUT_RATE.raw(environ)
    if not raw:
        return float(max(MIN_RATE, JOB_RATE // max(np, 1)))
    rate = parse_seconds(raw)  # a plain non-negative number, as seconds are written
    if rate is None or rate > _MAX_RATE:
        raise UsageError(
            f"{OUTPUT_RATE.name}={raw!r}: give the bytes per second each rank may print to the launcher, "
            f"e.g. {OUTPUT_RATE.name}=65536 (0: no limit)"
        )
    return rate


def template_dir(environ: Mapping[str, str]) -> str | None:
    """TEMPLATE_DIR: a directory of site templates, None when unset (or empty).

    Raises:
        UsageError: it is no directory.
    """
    path = TEMPLATE_DIR.raw(environ)
    if not path:
        return None
    if not os.path.isdir(path):
        raise UsageError(f"${TEMPLATE_DIR.name} {path!r} is not a directory; point it at a directory of *.j2 templates")
    return path


def submit_dir(environ: Mapping[str, str]) -> str | None:
    """SUBMIT_DIR: where `hpcdist.submit` writes its job directories, None when unset (or empty)."""
    return SUBMIT_DIR.raw(environ) or None


def launch_dir(environ: Mapping[str, str]) -> str | None:
    """LAUNCH_DIR: where `hpcdist.launch` writes its private launch directories, None when unset (or empty)."""
    return LAUNCH_DIR.raw(environ) or None


def cache_dir(environ: Mapping[str, str]) -> str | None:
    """CACHE_DIR: where the compiled mpi backend's cache lives, None when unset (or empty)."""
    return CACHE_DIR.raw(environ) or None


def mpi_build_wait(environ: Mapping[str, str]) -> float:
    """MPI_BUILD_WAIT in seconds (DEFAULT_BUILD_WAIT when unset).

    Raises:
        UsageError: the value is no positive number.
    """
    text = MPI_BUILD_WAIT.raw(environ)
    if text is None:
        return DEFAULT_BUILD_WAIT
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise UsageError(f"${MPI_BUILD_WAIT.name}={text!r} is not a positive number of seconds; unset it or give one")
    return seconds


def mpi_native(environ: Mapping[str, str]) -> str:
    """MPI_NATIVE: "auto" (also when unset or empty), "1" or "0", in any case and with blanks around it.

    Raises:
        UsageError: anything else.
    """
    value = (MPI_NATIVE.raw(environ) or "auto").strip().lower() or "auto"
    if value not in ("auto", "1", "0"):
        raise UsageError(f"${MPI_NATIVE.name}={value!r} is not one of auto, 1, 0; unset it or pick one")
    return value


def mpi_sanitizer(environ: Mapping[str, str]) -> str | None:
    """MPI_SANITIZER: one of SANITIZERS, None when unset or empty (the normal build).

    Raises:
        UsageError: another value.
    """
    raw = MPI_SANITIZER.raw(environ)
    if not raw:
        return None
    if raw not in SANITIZERS:
        raise UsageError(
            f"${MPI_SANITIZER.name}={raw!r} is not one of {', '.join(SANITIZERS)}; unset it for the normal build "
            "or pick one (a test build)"
        )
    return raw


def mpi_ring_bytes(environ: Mapping[str, str]) -> int | None:
    """MPI_RING_BYTES: the size from which all_reduce takes the ring (0 or less: never), None when unset.

    Raises:
        UsageError: the value is no whole number.
    """
    text = MPI_RING_BYTES.raw(environ)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(
            f"{MPI_RING_BYTES.name}={text!r} is not a whole number of bytes; unset it or set e.g. 262144 "
            "(0 turns the ring off)"
        ) from None


def mpi_cuda_aware(environ: Mapping[str, str]) -> bool:
    """Whether MPI_CUDA_AWARE=1 says the MPI library reads GPU memory itself."""
    return MPI_CUDA_AWARE.raw(environ) == "1"


def topology(environ: Mapping[str, str]) -> str | None:
    """TOPOLOGY: the hwloc XML file to plan from, None when unset (or empty: this machine's sysfs)."""
    return TOPOLOGY.raw(environ) or None


def fr_dir(environ: Mapping[str, str]) -> str | None:
    """FR_DIR: where the Flight Recorder dumps go, None when unset (or empty)."""
    return FR_DIR.raw(environ) or None
