"""The doctor's network check: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME against this host's interfaces (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from .facts import Check

__all__ = ["check_interfaces"]


def _nccl_match(pattern: str, name: str, exact: bool) -> bool:
    return name == pattern if exact else name.startswith(pattern)


def check_interfaces(
    environ: Mapping[str, str], interfaces: Mapping[str, str], multi_host: bool, hostname_address: str | None = None
) -> list[Check]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME name interfaces that exist and make sense."""
    names = sorted(interfaces)
    have = ", ".join(names) or "none"
    checks: list[Check] = []
    nccl = environ.get("NCCL_SOCKET_IFNAME", "").strip()
    if nccl:
        exclude = nccl.startswith("^")
        rest = nccl[1:] if exclude else nccl
        exact = rest.startswith("=")
        patterns = [p for p in (rest[1:] if exact else rest).split(",") if p]
        if not exclude:
            for p in patterns:
                hits = [n for n in names if _nccl_match(p, n, exact)]
                if not hits:
                    checks.append(
                        Check(
                            "network",
                            "fail",
                            f"NCCL_SOCKET_IFNAME={nccl}: no interface "
                            f"{'named' if exact else 'starting with'} {p!r} here (have: {have})",
                            f"set NCCL_SOCKET_IFNAME to one of: {have}",
                        )
                    )
                elif all(interfaces[n] == "down" for n in hits):
                    checks.append(
                        Check(
                            "network",
                            "warn",
                            f"NCCL_SOCKET_IFNAME={nccl}: {', '.join(hits)} is down",
                            f"bring it up (ip link set {hits[0]} up) or choose another interface",
                        )
                    )
                elif "lo" in hits and multi_host:
                    checks.append(
                        Check(
                            "network",
                            "warn",
                            f"NCCL_SOCKET_IFNAME={nccl} selects lo, which other hosts cannot reach",
                            "name the interface the hosts share, e.g. NCCL_SOCKET_IFNAME=eth0",
                        )
                    )
            if not checks:
                checks.append(Check("network", "pass", f"NCCL_SOCKET_IFNAME={nccl} matches interfaces here"))
        else:
            left = [n for n in names if not any(_nccl_match(p, n, exact) for p in patterns)]
            replaced = [n for n in left if n == "lo" or n.startswith("docker")]
            if not left:
                checks.append(
                    Check(
                        "network",
                        "fail",
                        f"NCCL_SOCKET_IFNAME={nccl} excludes every interface (have: {have})",
                        "exclude fewer interfaces, or name the one to use",
                    )
                )
            elif replaced:
                checks.append(
                    Check(
                        "network",
                        "warn",
                        f"NCCL_SOCKET_IFNAME={nccl} replaces NCCL's default exclusion of "
                        f"lo and docker*: NCCL may now pick {', '.join(replaced)}",
                        f"NCCL_SOCKET_IFNAME=^{','.join(patterns + replaced)} (or name the interface to use)",
                    )
                )
            else:
                checks.append(Check("network", "pass", f"NCCL_SOCKET_IFNAME={nccl} leaves {', '.join(left)}"))
    gloo = environ.get("GLOO_SOCKET_IFNAME", "").strip()
    if gloo:
        bad = [n for n in gloo.split(",") if n and n not in interfaces]
        down = [n for n in gloo.split(",") if interfaces.get(n) == "down"]
        if bad:
            checks.append(
                Check(
                    "network",
                    "fail",
                    f"GLOO_SOCKET_IFNAME={gloo}: no interface named {', '.join(map(repr, bad))} here (have: {have})",
                    f"set GLOO_SOCKET_IFNAME to one of: {have} (exact names, comma-separated)",
                )
            )
        elif down:
            checks.append(
                Check(
                    "network",
                    "warn",
                    f"GLOO_SOCKET_IFNAME={gloo}: {', '.join(down)} is down",
                    f"bring it up (ip link set {down[0]} up) or choose another interface",
                )
            )
        elif "lo" in gloo.split(",") and multi_host:
            checks.append(
                Check(
                    "network",
                    "warn",
                    f"GLOO_SOCKET_IFNAME={gloo} uses lo, which other hosts cannot reach",
                    "name the interface the hosts share, e.g. GLOO_SOCKET_IFNAME=eth0",
                )
            )
        else:
            checks.append(Check("network", "pass", f"GLOO_SOCKET_IFNAME={gloo} names existing interfaces"))
    if not nccl and not gloo:
        up = [n for n in names if n != "lo" and interfaces[n] != "down"]
        if multi_host and hostname_address and hostname_address.startswith("127."):
            checks.append(
                Check(
                    "network",
                    "warn",
                    f"this host's name resolves to {hostname_address}: without "
                    "GLOO_SOCKET_IFNAME, gloo binds loopback and other hosts cannot reach it",
                    f"export GLOO_SOCKET_IFNAME={up[0] if up else 'eth0'} (and NCCL_SOCKET_IFNAME)",
                )
            )
        elif multi_host and len(up) > 1:
            checks.append(
                Check(
                    "network",
                    "warn",
                    f"several interfaces are up ({', '.join(up)}) and neither "
                    "NCCL_SOCKET_IFNAME nor GLOO_SOCKET_IFNAME is set",
                    "set both to the interface the hosts share, e.g. GLOO_SOCKET_IFNAME=eth0",
                )
            )
        else:
            checks.append(
                Check(
                    "network",
                    "info",
                    "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME unset: NCCL and gloo "
                    f"pick an interface themselves (up here: {', '.join(up) or 'only lo'})",
                )
            )
    return checks
