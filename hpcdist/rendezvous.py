"""MASTER_ADDR/MASTER_PORT discovery: MPI broadcast from rank 0, Slurm nodelist, or this host."""

from __future__ import annotations

import fcntl
import socket
import struct
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .env import LaunchEnv
from .errors import UsageError

__all__ = [
    "Rendezvous",
    "RendezvousTimeout",
    "host_address",
    "local_store",
    "mpi_rendezvous",
    "pick_address",
    "slurm_rendezvous",
]

_LOOPBACK = "127.0.0.1"
_SLURM_PORT_BASE = 15000  # below Linux's ephemeral range (32768-60999), so no client socket holds it
_SLURM_PORT_SPAN = 10000
_MSG_BYTES = 512


class RendezvousTimeout(RuntimeError):
    """A rank waited longer than the job's timeout for its peers during rendezvous."""


@dataclass(frozen=True)
class Rendezvous:
    """Where the torch TCP store lives, and the store object when this process hosts it."""

    addr: str
    port: int
    hosted: bool = False  # hpcdist bound the store (on rank 0), so every rank's torch connects as a client
    store: Any = None  # torch TCPStore kept alive on rank 0; init_process_group reuses it (multi-tenant)


def pick_address(hostnames: list[str], own_address: str) -> str:
    """Loopback when every rank runs on this host, else an address of rank 0 the others can reach."""
    return _LOOPBACK if len(set(hostnames)) == 1 else own_address


def host_address(hostname: str | None = None) -> str:
    """A non-loopback IPv4 address of this host: its name's address, else the first interface's."""
    name = hostname or socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET)
    except OSError:
        infos = []
    for *_, sockaddr in infos:
        if not sockaddr[0].startswith("127."):
            return sockaddr[0]
    for _, ifname in socket.if_nameindex():
        addr = _interface_address(ifname)
        if addr and not addr.startswith("127."):
            return addr
    raise UsageError(
        f"no non-loopback IPv4 address found on host {name!r}, needed because ranks span several hosts; "
        "set MASTER_ADDR to an address of rank 0's host that every host can reach"
    )


def _interface_address(ifname: str) -> str | None:
    """The IPv4 address of a network interface (Linux SIOCGIFADDR), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


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
    return Rendezvous(addr, store.port, True, store)


def mpi_rendezvous(comm: Any, env: LaunchEnv, timeout: float) -> Rendezvous:
    """Rank 0 binds the store and broadcasts its address and port; every wait ends after `timeout`."""
    hosts = _allgather_str(comm, socket.gethostname(), timeout, "every rank's hostname")
    if comm.rank == 0:
        addr = env.master_addr or pick_address(hosts, host_address())
        try:
            rdzv = local_store(addr, comm.size, timeout, env.master_port or 0)
            message = f"{rdzv.addr} {rdzv.port}"
        except Exception as exc:  # torch's store error, forwarded so no rank waits forever
            rdzv, message = None, f"! {exc}"
        _bcast_str(comm, message, timeout, "rank 0's rendezvous address")
        if rdzv is None:
            raise UsageError(f"rank 0 could not bind the rendezvous store on {addr}: {message[2:]}")
        return rdzv
    message = _bcast_str(comm, "", timeout, "rank 0's rendezvous address")
    if message.startswith("!"):
        raise UsageError(f"rank 0 could not bind the rendezvous store: {message[2:]}")
    addr, port = message.split()
    return Rendezvous(addr, int(port), True)


def _allgather_str(comm: Any, text: str, timeout: float, what: str) -> list[str]:
    """Gather one short string from every rank, giving up after `timeout` seconds."""
    send = bytearray(_encode(text))
    recv = bytearray(_MSG_BYTES * comm.size)
    _wait(comm, comm.Iallgather(send, recv), timeout, what)
    return [_decode(recv[i * _MSG_BYTES : (i + 1) * _MSG_BYTES]) for i in range(comm.size)]


def _bcast_str(comm: Any, text: str, timeout: float, what: str) -> str:
    """Broadcast one short string from rank 0, giving up after `timeout` seconds."""
    buf = bytearray(_encode(text))
    _wait(comm, comm.Ibcast(buf, root=0), timeout, what)
    return _decode(buf)


def _wait(comm: Any, request: Any, timeout: float, what: str) -> None:
    """Poll an MPI request until done; on timeout name who waited for what."""
    deadline = time.monotonic() + timeout
    pause = 1e-5
    while not request.Test():
        if time.monotonic() > deadline:
            raise RendezvousTimeout(
                f"rank {comm.rank} of {comm.size} on {socket.gethostname()} waited {timeout:g} s for {what} "
                "during hpcdist rendezvous; a rank may have died or hung before reaching it "
                "(raise HPCDIST_TIMEOUT if start-up is just slow)"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _encode(text: str) -> bytes:
    """A fixed-size, zero-padded message buffer."""
    raw = text.encode()
    if len(raw) >= _MSG_BYTES:
        raise ValueError(f"rendezvous message longer than {_MSG_BYTES - 1} bytes: {text!r}")
    return raw.ljust(_MSG_BYTES, b"\0")


def _decode(raw: bytes | bytearray) -> str:
    """The text of a zero-padded message buffer."""
    return bytes(raw).split(b"\0", 1)[0].decode()
