"""The launcher families hpcdist launches with, one plug-in per family, and the registry the rest of hpcdist asks.

Each module of this package beside `base` is one family (`openmpi`, `mpich` for Hydra, `intel`, `mvapich`, `pals`
for Cray PALS's mpiexec, and the schedulers' own launchers: `srun`, `jsrun` for LSF's, `flux` for Flux's `flux
run`): a `base.Family` subclass registered with `@register`, which owns everything hpcdist knows of that launcher
(its command line, banners, exit codes, hostfile, fault tolerance, rank variables, identity, signals and quirks).
Each module is named for its family. The modules are found and imported when the registry is first asked, so
adding a launcher is adding one file; a test may register a family of its own. A rank whose launcher named its
family reads that family's variables alone (`rank_sources`), and imports no other family's module.

The registry: `lookup` (by name), `names`, `every` (in the order to test them), `identify`/`from_version`/`titled` (from
version text), `from_files` (from the files beside a launcher), `of_ranks` (the family whose variables a rank saw),
`rank_sources` and `listening` (the family a launch's output is read with; every family's at once when unknown).

Pure: imports only the leaves (errors, values, status, hosts, ranksource, plugins: the registry's kind) and its own
modules; never launching, the runtime, torch or mpi4py. What detection needs of the machine (a directory's
listing) is passed in.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TypeVar

from ..contract import RankContract
from ..errors import UsageError
from ..plugins import Registry
from ..ranksource import Source
from .base import Family, Observation, Scanner

__all__ = [
    "DEFAULT",
    "every",
    "from_files",
    "from_version",
    "identify",
    "listening",
    "lookup",
    "names",
    "of_ranks",
    "rank_sources",
    "register",
    "titled",
]

DEFAULT = "openmpi"  # the family of a launcher that nothing identifies
_FAMILIES: Registry[Family] = Registry(__path__, __name__)  # each module but base registers its family
_F = TypeVar("_F", bound=type[Family])


def register(cls: _F) -> _F:
    """Class decorator: make `cls` (a Family subclass with its own `name`) the family of that name."""
    _FAMILIES.add(cls)
    return cls


def names() -> tuple[str, ...]:
    """The families' names, as `--mpi` lists them."""
    return tuple(f.name for f in sorted(_FAMILIES.every(), key=lambda f: f.order))


def lookup(name: str, where: str = "--mpi") -> Family:
    """The family called `name`.

    Raises:
        UsageError: no family has that name (`where` names the option that gave it).
    """
    family = _FAMILIES.one(name)
    if family is None:
        raise UsageError(f"{where} {name!r} is not an MPI hpcdist knows; use one of {', '.join(names())}")
    return family


def every() -> tuple[Family, ...]:
    """Every family in the order to test them: by `order`, but a family that is a kind of another before it."""
    return _in_order(_FAMILIES.every())


def _in_order(found: Iterable[Family]) -> tuple[Family, ...]:
    """`found` by `order`, but a family that is a kind of another before it."""
    ordered: list[Family] = []
    for family in sorted(found, key=lambda f: f.order):
        base = next((i for i, other in enumerate(ordered) if isinstance(family, type(other))), len(ordered))
        ordered.insert(base, family)
    return tuple(ordered)


def identify(text: str) -> tuple[str, str] | None:
    """(family title, version) from `mpirun --version` or MPI_Get_library_version text, or None if unknown."""
    for family in every():
        match = family.identity.search(text) if family.identity is not None else None
        if match:
            return family.title, match.group(1)
    return None


def from_version(text: str) -> Family | None:
    """The family that `mpirun --version` output `text` names, or None."""
    found = identify(text)
    return titled(found[0]) if found else None


def titled(title: str) -> Family | None:
    """The family hpcdist shows as `title` ('Intel MPI'), or None."""
    return next((f for f in every() if f.title == title), None)


def from_files(launcher: str, beside: Iterable[str]) -> Family | None:
    """The family of the launcher at path `launcher` (its real path), given the names of the files `beside` it."""
    name = os.path.basename(launcher)
    named = next((f for f in every() if name in f.launcher_names), None)
    if named is not None:
        return named
    present = set(beside)
    return next((f for f in every() if present.intersection(f.markers)), None)


