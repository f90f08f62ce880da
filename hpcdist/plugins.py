"""Plug-ins of one kind (MPI families, schedulers, container runtimes), registered by name and found with their
package (a leaf).

A wing of plug-ins keeps one `Registry` of its package; each of its modules registers its class with the registry,
and the registry imports every module of the wing but `base` when it is first asked for every plug-in (`every`), so
adding a plug-in is adding one file. A rank asks only for its own launcher's plug-ins (`one`), each in the module
named for it, and imports no other; a plug-in's patterns for reading its launcher's output are `LazyPattern`s,
compiled by the launcher when it first reads.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ["LazyPattern", "Registry", "discover"]

_T = TypeVar("_T")


class Registry(Generic[_T]):
    """The plug-ins of one kind: each registered class's one instance by its name; `every` imports the package's
    modules (found on `path`, its `__path__`) but `base` and those named in `besides` first, once."""

    def __init__(self, path: Iterable[str], package: str, besides: Iterable[str] = ()) -> None:
        self.by_name: dict[str, _T] = {}
        self._package = (list(path), package, tuple(besides))
        self._found = False

    def add(self, cls: type[_T]) -> None:
        """Register `cls`, which names itself (its `name`), as the plug-in of that name.

        Raises:
            ValueError: `cls` has no name of its own.
        """
        name = getattr(cls, "name", "")
        if not name:
            raise ValueError(f"{cls.__name__} needs a name to be registered")
        self.by_name[name] = cls()

    def get(self, name: str) -> _T | None:
        """The plug-in called `name`, or None (every module imported first)."""
        if name not in self.by_name:
            self.every()
        return self.by_name.get(name)

    def one(self, name: str) -> _T | None:
        """The plug-in called `name`, importing only the module named for it while the others are not needed (a
        rank's own launcher's); or None."""
        if name not in self.by_name and not self._found:
            with contextlib.suppress(ImportError):  # a plug-in of a test's own, or one whose module has other plug-ins
                importlib.import_module(f"{self._package[1]}.{name}")
        return self.get(name)

    def loaded(self) -> tuple[_T, ...]:
        """The plug-ins registered so far, importing nothing."""
        return tuple(self.by_name.values())

    def every(self) -> tuple[_T, ...]:
        """Every plug-in, in the order of their modules' names (as they are found), whichever was imported first."""
        if not self._found:
            self._found = True
            discover(*self._package)
        return tuple(sorted(self.by_name.values(), key=lambda plug_in: type(plug_in).__module__))


def discover(path: Iterable[str], package: str, besides: Iterable[str] = ()) -> None:
    """Import every module of `package` (found on `path`, the package's `__path__`) but `base` and those named in
    `besides` (a module run with `python -m`, which must not be imported before): each registers its plug-in."""
    skipped = {"__init__", "base", *besides}
    for directory in path:  # listed here: pkgutil.iter_modules imports inspect, 4 ms of every process's start
        names = sorted(entry.name.removesuffix(".py") for entry in os.scandir(directory) if entry.name.endswith(".py"))
        for name in names:
            if name not in skipped:
                importlib.import_module(f"{package}.{name}")


class LazyPattern:
    """A regular expression compiled when first used: a rank, which imports every plug-in, never compiles it."""

    __slots__ = ("_compiled", "_flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        """The compiled expression (compiled now, the first time)."""
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self._flags)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        """re.Pattern.search."""
        return self.compiled().search(text)

    def match(self, text: str) -> re.Match[str] | None:
        """re.Pattern.match."""
        return self.compiled().match(text)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        """re.Pattern.fullmatch."""
        return self.compiled().fullmatch(text)
