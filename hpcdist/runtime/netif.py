"""This host's network interfaces and addresses (Linux ioctls, name resolution)."""

from __future__ import annotations

import fcntl
import ipaddress
import struct

from ..errors import UsageError
from ..records import record

__all__ = ["Interface", "host_address", "interfaces"]

_SIOCGIFFLAGS, _SIOCGIFADDR, _SIOCGIFNETMASK = 0x8913, 0x8915, 0x891B
_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8


@record(frozen=True)
class Interface:
    """An IPv4 address of a network interface that is up, with its prefix length."""

    name: str
    addr: str
    prefixlen: int

    @property
    def network(self) -> ipaddress.IPv4Network:
        """The subnet this address is on."""
        return ipaddress.IPv4Interface(f"{self.addr}/{self.prefixlen}").network


def interfaces() -> list[Interface]:
    """This host's IPv4 interfaces that are up and not loopback, in interface-index order (Linux ioctls)."""
    import socket  # in each function: most ranks list no interface, and the import takes 3-5 ms

    found = []
    for _, name in socket.if_nameindex():
        flags = _ioctl_int(name, _SIOCGIFFLAGS)
        if flags is None or not flags & _IFF_UP or flags & _IFF_LOOPBACK:
            continue
        addr, mask = _interface_address(name), _ioctl_addr(name, _SIOCGIFNETMASK)
        if addr and mask:
            found.append(Interface(name, addr, ipaddress.IPv4Network(f"0.0.0.0/{mask}").prefixlen))
    return found


def host_address(hostname: str | None = None) -> str:
    """A non-loopback IPv4 address of this host: its name's address, else the first interface's."""
    import socket

    name = hostname or socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET)
    except OSError:
        infos = []
    for *_, sockaddr in infos:
        if not str(sockaddr[0]).startswith("127."):
            return str(sockaddr[0])
    for _, ifname in socket.if_nameindex():
        found = _interface_address(ifname)
        if found and not found.startswith("127."):
            return found
    raise UsageError(
        f"no non-loopback IPv4 address found on host {name!r}, needed because ranks span several hosts; "
        "set MASTER_ADDR to an address of rank 0's host that every host can reach"
    )


def _interface_address(ifname: str) -> str | None:
    """The IPv4 address of a network interface (Linux SIOCGIFADDR), or None."""
    return _ioctl_addr(ifname, _SIOCGIFADDR)


def _ioctl(ifname: str, request: int) -> bytes | None:
    """The raw `struct ifreq` answer of an interface ioctl, or None (no such interface or address)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            return fcntl.ioctl(sock.fileno(), request, struct.pack("256s", ifname[:15].encode()))
        except OSError:
            return None


def _ioctl_addr(ifname: str, request: int) -> str | None:
    """An IPv4 address-valued interface ioctl (address, netmask), as text."""
    packed = _ioctl(ifname, request)
    return None if packed is None else str(ipaddress.IPv4Address(packed[20:24]))


def _ioctl_int(ifname: str, request: int) -> int | None:
    """A short-valued interface ioctl (flags)."""
    packed = _ioctl(ifname, request)
    return None if packed is None else struct.unpack_from("H", packed, 16)[0]
