"""This host's process tree as /proc tells it: each process's parent, and the processes below one (a leaf).

`parent_pid` reads the parent from a /proc/PID/stat line (pure); `children` and `descendants` read every process's.
"""

from __future__ import annotations

import os

__all__ = ["children", "descendants", "parent_pid"]


def parent_pid(stat: bytes) -> int:
    """The parent pid in a /proc/PID/stat line: the second field after the command name, which is in parentheses
    and may itself hold spaces and parentheses.

    Raises:
        ValueError, IndexError: not a stat line.
    """
    return int(stat.rsplit(b")", 1)[1].split()[1])


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
