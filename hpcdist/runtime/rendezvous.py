"""MASTER_ADDR/MASTER_PORT discovery: MPI broadcast from rank 0, Slurm nodelist, or this host.

Under MPI every exchange is a broadcast, a reduction or a scan of a fixed-size buffer, so what a rank
receives does not grow with the number of ranks beyond the log-depth trees MPI runs them on. One
rank per host (its local rank 0, the node's leader) speaks for the host; texts reach rank 0 only
when some host reports a problem, and then from the first few hosts only. `doctor_probe` runs the same exchanges in
the ranks of `hpcdist doctor`'s probe job, with a plain socket in place of torch's store.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import RendezvousTimeout, UsageError
from ..hosts import this_host
from ..records import record
from ..settingtable import TIMEOUT
from ..waits import wait_peers
from .addresses import (
    INFO_BYTES,
    PROBE_SECONDS,
    HostInfo,
    ReachCount,
    interface_towards,
    offered_address,
    probe,
    subnet_members,
    unreachable_summary,
)
from .env import RUN_ID_PREFIX, AgentFacts, LaunchEnv
from .netif import interfaces

if TYPE_CHECKING:
    import socket
    from datetime import timedelta

__all__ = [
    "Bind",
    "Rendezvous",
    "RendezvousTimeout",
    "RendezvousUnreachable",
    "all_connected",
    "check_master_addr",
    "doctor_probe",
    "listen",
    "mpi_rendezvous",
    "new_run_id",
    "offer_rendezvous",
    "slurm_rendezvous",
    "store_over",
]

_SLURM_PORT_BASE = 15000  # below Linux's ephemeral range (32768-60999), so no client socket holds it
_SLURM_PORT_SPAN = 10000
_MSG_BYTES = 512
_REPORT_GRACE = 30.0  # other ranks wait this long for rank 0 to report an unreachable rendezvous and abort
_LISTED = 16  # hosts whose reach problem rank 0 receives and lists; it counts the rest
_REACH_TAG = 7411  # the point-to-point tag of a host's reach problem, sent to rank 0 before any program runs


class RendezvousUnreachable(UsageError):
    """Some ranks cannot open a TCP connection to the rendezvous address rank 0 offers."""


@record(frozen=True)
class Rendezvous:
    """Where the torch TCP store lives, and on rank 0 the listening socket it is served over."""

    addr: str
    port: int
    hosted: bool = False  # hpcdist bound the store's socket (on rank 0), so every rank's torch connects as a client
    listener: Any = None  # rank 0's listening socket; torch's TCPStore is served over it when torch is needed
    ifname: str | None = None  # this rank's interface towards `addr` when ranks span hosts (GLOO/NCCL_SOCKET_IFNAME)
    node: tuple[int, int] | None = None  # (this rank's host's index in order of first appearance, the host count)
    run_id: str | None = None  # rank 0's id for this run, the same on every rank
    given: bool = False  # the user's MASTER_ADDR/PORT: hpcdist neither chose it nor knows who serves it

    def facts(self) -> AgentFacts:
        """What this rendezvous tells the ranks in torchrun's variables (GROUP_*, run id, agent store)."""
        return AgentFacts(self.node, self.run_id, None if self.given else self.hosted)


def check_master_addr(addr: str) -> None:
    """Fail at once, naming this host, when the MASTER_ADDR the user set does not resolve here.

    Otherwise torch's store would retry the name until its timeout, and then blame rank 0.

    Raises:
        UsageError: `addr` does not resolve to an IPv4 address on this host.
    """
    import socket  # as in each function below: most ranks open no socket of hpcdist's, and its import takes 3-5 ms

    try:
        socket.getaddrinfo(addr, None, socket.AF_INET)
    except OSError as exc:
        raise UsageError(
            f"MASTER_ADDR={addr} does not resolve on host {this_host()} "
            f"({(exc.strerror or str(exc)).lower()}); correct the name (a typo?), set MASTER_ADDR to an address "
            "of rank 0's host that every host can reach, or unset it so hpcdist picks one"
        ) from None


