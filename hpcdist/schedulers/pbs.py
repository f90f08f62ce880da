"""PBS Pro and OpenPBS: a job's hosts and slots from PBS_NODEFILE, its id, what qsub prints, and a job's state in
`qstat -x -f -F json`.

PBS sets no per-rank variables: a job's ranks come from its MPI's launcher (Cray PALS's mpiexec on HPE Cray
machines: `hpcdist.families.pals`). Its node file lists each chunk's host once for each of its `mpiprocs`
(OpenPBS `pbs_resources(7B)`, PBS_NODEFILE), so a host's lines are its slots.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ..errors import UsageError
from ..hosts import HostSlots
from ..plugins import LazyPattern
from . import register
from .base import Scheduler, failed_command, read_host_file, slot_lines

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
_JOB_ID = LazyPattern(r"(\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.-]+)?)")  # qsub's last line
# job_state's letters (PBS Professional 2022.1 Reference Guide, "Job States"): F and X have ended, and Exit_status
# says how (-29: JOB_EXEC_KILL_WALLTIME, past its walltime)
_STATES = {
    **dict.fromkeys("QHWTM", "PENDING"),
    **dict.fromkeys("REB", "RUNNING"),
    **dict.fromkeys("SU", "SUSPENDED"),
}
_WALLTIME = -29


@register
class Pbs(Scheduler):
    """PBS Pro / OpenPBS: its jobs (qsub) and their node file."""

    name = "pbs"
    title = "PBS"
    printed_id = _JOB_ID
    more_slots = "a host's slots are its chunk's mpiprocs: qsub -l select=2:ncpus=64:mpiprocs=4 gives two hosts 4 each"
    signals_job = signal.SIGTERM  # qdel, a preemption (pbs_deljob(3B)): SIGTERM, then SIGKILL after kill_delay
    clients = ("qsub", "pbsnodes")  # Grid Engine has a qsub too, but no pbsnodes
    ping = "qstat -B"

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

    def submit_argv(self, script: str) -> tuple[str, ...]:
        """`qsub SCRIPT`."""
        return ("qsub", script)

    def state_argv(self, job_id: str) -> tuple[str, ...]:
        """`qstat -x -f -F json JOB_ID`: the job's attributes as JSON, finished jobs too where the server keeps them."""
        return ("qstat", "-x", "-f", "-F", "json", job_id)

    def job_state(self, job_id: str, status: int, out: str, err: str) -> str | None:
        """The job's job_state (and for a finished job its Exit_status) from `{"Jobs": {ID: {...}}}`; None when the
        server says `Unknown Job Id` (no history kept, or past job_history_duration)."""
        if status != 0:
            if "Unknown Job Id" in err:
                return None
            raise failed_command(self.state_argv(job_id), status, err, self.ping)
        import json  # here: a rank, which imports every scheduler, never reads a job's state

        try:
            jobs = json.loads(out).get("Jobs") or {}
            # the server names the job in full: 123 is 123.pbs01
            record = jobs.get(job_id) or next(iter(jobs.values()), None)
            letter = None if record is None else str(record["job_state"])
            code = None if record is None or "Exit_status" not in record else int(record["Exit_status"])
        except (ValueError, AttributeError, KeyError, TypeError):
            raise UsageError(
                f"`{' '.join(self.state_argv(job_id))}` printed what is not PBS's JSON ({out.strip()[:80]!r}); "
                "check that this is PBS Professional or OpenPBS 19.1 or later"
            ) from None
        if letter is None:
            return None
        if letter in ("F", "X"):
            return "COMPLETED" if code == 0 else "TIMEOUT" if code == _WALLTIME else "FAILED"
        return _STATES.get(letter, "UNKNOWN")

    def cancel_argv(self, job_id: str) -> tuple[str, ...]:
        """`qdel JOB_ID`."""
        return ("qdel", job_id)
