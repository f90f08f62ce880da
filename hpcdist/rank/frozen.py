"""Whether the rank's process is frozen: stopped (state T, `kill -STOP`), stopped by a debugger (t), frozen by its
cgroup (v2's `cgroup.freeze`, v1's freezer), or in uninterruptible sleep (D) using no CPU between two looks. Read by
its tagger, a process of its own, from /proc and the cgroup file systems.

A rank that waits in a blocking call sleeps (state S) or spins (R): neither is frozen, however long it takes.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["FrozenWatch", "cgroup_mounts"]


class FrozenWatch:
    """Looks at process `pid` (the rank) each time it is asked, and says how it is frozen ('' when it is not)."""

    def __init__(self, pid: int, mounts: tuple[str | None, str | None] | None = None) -> None:
        self.pid = pid
        self._v2, self._freezer = mounts if mounts is not None else cgroup_mounts()
        self._cpu: int | None = None  # its user and system CPU time at the last look, in clock ticks

    def look(self) -> str:
        """'stopped (state T)', 'in a frozen cgroup', 'in uninterruptible sleep (state D), using no CPU', or ''
        (also when the process is gone)."""
        state, cpu = _stat(self.pid)
        flat, self._cpu = cpu is not None and cpu == self._cpu, cpu
        if state == "T":
            return "stopped (state T)"
        if state == "t":
            return "stopped by a debugger (state t)"
        if state and self._cgroup_frozen():
            return "in a frozen cgroup"
        if state == "D" and flat:
            return "in uninterruptible sleep (state D), using no CPU"
        return ""

    def _cgroup_frozen(self) -> bool:
        """Whether the process's cgroup is frozen: `frozen 1` in its v2 cgroup.events, or v1's freezer.state FROZEN."""
        for line in _read(f"/proc/{self.pid}/cgroup").splitlines():
            number, controllers, path = [*line.split(":", 2), "", ""][:3]
            path = path.lstrip("/")
            if number == "0" and self._v2 is not None:
                events = _read(os.path.join(self._v2, path, "cgroup.events")).splitlines()
                frozen = "frozen 1" in events
            elif "freezer" in controllers.split(",") and self._freezer is not None:
                frozen = _read(os.path.join(self._freezer, path, "freezer.state")).strip() == "FROZEN"
            else:
                frozen = False
            if frozen:
                return True
        return False


def cgroup_mounts(mountinfo: str = "/proc/self/mountinfo") -> tuple[str | None, str | None]:
    """Where the cgroup v2 hierarchy and cgroup v1's freezer are mounted (None where they are not)."""
    v2 = freezer = None
    for line in _read(mountinfo).splitlines():
        mine, _, theirs = line.partition(" - ")
        fields, kind = mine.split(), theirs.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        if kind[0] == "cgroup2" and v2 is None:
            v2 = fields[4]
        elif kind[0] == "cgroup" and "freezer" in kind[2].split(",") and freezer is None:
            freezer = fields[4]
    return v2, freezer


def _read(path: str) -> str:
    """A small file's text ('' when it cannot be read)."""
    with contextlib.suppress(OSError), open(path) as handle:
        return handle.read()
    return ""


def _stat(pid: int) -> tuple[str, int | None]:
    """The state letter and the user + system CPU ticks of process `pid` ('' and None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
    except OSError:
        return "", None
    return fields[0].decode(), int(fields[11]) + int(fields[12])
