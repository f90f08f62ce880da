"""This process's TCP sockets as Linux lists them (/proc): the ports it listens on, and cutting the connections made
to some of them (a leaf: reads /proc, touches only the sockets it is asked to cut).

A gloo collective waits on its peers' TCP connections and cannot be aborted; when ranks die under --on-failure
shrink, each survivor cuts the connections its own gloo listeners accepted (the ports it came to listen on after
`listening()` was noted at init), so that every gloo call still waiting, here or at a peer, returns with an error.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["cut_accepted", "listening"]

_LISTEN = "0A"  # the state column of a listening socket in /proc/net/tcp
_ESTABLISHED = "01"


def _own_sockets() -> dict[int, int]:
    """Socket inode -> one of this process's file descriptors for it."""
    found: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError, ValueError):
                target = os.readlink(f"/proc/self/fd/{name}")
                if target.startswith("socket:["):
                    found[int(target[8:-1])] = int(name)
    return found


def _table() -> list[tuple[int, int, str, int]]:
    """(local port, remote port, state, inode) of every TCP socket on this host (IPv4 and IPv6)."""
    rows = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(path) as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
                rows.append((int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), state, inode))
    return rows


def listening() -> set[int]:
    """The TCP ports this process listens on."""
    own = _own_sockets()
    return {local for local, _, state, inode in _table() if state == _LISTEN and inode in own}


def cut_accepted(ports: set[int]) -> int:
    """Shut down (both ways) this process's established connections accepted on `ports`; how many were cut.

    The descriptors stay open for their owner, whose next read or write on them fails.
    """
    import socket  # a survivor's alone: every rank notes its ports at init, and the import takes 3-5 ms

    own = _own_sockets()
    cut = 0
    for local, _, state, inode in _table():
        if state == _ESTABLISHED and local in ports and inode in own:
            with contextlib.suppress(OSError):
                copy = socket.socket(fileno=os.dup(own[inode]))
                try:
                    copy.shutdown(socket.SHUT_RDWR)
                    cut += 1
                finally:
                    copy.close()
    return cut
