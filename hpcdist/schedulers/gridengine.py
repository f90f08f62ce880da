"""Grid Engine (Son of Grid Engine, Debian's gridengine): a parallel job's hosts and slots from PE_HOSTFILE, its id,
what qsub prints, and a job's state in qstat's table.

Grid Engine sets no per-rank variables: the ranks come from the MPI's launcher. A parallel job's host file has one
line per host and queue, `host slots queue binding` (sge_pe(5)), so a host on several lines has their slots summed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ..hosts import HostSlots
from ..plugins import LazyPattern
from ..values import parse_whole
from . import register
from .base import Scheduler, failed_command, host_and_slots, host_lines, read_host_file

__all__ = ["QSUB_OPTIONS", "GridEngine"]

# Grid Engine's qsub options (Son of Grid Engine 8.1.9, submit(1)) that `hpcdist gridengine` does not model, each with
# its fewest and most values: they go into the script as `#$` lines. Not here: -b, -C, -S and -clear, which would
# change how qsub reads the script itself; -hard and -soft, which apply to the -l and -q after them (written first);
# -h (hold: the command's own -h is its help); and the options it models.
QSUB_OPTIONS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        **dict.fromkeys(("-verify", "-terse"), (0, 0)),
        **dict.fromkeys(
            ("-@", "-a", "-ac", "-ar", "-c", "-ckpt", "-dc", "-display", "-dl", "-hold_jid", "-hold_jid_ad", "-i"),
            (1, 1),
        ),
        **dict.fromkeys(
            ("-js", "-jsv", "-m", "-M", "-masterq", "-now", "-p", "-pty", "-R", "-sc", "-shell", "-sync", "-tc"),
            (1, 1),
        ),
        **dict.fromkeys(("-v", "-w", "-wd"), (1, 1)),
        "-binding": (1, 2),  # [env|pe|set] STRATEGY
    }
)

# qsub prints `Your job 12 ("name") has been submitted`, or `Your job-array 12.1-10:1 ("name") has been submitted`;
# with -terse the id alone, `12` or `12.1-10:1` (Son of Grid Engine 8.1.9, source/clients/qsub/qsub.c)
_PRINTED = LazyPattern(r"(?:Your job(?:-array)? )?(\d+)(?:\.\d+-\d+:\d+)?(?: \(.*\) has been submitted)?")
# qstat(1)'s state letters: r(unning), t(ransferring), R(estarted); s, S, T: suspended; the rest (qw, hqw, Eqw, dr…)
# waits or is being deleted; a job that has ended is no longer listed
_RUNNING, _SUSPENDED = set("rtR"), set("sST")


@register
class GridEngine(Scheduler):
    """Grid Engine: its parallel jobs (qsub -pe) and their host file."""

    name = "gridengine"
    title = "Grid Engine"
    printed_id = _PRINTED
    more_slots = "the job's slots are its parallel environment's: qsub -pe NAME 8 gives it 8"
    # qdel kills with SIGKILL, which nothing holds; -notify sends SIGUSR2 the queue's notify time ahead (queue_conf(5))
    signals_job = None
    clients = ("qsub", "qconf")  # PBS has a qsub too, but no qconf
    ping = "qhost"

    def inside(self, environ: Mapping[str, str]) -> bool:
        """Inside a parallel job when Grid Engine has written its host file (PE_HOSTFILE)."""
        return "PE_HOSTFILE" in environ

    def allocation(self, environ: Mapping[str, str]) -> str:
        """'the Grid Engine job 12'."""
        return f"the Grid Engine job {environ.get('JOB_ID', '')}".rstrip()

    def hosts(
        self,
        environ: Mapping[str, str],
        slots: int | None = None,
        read: Callable[[str], str] | None = None,
        ask: Callable[[Sequence[str]], str] | None = None,
    ) -> tuple[HostSlots, ...]:
        """PE_HOSTFILE's hosts with their slots summed over their lines (or `slots` each)."""
        where, text = read_host_file(environ, "PE_HOSTFILE", self.title, read)
        return host_lines(text, where, "'HOST SLOTS QUEUE BINDING'", host_and_slots, slots)

    def spans_hosts(self, environ: Mapping[str, str]) -> bool:
        """A parallel job on more than one host (NHOSTS)."""
        return "PE_HOSTFILE" in environ and (parse_whole(environ.get("NHOSTS", "1")) or 1) > 1

    def job_id(self, environ: Mapping[str, str]) -> str | None:
        """JOB_ID, in a Grid Engine job (which also sets SGE_TASK_ID, 'undefined' outside an array)."""
        return environ.get("JOB_ID") if "SGE_TASK_ID" in environ else None

    def submit_argv(self, script: str) -> tuple[str, ...]:
        """`qsub SCRIPT`."""
        return ("qsub", script)

    def state_argv(self, job_id: str) -> tuple[str, ...]:
        """`qstat`: the table of the user's pending, running and suspended jobs."""
        return ("qstat",)

    def job_state(self, job_id: str, status: int, out: str, err: str) -> str | None:
        """The state column of the job's row in qstat's table (job-ID prior name user state …); None when it has no
        row (Grid Engine forgets a job as it ends)."""
        if status != 0:
            raise failed_command(self.state_argv(job_id), status, err, self.ping)
        for line in out.splitlines():
            words = line.split()
            if len(words) >= 5 and words[0] == job_id:
                letters = set(words[4])
                if letters & _SUSPENDED:
                    return "SUSPENDED"
                return "RUNNING" if letters & _RUNNING else "PENDING"
        return None

    def cancel_argv(self, job_id: str) -> tuple[str, ...]:
        """`qdel JOB_ID`."""
        return ("qdel", job_id)
