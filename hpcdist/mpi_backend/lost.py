"""Operations that fail because ranks died (ULFM's error classes): which ranks, on which hosts, and the error to raise.

Ranks are named as at the job's start: MPI.COMM_WORLD's ranks, whatever communicator the group now runs on. Hosts
are known under --on-failure shrink, where the first group's parent gathers every rank's host name (`gather_hosts`).
"""

from __future__ import annotations

import contextlib
import socket
import time

from mpi4py import MPI

from ..errors import RanksLost, lost_text
from ..records import field, record
from .errors import CollectiveError

__all__ = [
    "FAILURE_CLASSES",
    "RanksLostError",
    "failed_starts",
    "failure",
    "gather_hosts",
    "hosts",
    "interrupted",
    "is_failure",
]

FAILURE_CLASSES = (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED)
_LEARN = 1.0  # seconds a process whose communicator a peer revoked waits to learn which ranks failed


@record
class _Hosts:
    """Each start rank's host, once `gather_hosts` learnt them.

    One per process (`_HOSTS`): a group's failed operation names the lost ranks' hosts deep inside torch's calls,
    where nothing can be handed in.
    """

    by_rank: dict[int, str] = field(default_factory=dict)


_HOSTS = _Hosts()


class RanksLostError(CollectiveError, RanksLost):
    """An MPI operation failed because ranks of its group died (ULFM): a CollectiveError that is also RanksLost."""

    def __init__(self, text: str, ranks: list[int], hosts: dict[int, str], during: str) -> None:
        RanksLost.__init__(self, ranks, hosts, during, why=text)


def is_failure(error: BaseException | None, comm: MPI.Comm | None = None) -> bool:
    """Whether `error` is an MPI error of ULFM's classes: a process failed, one pending, a communicator revoked.

    An error of several requests (MPI_ERR_IN_STATUS: a ring's segments) is one where `comm`, given, was revoked
    or has members this process knows failed: the failed request's own class was in its status.
    """
    if not isinstance(error, MPI.Exception):
        return False
    if error.Get_error_class() == MPI.ERR_IN_STATUS and comm is not None:
        return interrupted(comm) is not None
    return error.Get_error_class() in FAILURE_CLASSES


def gather_hosts(comm: MPI.Intracomm) -> None:
    """Learn every rank's host (collective over `comm`, which must be COMM_WORLD's ranks in order)."""
    _HOSTS.by_rank.update(enumerate(comm.allgather(socket.gethostname())))


def hosts() -> dict[int, str]:
    """Each start rank's host, where `gather_hosts` learnt it."""
    return dict(_HOSTS.by_rank)


def failed_starts(comm: MPI.Comm) -> list[int]:
    """The start ranks of the members of `comm` this process knows to have failed (acknowledging none)."""
    group, world = comm.Get_failed(), MPI.COMM_WORLD.Get_group()
    try:
        return sorted(MPI.Group.Translate_ranks(group, list(range(group.size)), world)) if group.size else []
    finally:
        group.Free()
        world.Free()


def interrupted(comm: MPI.Comm) -> MPI.Exception | None:
    """Under ULFM, the error a wait on `comm` ends with although its requests are pending: ERR_REVOKED once `comm`
    is revoked, ERR_PROC_FAILED once this process knows a member of it failed; else None.

    Open MPI 5.0.11 left a ring's messages pending for good after a rank died in its middle (measured: survivors
    still waited after 150 s), though a survivor had revoked the communicator.
    """
    if comm.Is_revoked():
        return MPI.Exception(MPI.ERR_REVOKED)
    group = comm.Get_failed()
    try:
        return MPI.Exception(MPI.ERR_PROC_FAILED) if group.Get_size() else None
    finally:
        group.Free()


def failure(text: str, error: BaseException, during: str, comms: tuple[MPI.Comm, ...]) -> CollectiveError:
    """The error an operation raises for `error`: RanksLostError naming the lost ranks for ULFM's error classes (and
    `comms` revoked, so the peers still in the same call return too), else a plain CollectiveError."""
    if not is_failure(error, comms[0]):
        return CollectiveError(f"{text}: {error}")
    ranks = failed_starts(comms[0])
    deadline = time.monotonic() + _LEARN
    while not ranks and time.monotonic() < deadline:  # revoked by a peer: this process hears of the failure soon
        time.sleep(0.01)
        ranks = failed_starts(comms[0])
    for comm in comms:
        with contextlib.suppress(MPI.Exception):
            comm.Revoke()
    if ranks:
        said = lost_text(ranks, _HOSTS.by_rank, during)
    else:
        said = f"another rank revoked the communicator after ranks were lost, during {during}"
    return RanksLostError(f"{text}: {said} ({error})", ranks, _HOSTS.by_rank, during)
