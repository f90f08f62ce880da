"""MASTER_ADDR/MASTER_PORT discovery: MPI broadcast from rank 0, Slurm nodelist, or this host."""

from __future__ import annotations

import ipaddress
import socket
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..errors import RendezvousTimeout, UsageError
from ..waits import Backoff, poll_until
from .env import RUN_ID_PREFIX, AgentFacts, LaunchEnv
from .netif import Interface, host_address, interfaces, resolve

__all__ = [
    "Bind",
    "HostInfo",
    "Rendezvous",
    "RendezvousTimeout",
    "RendezvousUnreachable",
    "check_master_addr",
    "choose_interface",
    "interface_towards",
    "local_store",
    "mpi_rendezvous",
    "new_run_id",
    "offer_rendezvous",
    "probe",
    "rendezvous_address",
    "slurm_rendezvous",
    "unreachable_summary",
]

_LOOPBACK = "127.0.0.1"
_SLURM_PORT_BASE = 15000  # below Linux's ephemeral range (32768-60999), so no client socket holds it
_SLURM_PORT_SPAN = 10000
_MSG_BYTES = 512
_INFO_BYTES = 2048  # one rank's hostname and interface addresses
_PROBE_SECONDS = 5.0  # the reachability check's TCP connect; a LAN answers (or refuses) far sooner
_REPORT_GRACE = 30.0  # other ranks wait this long for rank 0 to report an unreachable rendezvous and abort


class RendezvousUnreachable(UsageError):
    """Some ranks cannot open a TCP connection to the rendezvous address rank 0 offers."""


@dataclass(frozen=True)
class HostInfo:
    """What one rank tells the others about its host: its name and its interface addresses."""

    hostname: str
    interfaces: tuple[Interface, ...] = ()

    def encode(self, limit: int = _INFO_BYTES - 1) -> str:
        """`HOST NAME=ADDR/LEN ...`, dropping trailing interfaces that would not fit in `limit` bytes."""
        text = self.hostname
        for iface in self.interfaces:
            word = f" {iface.name}={iface.addr}/{iface.prefixlen}"
            if len((text + word).encode()) > limit:
                break
            text += word
        return text

    @classmethod
    def decode(cls, text: str) -> HostInfo:
        """The inverse of `encode`."""
        hostname, *words = text.split()
        ifaces = []
        for word in words:
            name, _, cidr = word.rpartition("=")
            addr, _, length = cidr.partition("/")
            ifaces.append(Interface(name, addr, int(length)))
        return cls(hostname, tuple(ifaces))


@dataclass(frozen=True)
class Rendezvous:
    """Where the torch TCP store lives, and the store object when this process hosts it."""

    addr: str
    port: int
    hosted: bool = False  # hpcdist bound the store (on rank 0), so every rank's torch connects as a client
    store: Any = None  # torch TCPStore kept alive on rank 0; init_process_group reuses it (multi-tenant)
    ifname: str | None = None  # this rank's interface towards `addr` when ranks span hosts (GLOO/NCCL_SOCKET_IFNAME)
    hosts: tuple[str, ...] = ()  # every rank's host name, in rank order, when the rendezvous gathered them
    run_id: str | None = None  # rank 0's id for this run, the same on every rank
    given: bool = False  # the user's MASTER_ADDR/PORT: hpcdist neither chose it nor knows who serves it

    def facts(self) -> AgentFacts:
        """What this rendezvous tells the ranks in torchrun's variables (GROUP_*, run id, agent store)."""
        return AgentFacts(self.hosts, self.run_id, None if self.given else self.hosted)


def choose_interface(hosts: Sequence[HostInfo], preferred: str | None = None) -> Interface | None:
    """Rank 0's interface (hosts[0]) whose subnet holds an address of the most other hosts, or None.

    Ties go to the interface carrying `preferred` (the address rank 0's hostname resolves to), then to
    the first one. None when no other host has an address on any of rank 0's subnets (routed networks).
    """
    own = hosts[0]
    others = {info.hostname: info for info in hosts if info.hostname != own.hostname}.values()
    best, best_score = None, 0
    for iface in own.interfaces:
        network = iface.network
        score = sum(any(ipaddress.IPv4Address(peer.addr) in network for peer in info.interfaces) for info in others)
        if score > best_score or (score == best_score and score and iface.addr == preferred):
            best, best_score = iface, score
    return best


def rendezvous_address(hosts: Sequence[HostInfo], fallback: Callable[[], str] | None = None) -> str:
    """The address rank 0 (hosts[0]) offers: loopback on one host, else one every host can reach.

    `fallback` (default: `host_address`) gives the address when no interface shares a subnet with the
    other hosts, e.g. when they are reached through a router.
    """
    if len({info.hostname for info in hosts}) == 1:
        return _LOOPBACK
    fallback = fallback or host_address
    preferred = resolve(hosts[0].hostname)
    iface = choose_interface(hosts, preferred)
    return iface.addr if iface else fallback()


