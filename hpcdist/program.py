"""What a rank runs: `python [options] (script | -m module | -c code) [args]`, parsed once for every side (a leaf)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from .errors import UsageError
from .records import field, record

__all__ = ["PythonTarget", "check_program", "is_python", "parse_python_argv"]

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?\Z")
_FLAGS = frozenset(["-u", "-B", "-O", "-OO", "-E", "-s", "-S", "-I", "-b", "-bb", "-q"])
_WITH_VALUE = frozenset(["-W", "-X"])


@record(frozen=True)
class PythonTarget:
    """A Python program: a script path, a module (-m) or code (-c), its argv, and python's own options before it."""

    kind: str  # "path" | "module" | "code"
    what: str
    args: tuple[str, ...]
    options: tuple[str, ...] = field(default=(), compare=False)


def is_python(word: str) -> bool:
    """Whether a command word names a Python interpreter (`python`, `python3`, `/usr/bin/python3.11`)."""
    return bool(_PYTHON.match(os.path.basename(word)))


def check_program(program: Sequence[str], runner: str) -> None:
    """Raise UsageError when the program's first word starts with '-': `runner` would take it for its own option.

    torchrun's own `-m MODULE` is the one exception (when `runner` is "torchrun").
    """
    first = program[0] if program else ""
    if first.startswith("-") and not (runner == "torchrun" and first == "-m"):
        raise UsageError(
            f"the program {first!r} starts with '-', so {runner} would take it for one of its own options; "
            f"name the program first (e.g. -- python train.py), or write ./{first} for a file of that name"
        )


def parse_python_argv(argv: Sequence[str]) -> PythonTarget:
    """Parse `python [options] (script | -m module | -c code) [args]`.

    Raises:
        UsageError: an option a rank cannot take, `-m`/`-c` without its argument, or no program at all.
    """
    i = 1
    while i < len(argv):
        word = argv[i]
        if word in ("-m", "-c"):
            if i + 1 >= len(argv):
                raise UsageError(f"`{' '.join(argv)}`: {word} needs an argument")
            kind = "module" if word == "-m" else "code"
            return PythonTarget(kind, argv[i + 1], tuple(argv[i + 2 :]), tuple(argv[1:i]))
        if word in _WITH_VALUE:
            i += 2
        elif word in _FLAGS or word.startswith(("-W", "-X")):
            i += 1
        elif word.startswith("-"):
            raise UsageError(
                f"`{' '.join(argv)}`: python option {word} is not supported per rank; "
                "set it in the environment (e.g. PYTHONWARNINGS) or drop it"
            )
        else:
            return PythonTarget("path", word, tuple(argv[i + 1 :]), tuple(argv[1:i]))
    raise UsageError(f"`{' '.join(argv)}` names no script, module or code; an interactive python cannot run per rank")
