"""A job's environment: NCCL/Gloo profiles, the seed notes' settings as options, env files, and trap warnings."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence

from ..errors import UsageError
from ..launching.names import check_env_name

__all__ = [
    "PROFILES",
    "SETTINGS",
    "env_warnings",
    "job_environment",
    "parse_env_file",
    "parse_env_item",
    "read_env_file",
]

# `^lo,docker0`: the seed notes' value; NCCL then skips both loopback and Docker's bridge.
_IFNAME = "^lo,docker0"
PROFILES: dict[str, dict[str, str]] = {
    "nccl": {"NCCL_SOCKET_IFNAME": _IFNAME, "NCCL_DEBUG": "WARN"},
    "nccl-debug": {
        "NCCL_SOCKET_IFNAME": _IFNAME,
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    },
    "nccl-ethernet": {"NCCL_SOCKET_IFNAME": _IFNAME, "NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"},
    "gloo": {"OMP_NUM_THREADS": "1"},
}

# (option, variable, help): the settings of the seed notes, each as an option named after its variable.
SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("--nccl-socket-ifname", "NCCL_SOCKET_IFNAME", "interfaces NCCL may use, e.g. eth0 or ^lo,docker0"),
    ("--nccl-debug", "NCCL_DEBUG", "NCCL log level: WARN, INFO or TRACE"),
    ("--nccl-ib-disable", "NCCL_IB_DISABLE", "1 = no InfiniBand, use sockets"),
    ("--nccl-p2p-disable", "NCCL_P2P_DISABLE", "1 = no GPU peer-to-peer transfers"),
    ("--nccl-algo", "NCCL_ALGO", "collective algorithm: ring, tree, collnet..."),
    ("--nccl-topo-file", "NCCL_TOPO_FILE", "a topology XML file on the compute nodes"),
    ("--omp-num-threads", "OMP_NUM_THREADS", "threads per rank, to avoid contention"),
    ("--gloo-socket-ifname", "GLOO_SOCKET_IFNAME", "the one interface Gloo uses, e.g. eth0"),
)


def parse_env_item(item: str, where: str = "--env") -> tuple[str, str]:
    """`NAME=VALUE` -> (NAME, VALUE); the value is taken literally."""
    name, eq, value = item.partition("=")
    if not eq:
        raise UsageError(f"{where} {item!r}: expected NAME=VALUE, e.g. NCCL_DEBUG=INFO")
    try:
        check_env_name(name)
    except UsageError as exc:
        raise UsageError(f"{where} {item!r}: {exc}") from None
    return name, value


def parse_env_file(text: str, source: str) -> list[tuple[str, str]]:
    """`[export] NAME=VALUE` lines read as a shell would (quotes, `# comments`); blank and comment lines skipped."""
    pairs = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{lineno}:"
        line = line.removeprefix("export ").lstrip()
        name, eq, rest = line.partition("=")
        try:
            words = shlex.split(rest, comments=True)
        except ValueError as exc:
            raise UsageError(f"{where} {raw.strip()!r}: {exc}; quote the value as in a shell") from None
        if not eq or len(words) > 1:
            raise UsageError(f"{where} expected NAME=VALUE (quote a value with spaces), got {raw.strip()!r}")
        pairs.append(parse_env_item(f"{name}={words[0] if words else ''}", where))
    return pairs


def read_env_file(path: str) -> list[tuple[str, str]]:
    """Read and parse the env file at `path`."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read env file {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_env_file(text, path)


def job_environment(
    profile: str | None,
    files: Sequence[Iterable[tuple[str, str]]] = (),
    settings: Mapping[str, str | None] | None = None,
    items: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """Merge, later winning: the profile, env files in order, the setting options, then --env items."""
    if profile is not None and profile not in PROFILES:
        raise UsageError(f"--profile {profile!r}: use one of {', '.join(PROFILES)}")
    env = dict(PROFILES[profile]) if profile else {}
    for pairs in files:
        env.update(pairs)
    env.update({k: v for k, v in (settings or {}).items() if v is not None})
    env.update(items)
    return env


def env_warnings(env: Mapping[str, str], nodes: int = 1) -> list[str]:
    """Known traps in NCCL/Gloo settings, each as one sentence saying what to do instead."""
    warnings = []
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if ifname is not None and ifname.startswith("^"):
        excluded = {p.strip() for p in ifname.lstrip("^").split(",")}
        if "lo" not in excluded and not any(p.startswith("lo") for p in excluded):
            warnings.append(
                f"NCCL_SOCKET_IFNAME={ifname} excludes {', '.join(sorted(excluded))} but not lo, so NCCL "
                "may pick the loopback interface and hang across nodes; use ^lo,docker0 or name the "
                "interface (e.g. eth0)"
            )
    elif ifname is not None and nodes > 1 and ifname.split(",")[0] in ("lo", "=lo"):
        warnings.append(
            f"NCCL_SOCKET_IFNAME={ifname} is the loopback interface, which cannot reach the other "
            f"{nodes - 1} node(s); name a network interface such as eth0"
        )
    gloo = env.get("GLOO_SOCKET_IFNAME")
    if gloo is not None and gloo.startswith("^"):
        warnings.append(
            f"GLOO_SOCKET_IFNAME={gloo}: Gloo has no '^' exclusion syntax and looks for an interface "
            "of that name; name the interface itself, e.g. GLOO_SOCKET_IFNAME=eth0"
        )
    topo = env.get("NCCL_TOPO_FILE")
    if topo is not None and not topo.startswith(("/", "$")):
        warnings.append(
            f"NCCL_TOPO_FILE={topo} is a relative path, resolved on every node from the job's working "
            "directory; give an absolute path"
        )
    if env.get("NCCL_P2P_DISABLE") == "1":
        warnings.append(
            "NCCL_P2P_DISABLE=1 turns off NVLink/PCIe peer-to-peer and slows intra-node collectives; "
            "set it only to work around a broken P2P setup"
        )
    return warnings
