"""Slurm's `srun` as the launcher: its command line inside an allocation, the lines it adds, how it ends a job step.

Its ranks see Slurm's variables (SLURM_PROCID and kin: `hpcdist.schedulers.slurm`); their MPI meets through PMIx.
Measured with Slurm 22.05.8: srun passes SIGUSR1 and SIGUSR2 on to every task, prints its step's state on one
SIGINT (a second within a second ends the step), ends the step at once on SIGTERM ("forcing job termination":
SIGKILL to every task), and passes neither SIGURG nor any other signal hpcdist could relay as SIGTERM, so a SIGTERM
reaches the ranks from Slurm itself (scancel, preemption, the time limit), never through srun. Its PMIx server (in
slurmstepd) kills the whole step when a rank reports a lost peer, even under `srun --no-kill`: no survivors under srun.
"""

from __future__ import annotations

import signal
from typing import ClassVar

from ..contract import RankContract
from ..errors import UsageError
from ..plugins import LazyPattern
from . import register
from .base import Family, MpirunSpec, Observation, RankKilled, Scanner

__all__ = ["Srun"]

# srun's own lines, and slurmstepd's that srun prints, about a step's end (Slurm 22.05.8, measured); hpcdist's
# summary names the ranks and their endings instead:
#   srun: error: node2: tasks 2-3: Exited with exit code 1
#   srun: error: node1: task 0: Killed
#   srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
#   srun: forcing job termination
#   srun: got SIGCONT                            (scancel: SIGCONT, then SIGTERM)
#   srun: launch/slurm: _step_signal: Terminating StepId=12.0
#   srun: Force Terminated StepId=12.0
#   slurmstepd-node1: error: *** STEP 12.0 ON node1 CANCELLED AT 2026-11-29T18:26:51 ***
_TASKS = r"tasks? (?P<first>\d+)(?:-(?P<last>\d+))?(?:,\d+(?:-\d+)?)*"
_ENDED = LazyPattern(rf"srun: error: (?P<host>\S+): {_TASKS}: (?P<how>Exited with exit code \d+|[A-Z][\w ]*)$")
_STEP_END = LazyPattern(
    r"srun: (?:Job step aborted: Waiting up to \d+ seconds for job step to finish\.|forcing job termination"
    r"|launch/slurm: _step_signal: Terminating StepId=\S+|Force Terminated StepId=\S+|got SIGCONT"
    r"|Job step \S+ aborted before step completely launched\.)$"
    r"|slurmstepd(?:-\S+)?: error: \*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT .*\*\*\*.*"
)
_SIGNALS = {
    "Killed": signal.SIGKILL,
    "Terminated": signal.SIGTERM,
    "Aborted": signal.SIGABRT,
    "Segmentation fault": signal.SIGSEGV,
    "Bus error": signal.SIGBUS,
    "Interrupt": signal.SIGINT,
    "Hangup": signal.SIGHUP,
}


class SrunScanner(Scanner):
    """srun's word of a task killed by a signal (`srun: error: node1: task 0: Killed`) before the step was ending:
    those it kills while it ends the step (after a task failed, or on scancel) are the end's consequences."""

    def __init__(self) -> None:
        self._ending = False

    def scan(self, stream: str, line: str) -> list[Observation]:
        """What one line says."""
        text = line.strip()
        self._ending = self._ending or bool(_STEP_END.match(text))
        ended = _ENDED.match(text)
        if self._ending or ended is None or ended["how"] not in _SIGNALS:
            return []
        first, last = int(ended["first"]), int(ended["last"] or ended["first"])
        return [RankKilled(rank, ended["host"], _SIGNALS[ended["how"]]) for rank in range(first, last + 1)]


