"""This host's processes: the tree /proc tells, and a tool's output read with a timeout (a leaf both sides import).

`parent_pid` and `state` read a /proc/PID/stat line (pure); `children` and `descendants` read every process's,
`running` one's, and `environ` a process's environment.
`start` starts a program or says in a UsageError why it cannot start (the shim's child, the supervisor's mpirun);
FORWARDED are the signals each passes on to it. `capture` runs a tool (scontrol, the doctor's probes, py-spy for
hang forensics) in a session of its own and reads its output, killing the session when it runs past its time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import UsageError

__all__ = [
    "FORWARDED",
    "STOPS",
    "capture",
    "children",
    "descendants",
    "environ",
    "parent_pid",
    "running",
    "start",
    "state",
]

# what a started program is handed when this process receives it: Ctrl-C, the ends a scheduler sends, and the two
# signals a user sends a job (mpirun passes each on to the ranks)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # those of them that say: end the job


def parent_pid(stat: bytes) -> int:
    """The parent pid in a /proc/PID/stat line: the second field after the command name, which is in parentheses
    and may itself hold spaces and parentheses.

    Raises:
        ValueError, IndexError: not a stat line.
    """
    return int(stat.rsplit(b")", 1)[1].split()[1])


def state(stat: bytes) -> bytes:
    """The state letter in a /proc/PID/stat line (R, S, D, Z for a zombie, X for a dead process...), after the
    command name in parentheses."""
    return stat[stat.rfind(b")") + 2 :][:1]


def running(pid: int) -> bool:
    """Whether a process `pid` exists (of any user) and is not a zombie (killed, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError):  # no such pid can exist
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:  # no /proc (not Linux), or it ended just now
        return True
    return state(stat) not in (b"Z", b"X")


def environ(pid: int) -> dict[bytes, bytes] | None:
    """The environment process `pid` started with (/proc/PID/environ), None when it cannot be read (gone, or
    another user's)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            items = handle.read().split(b"\0")
    except OSError:
        return None
    return dict(item.partition(b"=")[::2] for item in items if item)


def children() -> dict[int, list[int]]:
    """Every process on this host with children, and its children's pids ({} without /proc); a process that ends
    while /proc is read is left out."""
    tree: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return tree
    for entry in filter(str.isdigit, entries):
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                parent = parent_pid(handle.read())
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(parent, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    """The processes below `pid` on this host, each listed after its parent."""
    tree, found, todo = children(), [], [pid]
    while todo:
        below = tree.get(todo.pop(), [])
        found += below
        todo += below
    return found


def start(argv: Sequence[str], what: str = "program", **popen: Any) -> subprocess.Popen[bytes]:
    """Start `argv` (`popen`: subprocess.Popen's keywords), `what` naming it in the error.

    Raises:
        UsageError: it cannot start (missing, not executable, no program); the message says what to do.
    """
    try:
        return subprocess.Popen(list(argv), **popen)
    except FileNotFoundError:
        raise UsageError(_not_found(argv[0], what)) from None
    except PermissionError:
        raise UsageError(f"{what} {argv[0]!r} is not executable; chmod +x it or run it with its interpreter") from None
    except OSError as exc:  # e.g. ENOEXEC: an executable file that is no program
        raise UsageError(
            f"{what} {argv[0]!r} cannot be started: {exc.strerror or exc}; check that it is a program"
        ) from None


def _not_found(program: str, what: str) -> str:
    """Why `program` could not start although exec found nothing wrong with the call, and what to do."""
    if os.sep not in program:
        return f"{what} {program!r} not found on PATH; check the name, give its full path or add its directory to PATH"
    if os.path.exists(program):
        return f"{what} {program!r} names an interpreter on its #! line that does not exist; fix that line"
    return f"{what} {program!r} does not exist; check the path, or give the name of a program on PATH"


def capture(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> tuple[int | None, str, str]:
    """Run argv (with `env`, else this process's environment) with a timeout and capture its output: (status,
    stdout, stderr).

    The status is None when the timeout hit (its whole process group is killed then, so an mpirun's ranks go too)
    and 127 when the program does not exist.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=None if env is None else dict(env),
        )
    except OSError as exc:
        return 127, "", f"{argv[0]}: {exc.strerror or exc}"
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):  # already gone
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a grandchild outside the group still holds the pipes
            out, err = "", ""
        return None, out, err + f"\n(timed out after {timeout:g} s)"
