"""This rank process's hpcdist: the contract its launcher handed it, read once, and what the shim and init set up.

One per process (`current`), because its parts are shared by callers that cannot hand each other anything: the shim
prepares the rendezvous and then runs the user's program in the same process, whose own `hpcdist.init` (or its
`init_process_group`, through adopt's hook) serves the store over the socket the shim's rendezvous left listening;
and a program calls the survivors' and the workloads' functions, `hpcdist.shutdown` and `hpcdist.restart_count`
without handing hpcdist anything. Everything below those entries takes the contract, or this object, as an argument.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..contract import RankContract
from ..events import Usage
from ..records import record

if TYPE_CHECKING:
    import socket

__all__ = ["Listener", "RankProcess", "current", "existing"]


class Listener(NamedTuple):
    """Rank 0's rendezvous socket, kept until the store is served over it: the socket, the address it offered, the
    world size and how long the store waits for the ranks."""

    socket: socket.socket
    addr: str
    world_size: int
    timeout: float


@record
class RankProcess:
    """The contract this process was started with, and what hpcdist set up in it since (each None until then)."""

    contract: RankContract
    rank: int | None = None  # this process's rank, once the shim or init has read the launch
    listener: Listener | None = None  # rank 0's rendezvous socket until `prepare.serve_store` serves the store
    store: Any = None  # rank 0's torch TCPStore, kept alive while the process group uses it
    mpi_store: Any = None  # the store over MPI of torch's default group (or the last recovery's): shutdown closes it
    agent_store: bool = False  # prepare promised TORCHELASTIC_USE_AGENT_STORE=True: release_store takes it back
    watchdog: bool = False  # init started the watchdog, so shutdown stops it (under the shim, the shim does)
    listening: frozenset[int] = frozenset()  # under shrink: the TCP ports listened on before torch's groups were made
    grouped: bool = False  # start_group made torch's default group in this process once (the start-up is over)
    told: str | None = None  # the usage error this process told its launcher (which says it once for the job)

    def tell_usage(self, message: str, status: int = 2) -> bool:
        """Hand an error every rank meets alike (a usage error; status 1: survivors too few) to `hpcdist mpirun`,
        which says it once for the job; False when no launcher listens or the rank is not known yet (then the
        caller prints it)."""
        if not self.contract.routed or self.rank is None:
            return False
        self.contract.tell(Usage(self.rank, message, status))
        self.told = message
        return True


_PROCESS: list[RankProcess] = []  # the one RankProcess of this process, once made (see the module's docstring)


def current(environ: Mapping[str, str] | None = None) -> RankProcess:
    """This process's RankProcess: made by its first caller (the shim, else `hpcdist.init`), which reads the contract
    from `environ` (default: os.environ) once.

    Raises:
        UsageError: a variable of the contract holds a value not of its kind (the message names it).
    """
    if not _PROCESS:
        _PROCESS.append(RankProcess(RankContract.from_environ(os.environ if environ is None else environ)))
    return _PROCESS[0]


def existing() -> RankProcess | None:
    """This process's RankProcess if the shim or init made it, else None (reads nothing)."""
    return _PROCESS[0] if _PROCESS else None
