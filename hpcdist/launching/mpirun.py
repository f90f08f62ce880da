"""Build the Open MPI `mpirun` command line for a job (pure: no processes are started)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import UsageError
from ..values import MAX_COUNT
from .hostfile import HostSlots
from .names import ENV_NAME

__all__ = [
    "KEEPALIVE",
    "SHIM",
    "AppContext",
    "MpirunSpec",
    "build_mpirun_argv",
    "env_forwards",
    "locate_mpirun",
    "spans_hosts",
]

_FORWARD_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "HPCDIST_")
_FORWARD_NAMES = frozenset({"OMP_NUM_THREADS", "PYTHONPATH", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"})
SHIM = ("-m", "hpcdist.shim", "--")  # after a python: what each rank runs before the program (scripts too)
# Open MPI 5's `btl ofi` probes for an HPC fabric: ~1 s per start on hosts that have none.
_FABRIC_PROBE_BTL = "ofi"
# TCP keepalive on PRRTE's daemon links: a cut link is noticed after ~2 + 3 x 1 s instead of ~8 minutes.
KEEPALIVE = (("oob_tcp_keepalive_time", "2"), ("oob_tcp_keepalive_intvl", "1"), ("oob_tcp_keepalive_probes", "3"))


@dataclass(frozen=True)
class AppContext:
    """One host's part of a launch in app contexts (`-np N -H host:N -x NAME=VALUE PROGRAM :`)."""

    host: HostSlots
    np: int
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class MpirunSpec:
    """Everything needed to build one `mpirun` command line."""

    program: tuple[str, ...]
    np: int | None  # None: mpirun takes every slot of the Slurm allocation it runs in
    hostfile: str | None = None
    hosts: tuple[HostSlots, ...] = ()
    env: tuple[tuple[str, str | None], ...] = ()
    mca: tuple[tuple[str, str], ...] = ()
    bind_to: str = "none"
    map_by: str = "slot"
    oversubscribe: bool = False
    as_root: bool = False
    skip_fabric_probe: bool = True
    keepalive: bool = False  # --prtemca KEEPALIVE: set for jobs on several hosts, so a lost host is noticed
    extra: tuple[str, ...] = ()
    mpirun: str = "mpirun"
    contexts: tuple[AppContext, ...] = ()  # set: one app context per host, each with its own variables


def build_mpirun_argv(spec: MpirunSpec) -> list[str]:
    """Return the mpirun argv for `spec`; `contexts` win over `hostfile`, which wins over `hosts`."""
    _validate(spec)
    argv = [spec.mpirun] if spec.np is None or spec.contexts else [spec.mpirun, "-np", str(spec.np)]
    if spec.contexts:  # each app context names its host below
        pass
    elif spec.hostfile is not None:
        argv += ["--hostfile", spec.hostfile]
    elif spec.hosts:
        argv += ["-H", ",".join(f"{h.host}:{h.slots}" for h in spec.hosts)]
    argv += ["--bind-to", spec.bind_to, "--map-by", spec.map_by]
    if spec.oversubscribe:
        argv.append("--oversubscribe")
    if spec.as_root:
        argv.append("--allow-run-as-root")
    for key, value in _mca_pairs(spec.mca, spec.skip_fabric_probe):
        argv += ["--mca", key, value]
    if spec.keepalive:
        for key, value in KEEPALIVE:
            argv += ["--prtemca", key, value]
    for name, setting in spec.env:
        argv += ["-x", name if setting is None else f"{name}={setting}"]
    argv += spec.extra
    if not spec.contexts:
        return argv + list(spec.program)
    for index, context in enumerate(spec.contexts):
        argv += [*([":"] if index else []), "-np", str(context.np), "-H", f"{context.host.host}:{context.host.slots}"]
        for name, value in context.env:
            argv += ["-x", f"{name}={value}"]
        argv += spec.program
    return argv


def spans_hosts(hosts: Sequence[HostSlots], environ: Mapping[str, str]) -> bool:
    """Whether the job may run on more than one host: several host names, or a multi-node Slurm allocation."""
    if hosts:
        return len({h.host for h in hosts}) > 1
    nodes = environ.get("SLURM_JOB_NUM_NODES", environ.get("SLURM_NNODES", "1"))
    return nodes.isdigit() and int(nodes) > 1


def env_forwards(environ: Mapping[str, str], user: Sequence[str]) -> tuple[tuple[str, str | None], ...]:
    """Pick the `-x` variables: known job variables set in `environ` (sorted), then `user` items."""
    auto = {
        name: None
        for name in sorted(environ)
        if ENV_NAME.match(name) and (name.startswith(_FORWARD_PREFIXES) or name in _FORWARD_NAMES)
    }
    chosen: dict[str, str | None] = {}
    for item in user:
        name, eq, value = item.partition("=")
        if not ENV_NAME.match(name):
            raise UsageError(
                f"-x {item!r}: {name!r} is not a valid variable name; use letters, digits and "
                f"'_' not starting with a digit, as in -x NAME or -x NAME=VALUE"
            )
        auto.pop(name, None)
        chosen[name] = value if eq else None
    return tuple(auto.items()) + tuple(chosen.items())


def _validate(spec: MpirunSpec) -> None:
    """Raise UsageError for a spec mpirun would reject or misread."""
    if spec.np is not None and spec.np < 1:
        raise UsageError(f"-np must be at least 1, got {spec.np}")
    if spec.np is not None and spec.np > MAX_COUNT:
        raise UsageError(f"-np must be at most {MAX_COUNT} (MPI counts ranks in an int), got {spec.np}")
    if not spec.program:
        raise UsageError("no program to run; put it after '--', e.g. -np 2 -- python train.py")
    for name, _ in spec.env:
        if not ENV_NAME.match(name):
            raise UsageError(
                f"-x {name!r}: not a valid variable name; use letters, digits and '_' not starting with a digit"
            )
    if not spec.bind_to.strip():
        raise UsageError("--bind-to needs a value such as none, core or socket")
    if not spec.map_by.strip():
        raise UsageError("--map-by needs a value such as slot, node or ppr:1:socket")


def _mca_pairs(mca: tuple[tuple[str, str], ...], skip_fabric_probe: bool) -> list[tuple[str, str]]:
    """User `--mca` pairs, with `ofi` excluded from `btl` unless the user chose the btl list."""
    if not skip_fabric_probe:
        return list(mca)
    if all(key != "btl" for key, _ in mca):
        return [*mca, ("btl", "^" + _FABRIC_PROBE_BTL)]
    return [(key, _exclude_probe(value) if key == "btl" else value) for key, value in mca]


def _exclude_probe(value: str) -> str:
    """Add `ofi` to an exclusion list (`^a,b`); leave an inclusion list (`self,tcp`) alone."""
    if not value.startswith("^"):
        return value
    names = [n.strip() for n in value[1:].split(",") if n.strip()]
    if _FABRIC_PROBE_BTL in names:
        return value
    return "^" + ",".join([*names, _FABRIC_PROBE_BTL])


def locate_mpirun() -> str | None:
    """$HPCDIST_MPIRUN, else the mpirun beside this Python (the Open MPI wheel), else PATH's; None if none.

    The one function here that looks at the machine (environment and files); the builders stay pure.
    """
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    return os.environ.get("HPCDIST_MPIRUN") or (beside if os.access(beside, os.X_OK) else shutil.which("mpirun"))
