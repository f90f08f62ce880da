"""The compiled backend's build failures: the compiler a build runs, its first error line, and the failure record.

A failed build is recorded (R/K.failed, JSON) for the compiler it was made with; later jobs with that compiler
neither retry nor say it again (building.py reads the record before it locks).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from .. import records
from ..settingtable import MPI_NATIVE

__all__ = ["Compiler", "first_error", "me", "missing_compiler", "record", "record_note", "recorded"]

_FIX = f"install one (apt-get install g++) or set {MPI_NATIVE.name}=0 to use the Python backend knowingly"
_ERROR_LINE = re.compile(r"(^|\s)(fatal )?error:|: cannot find |undefined reference")


@records.record(frozen=True)
class Compiler:
    """The C++ compiler torch's cpp_extension would run: $CXX, else `c++` on PATH."""

    name: str
    given: bool  # from $CXX
    path: str | None  # the file it resolves to, None when there is none
    stamp: str  # size and mtime of that file, so a reinstalled compiler counts as a change

    @classmethod
    def find(cls, environ: Mapping[str, str]) -> Compiler:
        """The compiler `environ` ($CXX, $PATH) names."""
        name = environ.get("CXX") or "c++"
        try:
            words = shlex.split(name)  # $CXX may hold a launcher and its compiler: `ccache g++`
        except ValueError:  # unbalanced quotes: no such command
            words = [name]
        found = shutil.which(words[0], path=environ.get("PATH", os.defpath)) if words else None
        if found is None:
            return cls(name, bool(environ.get("CXX")), None, "")
        real = os.path.realpath(found)
        info = os.stat(real)
        return cls(name, bool(environ.get("CXX")), real, f"{info.st_size}:{info.st_mtime_ns}")

    @property
    def identity(self) -> str:
        """What a failure record is kept for: the name asked for and the file it resolved to."""
        return f"{self.name}={self.path or 'missing'}:{self.stamp}"


def missing_compiler(compiler: Compiler) -> str:
    """The sentence for a compiler that cannot be found, naming what is missing and how to fix it."""
    if compiler.given:
        what = f"$CXX={compiler.name} is not an executable file (nor a command on PATH)"
    else:
        what = "`c++` is not on PATH and $CXX is unset"
    return f"no C++ compiler: {what}; {_FIX}"


def first_error(output: str) -> str:
    """The compiler's (or linker's) first error line in a failed build's output, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if not line.startswith(("[", "FAILED:")) and _ERROR_LINE.search(line):
            return line
    return lines[-1] if lines else "no output"


def record_note(path: Path) -> str:
    """What a failure's message adds: that later jobs do not retry, and where the record is."""
    return (
        f"later jobs do not retry until the compiler, torch, Python, MPI or hpcdist changes "
        f"(recorded in {path}: remove it to retry now)"
    )


def recorded(path: Path, compiler: Compiler) -> str | None:
    """The reason recorded at `path` for this compiler; None without a record or with one for another compiler."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("compiler") != compiler.identity:
        return None
    return str(data.get("reason", "the build failed"))


def record(path: Path, compiler: Compiler, reason: str, output: str) -> None:
    """Write the failure record whole (a temporary file renamed over it)."""
    data = {"compiler": compiler.identity, "reason": reason, "by": me(), "when": time.strftime("%FT%T%z")}
    temporary = path.with_name(f"{path.name}.{me()}")
    temporary.write_text(json.dumps({**data, "output": output}, indent=1) + "\n")
    temporary.replace(path)


def me() -> str:
    """This process as records and locks name it: host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"