def interface_towards(addr: str, ifaces: Sequence[Interface]) -> str | None:
    """The name of the interface that carries `addr` or is on its subnet, or None (loopback, routed)."""
    try:
        target = ipaddress.IPv4Address(addr)
    except ValueError:
        resolved = resolve(addr)
        if resolved is None:
            return None
        target = ipaddress.IPv4Address(resolved)
    if target.is_loopback:
        return None
    for iface in ifaces:
        if iface.addr == str(target):
            return iface.name
    for iface in ifaces:
        if target in iface.network:
            return iface.name
    return None


def probe(addr: str, port: int, seconds: float = _PROBE_SECONDS) -> str | None:
    """Open and close a TCP connection to addr:port; None when it works, else why it did not."""
    try:
        with socket.create_connection((addr, port), timeout=seconds):
            return None
    except TimeoutError:
        return f"no answer within {seconds:g} s"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()


def unreachable_summary(addr: str, port: int, host0: str, problems: Sequence[str], world_size: int) -> str:
    """Rank 0's report: one line per rank that cannot reach the rendezvous, and what to do about it."""
    lines = "\n".join(f"  {line}" for line in problems)
    if _is_loopback(addr):
        hint = (
            f"{addr} is a loopback address: on every other host it means that host itself; unset MASTER_ADDR "
            "so hpcdist picks an address of rank 0's host that the others share a subnet with, or set it to one"
        )
    else:
        hint = (
            f"check that {addr} is an address of {host0} that these hosts can reach and that no firewall blocks "
            "TCP between the hosts; set MASTER_ADDR to a reachable address of rank 0's host (and "
            "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the interfaces that carry it) if hpcdist's choice is wrong"
        )
    return (
        f"the rendezvous {addr}:{port} on {host0} is unreachable from {len(problems)} of {world_size} ranks:\n"
        f"{lines}\n{hint}"
    )


def _is_loopback(addr: str) -> bool:
    """Whether `addr` (an address or a name) is a loopback address."""
    resolved = addr if addr.replace(".", "").isdigit() else resolve(addr)
    try:
        return resolved is not None and ipaddress.ip_address(resolved).is_loopback
    except ValueError:
        return False


def check_master_addr(addr: str) -> None:
    """Fail at once, naming this host, when the MASTER_ADDR the user set does not resolve here.

    Otherwise torch's store would retry the name until its timeout, and then blame rank 0.

    Raises:
        UsageError: `addr` does not resolve to an IPv4 address on this host.
    """
    try:
        socket.getaddrinfo(addr, None, socket.AF_INET)
    except OSError as exc:
        raise UsageError(
            f"MASTER_ADDR={addr} does not resolve on host {socket.gethostname()} "
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


def local_store(addr: str, world_size: int, timeout: float, port: int = 0) -> Rendezvous:
    """Bind torch's TCP store on an OS-chosen port (no pick-then-bind race); it serves all interfaces."""
    from torch.distributed import TCPStore

    store = TCPStore(
        addr,
        port,
        world_size=world_size,
        is_master=True,
        multi_tenant=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout),
    )
    return Rendezvous(addr, store.port, True, store, run_id=new_run_id())


Bind = Callable[[str, int, float, int], Rendezvous]  # (addr, world_size, timeout, port) -> a bound rendezvous


def new_run_id() -> str:
    """A fresh TORCHELASTIC_RUN_ID, marked as hpcdist's (torchrun --standalone's is a uuid too)."""
    return f"{RUN_ID_PREFIX}{uuid.uuid4().hex[:12]}"


def mpi_rendezvous(comm: Any, env: LaunchEnv, timeout: float) -> Rendezvous:
    """Rank 0 binds the store and broadcasts its address and port; every rank checks it can reach it.

    Every wait ends after `timeout`. When ranks span hosts, rank 0 offers the address of its interface
    on the subnet shared with the other hosts, and each rank names its own interface towards it.

    Raises:
        RendezvousTimeout: a rank did not arrive within `timeout`.
        RendezvousUnreachable: some rank cannot connect to the address rank 0 offers.
    """
    rdzv, mine, host0 = offer_rendezvous(comm, env, timeout, local_store)
    _check_reach(comm, rdzv, mine, host0, timeout)
    return rdzv