def slurm_rendezvous(env: LaunchEnv) -> Rendezvous:
    """srun without MPI: the step's first node, and a port derived from the job and step ids."""
    if not env.nodelist or env.job_id is None:
        raise UsageError(
            "under srun hpcdist needs SLURM_STEP_NODELIST and SLURM_JOB_ID to find the rendezvous; "
            "run inside an srun step, or set MASTER_ADDR and MASTER_PORT"
        )
    try:
        seed = int(env.job_id) + 7919 * int(env.step_id or 0)
    except ValueError:
        raise UsageError(f"SLURM_JOB_ID={env.job_id!r} is not a number; set MASTER_PORT yourself") from None
    return Rendezvous(env.nodelist[0], _SLURM_PORT_BASE + seed % _SLURM_PORT_SPAN)


def listen(addr: str, world_size: int, timeout: float, port: int = 0) -> Rendezvous:
    """Rank 0's listening socket for the store, on an OS-chosen port unless given; no torch import.

    It listens on every interface, as torch's store does; connections wait in its backlog until torch's
    TCPStore is served over it (`store_over`).
    """
    import socket

    try:
        server = socket.create_server(("", port), backlog=socket.SOMAXCONN)
    except OSError as exc:
        raise UsageError(f"cannot listen on port {port}: {(exc.strerror or str(exc)).lower()}") from None
    return Rendezvous(addr, server.getsockname()[1], True, server, run_id=new_run_id())


def store_over(listener: socket.socket, addr: str, world_size: int, timeout: float) -> Any:
    """torch's TCPStore (libuv) served over rank 0's listening socket, which the store then owns.

    `addr` is the address rank 0 offered: the store's own client connects there, as every rank's does (the
    socket listens on every interface, and its own address, 0.0.0.0, names no peer torch can log).
    """
    from datetime import timedelta  # as torch is: a rank that never loads torch never needs it

    from torch.distributed import TCPStore

    store = TCPStore(
        addr,
        listener.getsockname()[1],
        world_size=world_size,
        is_master=True,
        multi_tenant=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout),
        master_listen_fd=listener.fileno(),
        use_libuv=True,
    )
    listener.detach()  # libuv closes the descriptor with the store
    return store


Bind = Callable[[str, int, float, int], Rendezvous]  # (addr, world_size, timeout, port) -> a bound rendezvous


def new_run_id() -> str:
    """A fresh TORCHELASTIC_RUN_ID, marked as hpcdist's (torchrun --standalone's is a uuid too)."""
    return f"{RUN_ID_PREFIX}{os.urandom(6).hex()}"  # as random as uuid4's first 12 digits, without uuid


def mpi_rendezvous(comm: Any, env: LaunchEnv, timeout: float) -> Rendezvous:
    """Rank 0 listens and broadcasts its address and port; when the ranks span hosts, one rank per host checks it
    can reach it.

    Every wait ends after `timeout`. When ranks span hosts, rank 0 offers the address of its interface
    on the subnet shared with the most other hosts, and each rank names its own interface towards it.

    Raises:
        RendezvousTimeout: a rank did not arrive within `timeout`.
        RendezvousUnreachable: some host cannot connect to the address rank 0 offers.
    """
    rdzv, mine, host0 = offer_rendezvous(comm, env, timeout, listen)
    if rdzv.node is None or rdzv.node[1] > 1:  # on one host, rank 0's own: three collectives fewer
        _check_reach(comm, env, rdzv, mine, host0, timeout)
    return rdzv