def of_ranks(launcher: str) -> Family | None:
    """The family whose launcher sets the variables a rank read its place from (`LaunchEnv.launcher`), or None; the
    families imported already are asked first (a rank's, whose variables it read)."""
    for found in (_FAMILIES.loaded, _FAMILIES.every):
        family = next((f for f, source in _declaring_ranks(found()) if source.launcher == launcher), None)
        if family is not None:
            return family
    return None


def rank_sources(family: str | None = None) -> tuple[Source, ...]:
    """The variables each family's ranks see, a family that is a kind of another before it (MVAPICH's ranks see
    Hydra's PMI_* too, so its own are read first); with `family` (the launch's, by name), only that family's and
    those of the families it is a kind of, importing no other family's module (a rank's start: 2 ms)."""
    if family is None:
        return tuple(source for _, source in _declaring_ranks(_FAMILIES.every()))
    named = lookup(family, RankContract.variable("mpi"))
    kinds = [f for f in _FAMILIES.loaded() if isinstance(named, type(f))]
    return tuple(source for _, source in _declaring_ranks(kinds))


def _declaring_ranks(found: Iterable[Family]) -> list[tuple[Family, Source]]:
    """Those of `found` that declare their ranks' variables themselves (Intel MPI's ranks see Hydra's), in order,
    each with its variables."""
    return [(f, f.ranks) for f in _in_order(found) if "ranks" in vars(type(f)) and f.ranks is not None]


def listening(name: str | None) -> Family:
    """The family whose launcher's output a launch reads: `name`'s, or when unknown (None) every family's at once."""
    return lookup(name) if name is not None else _Every(every())


class _Every(Family):
    """Every family at once, for a launch whose family is not known: each line is read as each family reads it."""

    title = "any MPI"

    def __init__(self, families: Sequence[Family]) -> None:
        self._families = families

    def scanner(self) -> Scanner:
        """One scanner of each kind the families have."""
        kinds: dict[type[Scanner], Scanner] = {}
        for family in self._families:
            scanner = family.scanner()
            kinds.setdefault(type(scanner), scanner)
        return _Scanners(list(kinds.values()))

    def hides(self, text: str) -> bool:
        """Whether any family's report replaces this banner."""
        return any(f.hides(text) for f in self._families)

    def opens_block(self, line: str) -> bool:
        """Whether any family's help blocks open or close here."""
        return any(f.opens_block(line) for f in self._families)

    def reports_failure(self, block: str) -> bool:
        """Whether any family reads this help block as a rank's failure."""
        return any(f.reports_failure(block) for f in self._families)

    def in_fatal_report(self, text: str, inside: bool) -> bool:
        """Whether any family reads this line as part of a report of an error that ends the rank."""
        return any(f.in_fatal_report(text, inside) for f in self._families)

    def fatal_reporter(self, lines: Sequence[str]) -> int | None:
        """The rank the first family that names one reads in a report."""
        return next((rank for f in self._families if (rank := f.fatal_reporter(lines)) is not None), None)

    def exit_code_line(self, line: str, inside: bool) -> bool:
        """Whether any family reads this line as part of its report of the ranks' exits."""
        return any(f.exit_code_line(line, inside) for f in self._families)

    def may_start_exit_codes(self, tail: str, inside: bool) -> bool:
        """Whether any family would hold this unfinished line back."""
        return any(f.may_start_exit_codes(tail, inside) for f in self._families)

    def exit_codes(self, lines: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
        """The endings of the first family that reads any in `lines`."""
        return next((found for f in self._families if (found := f.exit_codes(lines))), [])


class _Scanners(Scanner):
    """Several scanners fed the same lines."""

    def __init__(self, scanners: list[Scanner]) -> None:
        self._scanners = scanners

    def scan(self, stream: str, line: str) -> list[Observation]:
        """What any of them finds."""
        return [seen for scanner in self._scanners for seen in scanner.scan(stream, line)]