def offer_rendezvous(comm: Any, env: LaunchEnv, timeout: float, bind: Bind) -> tuple[Rendezvous, HostInfo, str]:
    """Every rank's host and interfaces to all; rank 0 chooses an address, `bind`s it and broadcasts it.

    Returns this rank's view of the rendezvous, its own HostInfo and rank 0's hostname. `hpcdist doctor`
    calls this with a plain listening socket, so it checks the very address a job would use.

    Raises:
        RendezvousTimeout: a rank did not arrive within `timeout`.
        UsageError: rank 0 could not bind the chosen address.
    """
    mine = HostInfo(socket.gethostname(), tuple(interfaces()))
    infos = [
        HostInfo.decode(text)
        for text in _allgather_str(comm, mine.encode(), timeout, "every rank's host and addresses", _INFO_BYTES)
    ]
    spans_hosts = len({info.hostname for info in infos}) > 1
    store = None
    if comm.rank == 0:
        addr = env.master_addr or rendezvous_address(infos)
        try:
            rdzv = bind(addr, comm.size, timeout, env.master_port or 0)
            store, message = rdzv.store, f"{rdzv.addr} {rdzv.port} {new_run_id()}"
        except Exception as exc:  # noqa: BLE001 - torch's store error, forwarded so no rank waits forever
            message = f"! {exc}"
        _bcast_str(comm, message, timeout, "rank 0's rendezvous address")
        if store is None:
            raise UsageError(f"rank 0 could not bind the rendezvous store on {addr}: {message[2:]}")
    else:
        message = _bcast_str(comm, "", timeout, "rank 0's rendezvous address")
        if message.startswith("!"):
            raise UsageError(f"rank 0 could not bind the rendezvous store: {message[2:]}")
    addr, port, run_id = message.split()
    ifname = interface_towards(addr, mine.interfaces) if spans_hosts else None
    hosts = tuple(info.hostname for info in infos)
    return Rendezvous(addr, int(port), True, store, ifname, hosts, run_id), mine, infos[0].hostname


def _check_reach(comm: Any, rdzv: Rendezvous, mine: HostInfo, host0: str, timeout: float) -> None:
    """Every rank opens a TCP connection to the rendezvous; rank 0 reports every rank that cannot."""
    problem = probe(rdzv.addr, rdzv.port, min(_PROBE_SECONDS, timeout))
    line = ""
    if problem:
        via = next((f"{i.name} {i.addr}" for i in mine.interfaces if i.name == rdzv.ifname), None)
        line = (
            (
                f"rank {comm.rank} on {mine.hostname} ({f'via {via}' if via else 'no interface on its subnet'}) "
                f"cannot reach the rendezvous {rdzv.addr}:{rdzv.port} ({problem})"
            )
            .encode()[: _MSG_BYTES - 1]
            .decode(errors="ignore")
        )
    problems = [text for text in _allgather_str(comm, line, timeout, "every rank's rendezvous check") if text]
    if not problems:
        return
    if comm.rank == 0:
        raise RendezvousUnreachable(unreachable_summary(rdzv.addr, rdzv.port, host0, problems, comm.size))
    # Give rank 0 time to print the summary and abort the job, so its report is not cut short.
    sys.stderr.flush()
    time.sleep(min(_REPORT_GRACE, timeout))
    raise RendezvousUnreachable(
        f"the rendezvous {rdzv.addr}:{rdzv.port} is unreachable from {len(problems)} rank(s); rank 0 lists them"
    )


def _allgather_str(comm: Any, text: str, timeout: float, what: str, size: int = _MSG_BYTES) -> list[str]:
    """Gather one short string from every rank, giving up after `timeout` seconds."""
    send = bytearray(_encode(text, size))
    recv = bytearray(size * comm.size)
    _wait(comm, comm.Iallgather(send, recv), timeout, what)
    return [_decode(recv[i * size : (i + 1) * size]) for i in range(comm.size)]


def _bcast_str(comm: Any, text: str, timeout: float, what: str) -> str:
    """Broadcast one short string from rank 0, giving up after `timeout` seconds."""
    buf = bytearray(_encode(text))
    _wait(comm, comm.Ibcast(buf, root=0), timeout, what)
    return _decode(buf)


def _wait(comm: Any, request: Any, timeout: float, what: str) -> None:
    """Poll an MPI request until done; on timeout name who waited for what."""
    poll_until(
        request.Test,
        time.monotonic() + timeout,
        lambda: (
            f"rank {comm.rank} of {comm.size} on {socket.gethostname()} waited {timeout:g} s for {what} "
            "during hpcdist rendezvous; a rank may have died or hung before reaching it "
            "(raise HPCDIST_TIMEOUT if start-up is just slow)"
        ),
        backoff=Backoff(1e-5, 0.01),
        error=RendezvousTimeout,
    )


def _encode(text: str, size: int = _MSG_BYTES) -> bytes:
    """A fixed-size, zero-padded message buffer."""
    raw = text.encode()
    if len(raw) >= size:
        raise ValueError(f"rendezvous message longer than {size - 1} bytes: {text!r}")
    return raw.ljust(size, b"\0")


def _decode(raw: bytes | bytearray) -> str:
    """The text of a zero-padded message buffer."""
    return bytes(raw).split(b"\0", 1)[0].decode()