def offer_rendezvous(comm: Any, env: LaunchEnv, timeout: float, bind: Bind) -> tuple[Rendezvous, HostInfo, str]:
    """Rank 0's host to all; each host's leader says which of its subnets it shares; rank 0 `bind`s and broadcasts.

    Returns this rank's view of the rendezvous, its own HostInfo and rank 0's hostname. `hpcdist doctor`
    calls this with its own listening socket, so it checks the very address a job would use.

    Raises:
        RendezvousTimeout: a rank did not arrive within `timeout`.
        UsageError: rank 0 could not bind the chosen address.
    """
    from mpi4py import MPI

    leader = env.local_rank == 0
    listed = tuple(interfaces()) if leader or comm.rank == 0 else None  # the others list theirs only across hosts
    mine = HostInfo(this_host(), listed or ())
    host0 = HostInfo.decode(
        _bcast_str(comm, mine.encode() if comm.rank == 0 else "", timeout, "rank 0's host and addresses", INFO_BYTES)
    )
    # Per interface of rank 0: 1 from each other host with an address on its subnet; then the hosts; then the
    # ranks whose place breaks the hosts' blocks of consecutive ranks (see _in_block).
    sums = array("q", [0] * (len(host0.interfaces) + 2))
    if leader and mine.hostname != host0.hostname:
        sums[: len(host0.interfaces)] = array("q", subnet_members(host0, mine.interfaces))
    sums[-2] = int(leader)
    previous, leaders = (
        array("q", [comm.rank << 32 | _host_tag(mine.hostname), comm.rank << 32 | env.local_rank]),
        array("q", [int(leader)]),
    )
    scans = (
        comm.Iexscan(MPI.IN_PLACE, [previous, MPI.INT64_T], MPI.MAX),
        comm.Iscan(MPI.IN_PLACE, [leaders, MPI.INT64_T], MPI.SUM),
    )
    for request in scans:
        _wait(comm, request, timeout, "every rank's place among the hosts")
    sums[-1] = int(not _in_block(comm.rank, env.local_rank, mine.hostname, previous))
    _wait(comm, comm.Iallreduce(MPI.IN_PLACE, [sums, MPI.INT64_T], MPI.SUM), timeout, "every host's subnets")
    host_count, scattered = sums[-2], sums[-1]
    node = (leaders[0] - 1, host_count) if not scattered else (_scattered_place(comm, timeout), host_count)
    listener = None
    if comm.rank == 0:
        addr = env.master_addr or offered_address(host0, sums[: len(host0.interfaces)], host_count)
        try:
            rdzv = bind(addr, comm.size, timeout, env.master_port or 0)
            listener, message = rdzv.listener, f"{rdzv.addr} {rdzv.port} {new_run_id()}"
        except Exception as exc:  # noqa: BLE001 - the bind's error, forwarded so no rank waits forever
            message = f"! {exc}"
        _bcast_str(comm, message, timeout, "rank 0's rendezvous address")
        if listener is None:
            raise UsageError(f"rank 0 could not bind the rendezvous store on {addr}: {message[2:]}")
    else:
        message = _bcast_str(comm, "", timeout, "rank 0's rendezvous address")
        if message.startswith("!"):
            raise UsageError(f"rank 0 could not bind the rendezvous store: {message[2:]}")
    addr, port, run_id = message.split()
    ifname = interface_towards(addr, tuple(interfaces()) if listed is None else listed) if host_count > 1 else None
    return Rendezvous(addr, int(port), True, listener, ifname, node, run_id), mine, host0.hostname


def _host_tag(hostname: str) -> int:
    """32 bits that tell a host from its neighbours in rank order."""
    return zlib.crc32(hostname.encode())


def _in_block(rank: int, local_rank: int, hostname: str, previous: Sequence[int]) -> bool:
    """Whether this rank continues its host's block of consecutive ranks (or starts it), from rank-1's tag and place.

    When every rank does, a host's ranks are consecutive and start with its local rank 0, so its index in
    order of first appearance is the number of local ranks 0 up to it (an inclusive scan).
    """
    if rank == 0:
        return local_rank == 0
    same_host = previous[0] & 0xFFFFFFFF == _host_tag(hostname)
    if local_rank == 0:
        return not same_host
    return same_host and previous[1] & 0xFFFFFFFF == local_rank - 1


def _scattered_place(comm: Any, timeout: float) -> int:
    """This rank's host's index when hosts' ranks are not consecutive: a node communicator, its first rank leads.

    Every rank has passed the reductions before, so the blocking split cannot wait on a rank that never comes.
    """
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        before = array("q", [int(node.rank == 0)])
        _wait(comm, comm.Iexscan(MPI.IN_PLACE, [before, MPI.INT64_T], MPI.SUM), timeout, "the hosts' order")
        index = array("q", [0 if comm.rank == 0 else before[0]])
        _wait(node, node.Ibcast([index, MPI.INT64_T], root=0), timeout, "its host's index")
        return index[0]
    finally:
        node.Free()


