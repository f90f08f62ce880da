"""HPE Cray PALS's `mpiexec`, the launcher of HPE Cray EX machines under PBS (ALCF's Polaris and Aurora): its command
line and the variables it gives each rank.

PALS sets PALS_RANKID, PALS_LOCAL_RANKID and PALS_NODEID in every rank and, with Cray's PMI (its default), PMI_RANK,
PMI_SIZE, PMI_LOCAL_RANK and PMI_LOCAL_SIZE beside them; no variable counts the nodes (ALCF's user guides; HPE's
Slurm `mpi/cray_shasta` plug-in and LLNL's flux-coral2 `cray_pals` set the same for Cray MPICH). Its mpiexec takes
`-n`, `--ppn` (ranks per node), `--depth` (CPUs per rank), `--hostfile` or `--hosts` (one name per host, no slot
counts), `--env NAME=VALUE` and `--cpu-bind` (`depth`: each rank to its --depth CPUs), and passes the whole
environment by default; it places a node's ranks together. It says how each rank that failed ended, one line each
(`x1001c0s0b0n0: rank 3 exited with code 1`, `…: rank 1 died from signal 9`, HPE's craycli, cray/pals.py), which
hpcdist's own summary says instead; its status is the worst of its ranks'.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from ..errors import UsageError
from ..hosts import HostSlots
from ..plugins import LazyPattern
from ..ranksource import Source
from . import register
from .base import Family, MpirunSpec, Observation, RankKilled, Scanner

__all__ = ["Pals"]

_ENDED = LazyPattern(
    r"(?P<host>[A-Za-z0-9][\w.-]*): rank (?P<rank>\d+) (?:exited with code \d+|died from signal (?P<signal>\d+))"
    r"(?: and dumped core)?"
)
_BIND = {"none": "none", "core": "core", "socket": "socket", "hwthread": "thread"}  # mpirun's --bind-to: PALS's
# Open MPI's --map-by as PALS can say it: ranks per node (--ppn) and CPUs per rank (`:pe=D`, --depth)
_MAP = LazyPattern(r"(?:slot|ppr:(?P<ppn>\d{1,9}):node)(?::pe=(?P<depth>\d{1,9}))?", re.IGNORECASE)


@register
class Pals(Family):
    """Cray PALS's mpiexec (chosen with --mpi pals: its launcher is called mpiexec, as Hydra's is)."""

    name = "pals"
    title = "Cray PALS"
    order = 15
    program: ClassVar[str | None] = "mpiexec"  # PALS's, first on PATH on the machines that have it
    ranks = Source(
        "pals",
        "PALS_RANKID",
        ("PMI_SIZE",),
        "PALS_LOCAL_RANKID",
        ("PALS_LOCAL_SIZE", "PMI_LOCAL_SIZE"),
        "PALS_NODEID",
        ("PALS_APID",),
        "Cray PALS's mpiexec",
        borrowed=("PMI_SIZE", "PMI_LOCAL_SIZE"),  # Cray's PMI's, which MPICH's Hydra and Flux set too
    )

    def command(self, spec: MpirunSpec) -> list[str]:
        """The mpiexec argv for `spec`.

        Raises:
            UsageError: what PALS's mpiexec has no word for (Open MPI's --mca, a launch agent, app contexts,
                fault tolerance, --map-by node, --oversubscribe, hosts of unequal slots).
        """
        given = next(
            (
                flag
                for flag, used in (
                    ("--mca", bool(spec.mca)),
                    ("--launch-agent", spec.launch_agent is not None),
                    ("--include/--exclude with slot lists", bool(spec.contexts)),
                    ("--on-failure shrink", spec.fault_tolerance),
                    ("--oversubscribe", spec.oversubscribe),
                    (f"--map-by {spec.map_by}", _MAP.fullmatch(spec.map_by) is None),
                )
                if used
            ),
            None,
        )
        if given is not None:
            raise UsageError(
                f"{given} has no Cray PALS mpiexec equivalent; drop it, or use another --mpi (--map-by takes slot or "
                "ppr:N:node, either with :pe=D: PALS's --ppn N and --depth D)"
            )
        if spec.bind_to not in _BIND:
            raise UsageError(f"--bind-to {spec.bind_to!r} has no PALS --cpu-bind; use one of {', '.join(_BIND)}")
        depth = _MAP.fullmatch(spec.map_by)["depth"]  # type: ignore[index]  # matched above
        argv = [spec.mpirun, *([] if spec.np is None else ["-n", str(spec.np)]), *self.placement(spec)]
        argv += ["--depth", depth] if depth else []
        # a rank of D CPUs bound to its cores: PALS's `depth` binding (each rank to the D CPUs --depth gives it)
        argv += ["--cpu-bind", "depth" if depth and spec.bind_to == "core" else _BIND[spec.bind_to]]
        for name, value in spec.env:
            argv += [] if value is None else ["--env", f"{name}={value}"]
        return argv + list(spec.extra) + list(spec.program)

    def placement(self, spec: MpirunSpec) -> list[str]:
        """`--hostfile FILE`, else `--hosts a,b --ppn N` (every host the same N slots), else PALS's own
        (PBS_NODEFILE); `--ppn N` from `--map-by ppr:N:node` where the hosts do not say it.

        Raises:
            UsageError: hosts of unequal slots, or slots that --map-by ppr:N:node contradicts.
        """
        ppr = _MAP.fullmatch(spec.map_by)
        per_node = ppr["ppn"] if ppr is not None else None
        if spec.hostfile is not None or not spec.hosts:
            where = ["--hostfile", spec.hostfile] if spec.hostfile is not None else []
            return where + (["--ppn", per_node] if per_node else [])
        slots = {h.slots for h in spec.hosts}
        if len(slots) != 1:
            listed = ", ".join(f"{h.host}:{h.slots}" for h in spec.hosts)
            raise UsageError(
                f"Cray PALS's mpiexec puts the same number of ranks on every host (--ppn), but the hosts have "
                f"different slots ({listed}); give each host the same slots"
            )
        each = slots.pop()
        if per_node and int(per_node) != each:
            raise UsageError(
                f"--map-by {spec.map_by} asks for {per_node} ranks per node, but the hosts have {each} slots each; "
                "give the hosts that many slots, or drop ppr:N:node"
            )
        return ["--hosts", ",".join(h.host for h in spec.hosts), "--ppn", str(each)]

    def hostfile(self, hosts: Sequence[HostSlots]) -> str:
        """One host name per line, as PALS reads a hostfile (the slots go to --ppn)."""
        return "".join(h.host + "\n" for h in hosts)

    def scanner(self) -> Scanner:
        """A reader of its lines on ranks that died from a signal."""
        return PalsScanner()

    def hides(self, text: str) -> bool:
        """Its line on how a failed rank ended: the summary says it."""
        return bool(_ENDED.fullmatch(text.strip()))


class PalsScanner(Scanner):
    """PALS's word of a rank killed by a signal: `x1001c0s0b0n0: rank 1 died from signal 9`."""

    def scan(self, stream: str, line: str) -> list[Observation]:
        """What one line says."""
        ended = _ENDED.fullmatch(line.strip())
        if ended is None or ended["signal"] is None:
            return []
        return [RankKilled(int(ended["rank"]), ended["host"], int(ended["signal"]))]
