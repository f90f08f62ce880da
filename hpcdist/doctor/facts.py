"""What `hpcdist doctor` looks at (Facts, filled by the probes) and says (Check lines); shared by both sides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..families import identify as mpi_identity  # the one parser of MPI version text, the launchers' too
from ..records import field, record

if TYPE_CHECKING:
    from ..hosts import HostSlots
    from ..placement.topology import Topology

__all__ = ["DEFAULT_TIMEOUT", "STATUSES", "Check", "Facts", "Probe", "mpi_identity", "tail"]

DEFAULT_TIMEOUT = 30.0  # seconds each probe may take
STATUSES = ("pass", "warn", "fail", "info")


@record(frozen=True)
class Check:
    """One result line: area, pass/warn/fail/info, what was found, and how to fix a problem."""

    area: str
    status: str
    detail: str
    fix: str = ""


@record(frozen=True)
class Probe:
    """A command a probe ran: argv, status (None = timed out), stdout, stderr."""

    argv: tuple[str, ...]
    code: int | None
    out: str = ""
    err: str = ""


@record(frozen=True)
class Facts:
    """Everything the checks look at; gather_facts() fills it, tests build it by hand."""

    mpirun: str | None = None
    mpirun_version: Probe | None = None
    mpi4py: Mapping[str, Any] | None = None
    mpi4py_error: str = ""
    world: Probe | None = None
    torch: Mapping[str, Any] | None = None
    torch_error: str = ""
    hpcdist_mpi_backend: bool = False
    environ: Mapping[str, str] = field(default_factory=dict)
    interfaces: Mapping[str, str] = field(default_factory=dict)  # name -> operstate (up/down/unknown)
    hostname_address: str | None = None
    hostfile: str | None = None
    hosts: tuple[HostSlots, ...] = ()
    hostfile_error: str = ""
    resolved: Mapping[str, str | None] = field(default_factory=dict)
    hosts_probe: Probe | None = None
    rendezvous: Probe | None = None
    rendezvous_np: int = 2
    topology: Topology | None = None  # this node, only the CPUs this process may use
    topology_error: str = ""
    local_world_size: int = 1  # for the --bind auto plan
    local_world_size_from: str = "default"
    bind_environ: Mapping[str, str] = field(default_factory=dict)  # CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, NCCL_*
    python: str = ""  # the interpreter the doctor and its probes ran with
    beside: Mapping[str, str] = field(default_factory=dict)  # MPI name ("MPICH") -> its launcher beside that python
    container: str | None = None  # --container-image: the image whose MPI is compared with the launcher's
    container_probe: Probe | None = None  # image.IDENTIFY run inside it


def tail(text: str, lines: int = 4) -> str:
    """The last `lines` non-blank lines of a command's output, joined by ' | ' (rule lines dropped)."""
    kept = [line.strip() for line in text.strip().splitlines() if line.strip() and not set(line.strip()) <= set("-")]
    return " | ".join(kept[-lines:])