def _check_reach(comm: Any, env: LaunchEnv, rdzv: Rendezvous, mine: HostInfo, host0: str, timeout: float) -> None:
    """Each host's leader connects to the rendezvous; a count first, then rank 0 lists the first hosts that cannot."""
    from mpi4py import MPI

    line = ""
    if env.local_rank == 0:
        problem = probe(rdzv.addr, rdzv.port, min(PROBE_SECONDS, timeout))
        if problem:
            via = next((f"{i.name} {i.addr}" for i in mine.interfaces if i.name == rdzv.ifname), None)
            line = _clip(
                f"rank {comm.rank} on {mine.hostname} ({env.local_world_size} rank(s) there; "
                f"{f'via {via}' if via else 'no interface on its subnet'}) cannot reach the rendezvous "
                f"{rdzv.addr}:{rdzv.port} ({problem})"
            )
    bad = array("q", [int(bool(line)), env.local_world_size if line else 0, int(env.local_rank == 0)])
    before = array("q", [bad[0]])
    scan = comm.Iexscan(MPI.IN_PLACE, [before, MPI.INT64_T], MPI.SUM)
    if comm.rank == 0:
        # The probes wait in the listener's backlog until the store is served: rank 0 takes them off it while the
        # count comes in, so more hosts than the backlog holds (somaxconn) are not refused. Every probe has ended
        # before its host's count arrives, and no rank goes on (to connect to the store) before the broadcast.
        total = comm.Ireduce(MPI.IN_PLACE, [bad, MPI.INT64_T], MPI.SUM, root=0)
        _wait(comm, total, timeout, "every host's rendezvous check", lambda: _drain(rdzv.listener))
        _drain(rdzv.listener)
    else:
        _wait(comm, comm.Ireduce([bad, MPI.INT64_T], None, MPI.SUM, root=0), timeout, "rank 0 to take its count")
    _wait(comm, comm.Ibcast([bad, MPI.INT64_T], root=0), timeout, "every host's rendezvous check")
    _wait(comm, scan, timeout, "every host's rendezvous check")
    if not bad[0]:
        return
    index = 0 if comm.rank == 0 else before[0]
    if line and index < _LISTED and comm.rank != 0:
        _wait(comm, comm.Isend(bytearray(_encode(line)), 0, _REACH_TAG), timeout, "rank 0 to take its reach report")
    if comm.rank == 0:
        problems = [line] if line else []
        while len(problems) < min(bad[0], _LISTED):
            buf = bytearray(_MSG_BYTES)
            _wait(comm, comm.Irecv(buf, MPI.ANY_SOURCE, _REACH_TAG), timeout, "the hosts' reach reports")
            problems.append(_decode(buf))
        count = ReachCount(bad[0], bad[2], bad[1], comm.size)
        raise RendezvousUnreachable(unreachable_summary(rdzv.addr, rdzv.port, host0, problems, count))
    # Give rank 0 time to print the summary and abort the job, so its report is not cut short.
    sys.stderr.flush()
    time.sleep(min(_REPORT_GRACE, timeout))
    raise RendezvousUnreachable(
        f"the rendezvous {rdzv.addr}:{rdzv.port} is unreachable from {bad[0]} host(s); rank 0 lists them"
    )


def _clip(text: str) -> str:
    """`text` cut to fit one message buffer."""
    return text.encode()[: _MSG_BYTES - 1].decode(errors="ignore")


def _bcast_str(comm: Any, text: str, timeout: float, what: str, size: int = _MSG_BYTES) -> str:
    """Broadcast one short string from rank 0, giving up after `timeout` seconds."""
    buf = bytearray(_encode(text, size))
    _wait(comm, comm.Ibcast(buf, root=0), timeout, what)
    return _decode(buf)


def _drain(listener: socket.socket | None) -> None:
    """Accept and close every connection waiting on rank 0's listener (the hosts' reach probes), without blocking."""
    if listener is None:
        return
    listener.setblocking(False)
    try:
        while True:
            listener.accept()[0].close()
    except (BlockingIOError, InterruptedError):
        pass
    finally:
        listener.setblocking(True)


