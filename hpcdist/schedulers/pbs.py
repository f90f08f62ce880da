"""PBS Pro and OpenPBS: a job's hosts and slots from PBS_NODEFILE, its id, and what qsub prints.

PBS sets no per-rank variables: a job's ranks come from its MPI's launcher (Cray PALS's mpiexec on HPE Cray
machines: `hpcdist.families.pals`). Its node file lists each chunk's host once for each of its `mpiprocs`
(OpenPBS `pbs_resources(7B)`, PBS_NODEFILE), so a host's lines are its slots.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ..errors import UsageError
from ..hosts import HostSlots
from . import register
from .base import Scheduler, read_host_file, slot_lines

__all__ = ["QSUB_OPTIONS", "Pbs"]

# PBS's qsub options (OpenPBS qsub(1B)) that `hpcdist pbs` does not model, each with its fewest and most values: they
# go into the script as #PBS lines. Not here: -C, -S and -I, which would change how the script is read or run; -h
# (hold: the command's own -h is its help); and the options it models.
QSUB_OPTIONS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        **dict.fromkeys(("-f", "-X", "-z"), (0, 0)),
        **dict.fromkeys(("-a", "-c", "-k", "-m", "-M", "-p", "-P", "-R", "-u", "-v", "-W"), (1, 1)),
    }
)

# qsub prints the new job's id, `<sequence number>.<server name>` (`1234[].pbs01` for an array): OpenPBS qsub(1B)
_JOB_ID = re.compile(r"\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.-]+)?")


@register
class Pbs(Scheduler):
    """PBS Pro / OpenPBS: its jobs (qsub) and their node file."""

    name = "pbs"
    title = "PBS"
    more_slots = "a host's slots are its chunk's mpiprocs: qsub -l select=2:ncpus=64:mpiprocs=4 gives two hosts 4 each"
    signals_job = signal.SIGTERM  # qdel, a preemption (pbs_deljob(3B)): SIGTERM, then SIGKILL after kill_delay

    def inside(self, environ: Mapping[str, str]) -> bool:
        """Inside a job when PBS has written its node file (PBS_NODEFILE)."""
        return "PBS_NODEFILE" in environ

    def allocation(self, environ: Mapping[str, str]) -> str:
        """'the PBS job 1234.pbs01'."""
        return f"the PBS job {environ.get('PBS_JOBID', '')}".rstrip()

    def hosts(
        self,
        environ: Mapping[str, str],
        slots: int | None = None,
        read: Callable[[str], str] | None = None,
        ask: Callable[[Sequence[str]], str] | None = None,
    ) -> tuple[HostSlots, ...]:
        """PBS_NODEFILE's hosts, each with as many slots as it has lines (or `slots` each)."""
        where, text = read_host_file(environ, "PBS_NODEFILE", self.title, read)
        return slot_lines(text, where, slots)

    def job_id(self, environ: Mapping[str, str]) -> str | None:
        """PBS_JOBID."""
        return environ.get("PBS_JOBID")

    def submitted(self, output: str) -> str:
        """The job id qsub printed: its last line."""
        lines = output.strip().splitlines()
        job = lines[-1].strip() if lines else ""
        if not _JOB_ID.fullmatch(job):
            raise UsageError(f"qsub printed {output.strip()!r} instead of a job id")
        return job
