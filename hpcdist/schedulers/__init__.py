"""The schedulers hpcdist runs under, one plug-in per scheduler, and the registry the rest of hpcdist asks.

Each module of this package beside `base` is one scheduler (`slurm`, `pbs`, `lsf`, `flux`, `gridengine`,
`kubernetes`): a
`base.Scheduler` subclass registered with `@register`, which owns what hpcdist knows of it (an allocation's hosts
and slots, whether its MPI's launcher reads them itself, the signal it sends every process of a job it ends,
whether it spans hosts, the variables its tasks see and their nodes, its job ids). Each module is named for its
scheduler. The modules are found and imported when the registry is first asked, so adding a scheduler is adding one
file; a test may register one of its own. A rank whose launcher named the scheduler job it runs in, or none, reads
that scheduler's variables alone (`rank_sources`), and imports no other scheduler's module.

The registry: `lookup` (by name), `names`, `every`, `current` (the scheduler whose allocation this process runs in),
`spans_hosts`, `job_id`, `of_ranks` (the scheduler whose variables a task read), `rank_sources` and `on_path` (the
scheduler whose commands a login node has).

Pure: imports only the leaves (errors, values, hosts, ranksource, plugins: the registry's kind) and its own modules;
never launching, the runtime, torch or mpi4py. The environment is passed in as a mapping, and a file is read, or a
scheduler's command run, through a function given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from ..errors import UsageError
from ..plugins import Registry
from ..ranksource import Source
from .base import Scheduler

__all__ = [
    "NONE",
    "current",
    "every",
    "job_id",
    "lookup",
    "names",
    "of_ranks",
    "on_path",
    "rank_sources",
    "register",
    "spans_hosts",
]

_SCHEDULERS: Registry[Scheduler] = Registry(__path__, __name__)  # each module but base registers its scheduler
_S = TypeVar("_S", bound=type[Scheduler])
NONE = "none"  # a launch's scheduler when it runs in no scheduler's job


def register(cls: _S) -> _S:
    """Class decorator: make `cls` (a Scheduler subclass with its own `name`) the scheduler of that name."""
    _SCHEDULERS.add(cls)
    return cls


def names() -> tuple[str, ...]:
    """The schedulers' names, in the order of their modules' names."""
    return tuple(s.name for s in _SCHEDULERS.every())


def every() -> tuple[Scheduler, ...]:
    """Every scheduler, in the order of their modules' names."""
    return _SCHEDULERS.every()


def lookup(name: str) -> Scheduler:
    """The scheduler called `name`.

    Raises:
        UsageError: no scheduler has that name.
    """
    scheduler = _SCHEDULERS.one(name)
    if scheduler is None:
        raise UsageError(f"{name!r} is not a scheduler hpcdist knows; use one of {', '.join(names())}")
    return scheduler


def current(environ: Mapping[str, str]) -> Scheduler | None:
    """The scheduler whose allocation this process runs in, or None outside every allocation."""
    return next((s for s in every() if s.inside(environ)), None)


def spans_hosts(environ: Mapping[str, str]) -> bool:
    """Whether this process runs in an allocation of more than one host."""
    return any(s.spans_hosts(environ) for s in every())


def job_id(environ: Mapping[str, str], scheduler: str | None = None) -> str | None:
    """The id of the scheduler's job this process runs in, or None outside one; with `scheduler` (a launch's, by name,
    or NONE), that scheduler's alone."""
    return next((found for s in _named(scheduler) if (found := s.job_id(environ)) is not None), None)


def of_ranks(source: Source) -> Scheduler | None:
    """The scheduler whose task launcher sets the variables `source` reads (one of `rank_sources()`), or None."""
    return next((s for s in _SCHEDULERS.loaded() if s.ranks is source), None)  # read, so imported already


def rank_sources(scheduler: str | None = None) -> tuple[Source, ...]:
    """The variables each scheduler's tasks see; with `scheduler` (a launch's, by name, or NONE), its alone, importing
    no other scheduler's module (a rank's start: 1.5 ms)."""
    return tuple(s.ranks for s in _named(scheduler) if s.ranks is not None)


def _named(scheduler: str | None) -> tuple[Scheduler, ...]:
    """Every scheduler (None), none (NONE), or the one called `scheduler`, importing only its module."""
    if scheduler is None:
        return _SCHEDULERS.every()
    return () if scheduler == NONE else (lookup(scheduler),)


def on_path(present: Callable[[str], bool]) -> Scheduler:
    """The scheduler whose client commands are all on PATH (`present(command)`); Slurm's sbatch decides alone.

    Raises:
        UsageError: no scheduler's commands are there, or several schedulers' are.
    """
    found = [s for s in every() if s.clients and all(present(command) for command in s.clients)]
    first = [s for s in found if s.first_on_path]
    if first or len(found) == 1:
        return (first or found)[0]
    submitting = [s for s in every() if s.clients]
    choice = f"pass scheduler= one of {', '.join(repr(s.name) for s in submitting)}"
    if not found:
        looked = ", ".join(f"{s.title}'s {' and '.join(s.clients)}" for s in submitting)
        raise UsageError(f"no scheduler's commands are on PATH (looked for {looked}); run on a login node, or {choice}")
    both = " and ".join(f"{s.title}'s ({' '.join(s.clients)})" for s in found)
    raise UsageError(f"the commands of {both} are all on PATH, so which scheduler is meant is unclear; {choice}")
