"""Which address rank 0 offers for the rendezvous, and which interface each rank reaches it through (pure, but
`probe`, which opens one TCP connection).

Each rank's host is a HostInfo (its name and interface addresses); rank 0 offers the address of its interface whose
subnet the most other hosts share (loopback when the job has one host), and says in one report which hosts cannot
reach it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..hosts import resolve
from ..records import record
from .netif import Interface, host_address

__all__ = [
    "INFO_BYTES",
    "PROBE_SECONDS",
    "HostInfo",
    "ReachCount",
    "choose_interface",
    "interface_towards",
    "offered_address",
    "pick_interface",
    "probe",
    "rendezvous_address",
    "subnet_members",
    "unreachable_summary",
]

_LOOPBACK = "127.0.0.1"
INFO_BYTES = 2048  # one rank's hostname and interface addresses
PROBE_SECONDS = 5.0  # the reachability check's TCP connect; a LAN answers (or refuses) far sooner


@record(frozen=True)
class HostInfo:
    """What one rank tells the others about its host: its name and its interface addresses."""

    hostname: str
    interfaces: tuple[Interface, ...] = ()

    def encode(self, limit: int = INFO_BYTES - 1) -> str:
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


class ReachCount(NamedTuple):
    """How many hosts (and the ranks on them) could not reach the rendezvous, of how many."""

    hosts: int
    of_hosts: int
    ranks: int
    of_ranks: int


def subnet_members(own: HostInfo, peer: Sequence[Interface]) -> list[int]:
    """For each of rank 0's interfaces (`own`), 1 when one of `peer`'s addresses is on its subnet, else 0."""
    return [int(any(ipaddress.IPv4Address(p.addr) in iface.network for p in peer)) for iface in own.interfaces]


def pick_interface(own: HostInfo, counts: Sequence[int], preferred: str | None = None) -> Interface | None:
    """`own`'s interface whose subnet the most other hosts (`counts`, one per interface) have an address on.

    Ties go to the interface carrying `preferred`, then to the first one; None when every count is 0.
    """
    best, best_score = None, 0
    for iface, score in zip(own.interfaces, counts, strict=True):
        if score > best_score or (score == best_score and score and iface.addr == preferred):
            best, best_score = iface, score
    return best


def choose_interface(hosts: Sequence[HostInfo], preferred: str | None = None) -> Interface | None:
    """Rank 0's interface (hosts[0]) whose subnet holds an address of the most other hosts, or None.

    Ties go to the interface carrying `preferred` (the address rank 0's hostname resolves to), then to
    the first one. None when no other host has an address on any of rank 0's subnets (routed networks).
    """
    return pick_interface(hosts[0], _member_counts(hosts), preferred)


def _member_counts(hosts: Sequence[HostInfo]) -> list[int]:
    """Per interface of hosts[0], how many other hosts have an address on its subnet (the reduction's sum)."""
    own = hosts[0]
    others = {info.hostname: info for info in hosts if info.hostname != own.hostname}.values()
    rows = [subnet_members(own, info.interfaces) for info in others]
    return [sum(column) for column in zip(*rows, strict=True)] if rows else [0] * len(own.interfaces)


def rendezvous_address(hosts: Sequence[HostInfo], fallback: Callable[[], str] | None = None) -> str:
    """The address rank 0 (hosts[0]) offers: loopback on one host, else one every host can reach.

    `fallback` (default: `host_address`) gives the address when no interface shares a subnet with the
    other hosts, e.g. when they are reached through a router.
    """
    return offered_address(hosts[0], _member_counts(hosts), len({info.hostname for info in hosts}), fallback)


def offered_address(
    own: HostInfo, counts: Sequence[int], host_count: int, fallback: Callable[[], str] | None = None
) -> str:
    """Loopback when the job has one host; else `own`'s interface on the most hosts' subnet (`pick_interface`).

    `fallback` (default: `host_address`) gives the address when no interface shares a subnet with the
    other hosts, e.g. when they are reached through a router.
    """
    if host_count == 1:
        return _LOOPBACK
    iface = pick_interface(own, counts, resolve(own.hostname))
    return iface.addr if iface else (fallback or host_address)()


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


def probe(addr: str, port: int, seconds: float = PROBE_SECONDS) -> str | None:
    """Open and close a TCP connection to addr:port; None when it works, else why it did not."""
    import socket  # a host's first rank alone probes: the others never import it (3-5 ms)

    try:
        with socket.create_connection((addr, port), timeout=seconds):
            return None
    except TimeoutError:
        return f"no answer within {seconds:g} s"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()


def unreachable_summary(addr: str, port: int, host0: str, problems: Sequence[str], count: ReachCount) -> str:
    """Rank 0's report: one line per host that cannot reach the rendezvous (the first few), and what to do."""
    lines = "\n".join(f"  {line}" for line in problems)
    if count.hosts > len(problems):
        lines += f"\n  and {count.hosts - len(problems)} more host(s)"
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
        f"the rendezvous {addr}:{port} on {host0} is unreachable from {count.hosts} of {count.of_hosts} hosts "
        f"({count.ranks} of {count.of_ranks} ranks):\n{lines}\n{hint}"
    )


def _is_loopback(addr: str) -> bool:
    """Whether `addr` (an address or a name) is a loopback address."""
    resolved = addr if addr.replace(".", "").isdigit() else resolve(addr)
    try:
        return resolved is not None and ipaddress.ip_address(resolved).is_loopback
    except ValueError:
        return False
