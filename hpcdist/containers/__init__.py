"""The container runtimes a rank can run in, one plug-in per runtime, and the registry the rest of hpcdist asks.

The hybrid model of HPC sites: the host's launcher (mpirun, srun) starts every rank, and each rank's program runs
inside an image whose own MPI meets the host's launcher through PMIx or PMI. Each module of this package beside
`base` and `enter` is one runtime (`apptainer`, `singularity`, `podman`, `docker`, `enroot`, `pyxis`): a
`base.Runtime` subclass registered with `@register`, which owns its run line around a rank's program (`wrap`), the
words its launcher takes instead (`launcher_options`: pyxis's for srun) and the one command the doctor runs inside
the image (`probe`). `enter` starts a runtime from the host side of a rank: it carries the rank's launcher variables
into a runtime that cannot take them by prefix, and passes on the signal Open MPI relays for SIGTERM, which Go's
runtimes drop.

The registry: `lookup` (by name), `names`, `every`, `installed` (the first runtime whose program a PATH has).

Pure: imports only the leaves (errors, contract, plugins: the registry's kind) and its own modules; never families,
schedulers, launching, the runtime, torch or mpi4py. What it needs of the machine (a program on PATH) is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..errors import UsageError
from ..plugins import Registry
from .base import Container, Runtime

__all__ = ["Container", "Runtime", "every", "installed", "lookup", "names", "register"]

# each module but base and enter (run with python -m in a container) registers its runtime
_RUNTIMES: Registry[Runtime] = Registry(__path__, __name__, besides=("enter",))
_R = TypeVar("_R", bound=type[Runtime])


def register(cls: _R) -> _R:
    """Class decorator: make `cls` (a Runtime subclass with its own `name`) the runtime of that name."""
    _RUNTIMES.add(cls)
    return cls


def names() -> tuple[str, ...]:
    """The runtimes' names, as --container-runtime lists them."""
    return tuple(r.name for r in every())


def every() -> tuple[Runtime, ...]:
    """Every runtime, in the order `installed` tries them."""
    return tuple(sorted(_RUNTIMES.every(), key=lambda r: r.order))


def lookup(name: str, where: str = "--container-runtime") -> Runtime:
    """The runtime called `name`.

    Raises:
        UsageError: no runtime has that name (`where` names the option that gave it).
    """
    runtime = _RUNTIMES.get(name)
    if runtime is None:
        raise UsageError(f"{where} {name!r} is not a container runtime hpcdist knows; use one of {', '.join(names())}")
    return runtime


def installed(which: Callable[[str], str | None]) -> Runtime:
    """The first runtime (in `every`'s order) whose program `which` finds; pyxis, srun's own, is never guessed.

    Raises:
        UsageError: none is installed.
    """
    for runtime in every():
        if not runtime.launcher_only and which(runtime.program) is not None:
            return runtime
    raise UsageError(
        "--container-image needs a container runtime, and none of "
        f"{', '.join(r.program for r in every() if not r.launcher_only)} is on PATH; load your site's apptainer "
        "module, install podman, or name one with --container-runtime (pyxis: under srun, --mpi srun)"
    )
