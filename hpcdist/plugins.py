"""Plug-ins of one kind (MPI families, schedulers), registered by name and found with their package (a leaf).

A wing of plug-ins keeps one `Registry`; each of its modules registers its class with the registry, and `discover`
imports every module of the wing but `base` when the wing is imported, so adding a plug-in is adding one file.
Every process that reads a launch imports every plug-in, each rank too (for its rank variables), so a plug-in's
patterns for reading its launcher's output are `LazyPattern`s, compiled by the launcher when it first reads.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ["LazyPattern", "Registry", "discover"]

_T = TypeVar("_T")


class Registry(Generic[_T]):
    """The plug-ins of one kind: each registered class's one instance by its name, in the order registered."""

    def __init__(self) -> None:
        self.by_name: dict[str, _T] = {}

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
        """The plug-in called `name`, or None."""
        return self.by_name.get(name)

    def every(self) -> tuple[_T, ...]:
        """Every plug-in, in the order they were registered."""
        return tuple(self.by_name.values())


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
