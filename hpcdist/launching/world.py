"""What a launch takes from the world around it, read once at the entry and handed down as one frozen value.

`World.current()` reads this process's world: the environment, our stdout and stderr (and whether each is a
terminal), the effective user id, the Python running, the host name and the CPUs. It is called once at each entry
(the `hpcdist mpirun` command, `hpcdist.launch`, the doctor, script generation); everything below takes the World
or the piece it needs, so nothing there reads `os.environ`, `sys.stdout`, `sys.stderr` or PATH on its own, and a
test describes a world with plain values. A World may also describe where a command will run rather than here: a
batch node of a Slurm allocation, or a script whose user and terminal are known only when it runs (`None`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import IO

from .. import settings
from ..errors import UsageError
from ..records import field, record

__all__ = ["World"]


@record(frozen=True)
class World:
    """The environment, streams, user, Python, host and CPUs a launch runs with (or will run with)."""

    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    stdout: IO[str] | None = None  # where the ranks' output and our dry run go (None: nowhere)
    stderr: IO[str] | None = None  # where hpcdist's own lines go
    stdout_tty: bool | None = False  # None: known only when the command runs (a script tells then)
    stderr_tty: bool = False
    euid: int | None = None  # None: whoever runs the command (a script checks then)
    python: str = "python3"  # the interpreter the ranks' shim runs with; tools beside it come first
    hostname: str = "localhost"
    cpus: frozenset[int] = frozenset({0})  # the CPUs this process may run on (its affinity)
    here: bool = True  # the command runs on this machine: the files it names are checked here, paths made absolute
    cwd: str = "/"  # the launch's working directory (the ranks' under Open MPI and Hydra)

    @classmethod
    def current(cls) -> World:
        """This process's world, read now: the one place that reads the environment, the streams and PATH."""
        return cls(
            environ=MappingProxyType(dict(os.environ)),
            stdout=sys.stdout,
            stderr=sys.stderr,
            stdout_tty=_isatty(sys.stdout),
            stderr_tty=_isatty(sys.stderr),
            euid=os.geteuid(),
            python=sys.executable,
            hostname=socket.gethostname(),
            cpus=frozenset(os.sched_getaffinity(0)),
            cwd=os.getcwd(),
        )

    def which(self, name: str) -> str | None:
        """The program `name` on this world's PATH (a name with a '/' as it is, when it can run), else None."""
        return shutil.which(name, path=self.environ.get("PATH", os.defpath))

    def beside_python(self, name: str) -> str:
        """The path `name` would have beside this world's Python (the bare name for a Python given by name)."""
        folder = os.path.dirname(self.python)
        return os.path.join(folder, name) if folder else name

    def tool(self, name: str) -> str | None:
        """`name` installed beside this world's Python (a venv's, e.g. an MPI wheel's mpirun), else on PATH, else None.

        The one lookup of a tool for the launch, the doctor and the job scripts.
        """
        beside = self.beside_python(name)
        if os.sep in beside and os.path.isfile(beside) and os.access(beside, os.X_OK):
            return beside
        return self.which(name)

    def mpirun(self) -> str | None:
        """The mpirun to use when none is named: the MPIRUN setting, else the one beside this Python, else PATH's."""
        return settings.mpirun(self.environ) or self.tool("mpirun")

    def version(self, program: str) -> str:
        """What `program --version` prints here (stdout and stderr), "" when it cannot run or takes over 10 s, or
        when this world describes another machine."""
        if not self.here:
            return ""
        try:
            done = subprocess.run(
                [program, "--version"], capture_output=True, text=True, timeout=10, env=dict(self.environ), check=False
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout + done.stderr

    def ask(self, argv: Sequence[str]) -> str:
        """What the command `argv` (a scheduler's, `flux resource R`) prints here, run with this world's environment.

        Raises:
            UsageError: it is not on PATH, fails, or takes over 60 s.
        """
        command = shlex.join(argv)
        fix = "run hpcdist mpirun where it works, or give --hostfile or -H"
        if self.which(argv[0]) is None:
            raise UsageError(f"{argv[0]} is not on PATH, so hpcdist cannot run {command}; {fix}")
        try:
            done = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=_ASK_SECONDS, env=dict(self.environ), check=False
            )
        except subprocess.TimeoutExpired:
            raise UsageError(f"{command} did not answer within {_ASK_SECONDS} s; {fix}") from None
        except OSError as exc:
            raise UsageError(f"cannot run {command}: {exc.strerror or exc}; {fix}") from None
        if done.returncode:
            said = done.stderr.strip().splitlines()
            raise UsageError(f"{command} failed ({said[-1] if said else f'exit status {done.returncode}'}); {fix}")
        return done.stdout

    def say(self, text: str, end: str = "\n") -> None:
        """Write one of hpcdist's own lines to this world's stderr (nothing when it has none)."""
        if self.stderr is not None:
            print(text, end=end, file=self.stderr, flush=True)

    def show(self, text: str) -> None:
        """Write `text` (a dry run's line, a script) to this world's stdout as it is."""
        if self.stdout is not None:
            self.stdout.write(text)
            self.stdout.flush()


_ASK_SECONDS = 60  # a scheduler's command that answers no sooner is stuck (its server unreachable)


def _isatty(stream: IO[str] | None) -> bool:
    """Whether `stream` is a terminal (False for a closed or missing one)."""
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):
        return False
