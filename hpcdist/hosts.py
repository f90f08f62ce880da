"""Hosts and their slots, the one way hpcdist writes them as `host:slots`, and a name's address (a leaf).

Pure but `resolve`, which asks this machine's resolver; it imports nothing of hpcdist.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from .records import record

__all__ = ["HOST_NAME", "HostSlots", "host_slots", "hosts_text", "resolve", "this_host"]

# A host as Open MPI's hostfile lexer reads one (prrte's hostfile_lex.l): [user@]name, where a name (or an IPv4
# address) starts with a letter or digit and goes on with letters, digits, '_', '-' and '.'; 253 characters at most.
HOST_NAME = re.compile(r"(?=.{1,253}\Z)(?:[A-Za-z0-9][A-Za-z0-9_-]*@)?[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


@record(frozen=True)
class HostSlots:
    """One host and how many ranks it takes (`max_slots` caps oversubscription; None = no cap)."""

    host: str
    slots: int
    max_slots: int | None = None


def host_slots(host: str, slots: int) -> str:
    """`host:slots`, as `-H`, Hydra's `-hosts`, an MPICH hostfile line and hpcdist's messages write one host."""
    return f"{host}:{slots}"


def hosts_text(hosts: Iterable[HostSlots]) -> str:
    """`a:2,b:2`: each host with its slots, comma-separated (`-H`'s and Hydra's `-hosts`'s form)."""
    return ",".join(host_slots(h.host, h.slots) for h in hosts)


def this_host() -> str:
    """This host's name, as socket.gethostname gives it (the kernel's node name), without importing socket: that takes
    3 to 5 ms, and most ranks never open a socket of hpcdist's."""
    return os.uname().nodename


def resolve(name: str) -> str | None:
    """The first IPv4 address `name` resolves to, or None."""
    import socket

    try:
        return str(socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0])
    except (OSError, IndexError):
        return None