@register
class Srun(Family):
    """Slurm's srun, which starts one task per rank inside the allocation it runs in."""

    name = "srun"
    title = "Slurm's srun"
    order = 90
    launcher_names: ClassVar[tuple[str, ...]] = ("srun",)
    program: ClassVar[str | None] = "srun"
    ends_job: ClassVar[int] = signal.SIGTERM  # one SIGINT only prints the step's state

    def command(self, spec: MpirunSpec) -> list[str]:
        """`srun` for `spec`: every value it passes set by `env` before it, as srun's --export cannot hold a comma."""
        if not spec.slurm:
            raise UsageError(
                "srun starts ranks inside a Slurm allocation, on its nodes: run hpcdist mpirun under sbatch or "
                "salloc without --hostfile or -H, or use an MPI's mpirun (drop --mpi srun)"
            )
        given = "--mca" if spec.mca else "--launch-agent" if spec.launch_agent is not None else ""
        if given or spec.contexts:
            given = given or "--include/--exclude with slot lists"
            raise UsageError(f"{given} is for an MPI's mpirun, not srun; drop it, or use --mpi openmpi")
        values = [f"{name}={value}" for name, value in spec.env if value is not None]
        argv = [*(["env", *values] if values else []), spec.mpirun, "--mpi=pmix", "--kill-on-bad-exit=1"]
        argv += [] if spec.np is None else [f"--ntasks={spec.np}"]
        ranks_bind = dict(spec.env).get(RankContract.variable("bind")) == "auto"
        argv += [*self.binding(spec.bind_to, ranks_bind), *self.distribution(spec.map_by)]
        argv += ["--overcommit"] if spec.oversubscribe else []
        argv += ["--export=ALL", *spec.container, *spec.extra]  # pyxis's --container-* (hpcdist.containers)
        return argv + list(spec.program)

    def check_fault_tolerance(self, launcher: str, mpi: str | None) -> None:
        """Refuse: Open MPI's ULFM ranks under srun see MPI_ERR_PROC_FAILED, then report the lost rank to their PMIx
        server (PMIX_ERR_PROC_TERM_WO_SYNC), and Slurm's mpi/pmix plugin answers any such event by killing the step
        (Slurm 22.05.8 with Open MPI 5.0.11, a node's slurmd and ranks killed: tests/cluster/test_lost_node_slurm.py).
        """
        raise UsageError(
            "--on-failure shrink cannot keep survivors under srun: Slurm's PMIx plugin kills the whole job step as "
            "soon as a rank reports a lost peer (measured with Slurm 22.05.8, also under srun --no-kill), so a lost "
            "rank or node ends the job; drop --on-failure shrink and give --max-restarts N (a lost rank) or sbatch "
            "--requeue (a lost node), or run Open MPI's mpirun (--mpi openmpi) for survivors after a lost rank"
        )

    def binding(self, bind_to: str, ranks_bind: bool) -> list[str]:
        """srun's --cpu-bind for mpirun's --bind-to; none leaves srun's own (the site's default) unless each rank
        binds itself (--bind auto), which needs every CPU of the node's share: `--cpu-bind=none`. (Where Slurm has no
        binding plug-in, srun warns of any --cpu-bind.)

        Raises:
            UsageError: a binding srun has no word for.
        """
        words = {"none": "none", "core": "cores", "socket": "sockets", "hwthread": "threads"}
        if bind_to not in words:
            raise UsageError(f"--bind-to {bind_to!r} has no srun equivalent; use one of {', '.join(words)}")
        return [] if bind_to == "none" and not ranks_bind else [f"--cpu-bind={words[bind_to]}"]

    def distribution(self, map_by: str) -> list[str]:
        """srun's --distribution for mpirun's --map-by (slot: srun's own, a node's tasks together).

        Raises:
            UsageError: a mapping srun has no word for.
        """
        if map_by not in ("slot", "node"):
            raise UsageError(f"--map-by {map_by!r} has no srun equivalent; use slot or node")
        return ["--distribution=cyclic"] if map_by == "node" else []

    def scanner(self) -> Scanner:
        """A reader of srun's lines."""
        return SrunScanner()

    def hides(self, text: str) -> bool:
        """srun's and slurmstepd's lines about how the step ended: the summary says it."""
        line = text.strip()
        return bool(_ENDED.match(line) or _STEP_END.match(line))