def all_connected(rank: int, world_size: int, backend: str, timeout: timedelta) -> None:
    """After a gloo process group is made under an MPI launch: wait until every rank has made it too.

    torch's init_process_group returns on a rank once its own gloo connections are up, while a slower peer may still
    be in its connect. A rank that then destroys the group or exits (hpcdist.launch's function returning at once)
    closes that connection under it: the peer's init fails with `Gloo connectFullMesh failed ... Connection closed
    by peer`. Measured with plain torch 2.13, rank 0 destroying its group right after init failed rank 1's init in 6
    runs of 10 on a loaded host; with a barrier after init, 0 of 20. MPI's barrier leaves torch's groups, their
    stores and hpcdist's ledger of communication calls alone.

    Raises:
        RendezvousTimeout: a rank did not make the group within `timeout`, torch's for the group (the message says
            who waited for what).
    """
    mpi = sys.modules.get("mpi4py.MPI")  # the launch's rendezvous loaded it; without MPI the group is torch's alone
    if "gloo" not in backend.lower() or mpi is None or mpi.Is_finalized() or not mpi.Is_initialized():
        return
    comm = mpi.COMM_WORLD
    if world_size == 1 or (comm.rank, comm.size) != (rank, world_size):  # alone, or a group not of MPI's world
        return
    what = f"every rank to connect its {backend} process group (init_process_group)"
    _wait(comm, comm.Ibarrier(), timeout.total_seconds(), what)


def _wait(comm: Any, request: Any, timeout: float, what: str, meanwhile: Callable[[], None] | None = None) -> None:
    """Poll an MPI request until done, calling `meanwhile` between polls; on timeout name who waited for what."""
    wait_peers(comm, request, timeout, f"{what} during hpcdist rendezvous", TIMEOUT.name, meanwhile)


def _encode(text: str, size: int = _MSG_BYTES) -> bytes:
    """A fixed-size, zero-padded message buffer."""
    raw = text.encode()
    if len(raw) >= size:
        raise ValueError(f"rendezvous message longer than {size - 1} bytes: {text!r}")
    return raw.ljust(size, b"\0")


def _decode(raw: bytes | bytearray) -> str:
    """The text of a zero-padded message buffer."""
    return bytes(raw).split(b"\0", 1)[0].decode()


def doctor_probe(timeout: float = 10.0) -> None:
    """Run in every rank of `hpcdist doctor`'s probe job: the jobs' own rendezvous, with a plain listening socket
    on rank 0 instead of torch's store; each rank prints whether it reached it, rank 0 how many connected."""
    from mpi4py import MPI

    def say(line: str) -> None:  # one write(2) per line: the ranks share mpirun's stdout pipe
        os.write(1, (line + "\n").encode())

    import socket

    def listen(addr: str, world_size: int, seconds: float, port: int) -> Rendezvous:
        server = socket.create_server((addr, port), backlog=max(world_size, 16))
        return Rendezvous(addr, server.getsockname()[1], True, server)

    comm, host = MPI.COMM_WORLD, this_host()
    try:
        rdzv, _, _ = offer_rendezvous(comm, LaunchEnv.from_environ(os.environ), timeout, listen)
    except Exception as exc:  # noqa: BLE001 - reported, never raised: a raise would hang mpirun
        say(f"hpcdist-rdzv {comm.rank} {host} error {' | '.join(str(exc).splitlines())}")
        return
    problem = probe(rdzv.addr, rdzv.port, timeout)
    where = f"{rdzv.addr}:{rdzv.port}"
    say(f"hpcdist-rdzv {comm.rank} {host} {'ok ' + where if problem is None else f'error {where}: {problem}'}")
    comm.Barrier()
    if rdzv.listener is not None:  # rank 0: every connection the ranks opened waits in the listen backlog
        rdzv.listener.settimeout(0.2)
        accepted = 0
        try:
            while True:
                rdzv.listener.accept()[0].close()
                accepted += 1
        except OSError:
            pass
        rdzv.listener.close()
        say(f"hpcdist-rdzv-accepted {accepted}")
