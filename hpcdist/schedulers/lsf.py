"""IBM Spectrum LSF: a job's hosts and slots (LSB_DJOB_HOSTFILE, else LSB_MCPU_HOSTS), its id, what bsub prints, a
job's state in bjobs, and the variables jsrun gives each task.

jsrun (LSF's Job Step Manager) sets JSM_NAMESPACE_RANK, _SIZE, _LOCAL_RANK and _LOCAL_SIZE in every task; no
variable names a task's node. LSB_DJOB_HOSTFILE lists one host per slot; LSB_MCPU_HOSTS is `hostA 4 hostB 4`. On
LSF's CSM clusters (`bsub -nnodes`) both begin with the launch node, where the job script runs and no rank may.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from ..errors import UsageError
from ..hosts import HostSlots
from ..plugins import LazyPattern
from ..ranksource import Source
from . import register
from .base import Scheduler, failed_command, host_and_slots, host_lines, slot_lines

__all__ = ["BSUB_OPTIONS", "Lsf"]

# bsub's options (IBM Spectrum LSF 10.1, bsub(1)) that `hpcdist lsf` does not model, each with its fewest and most
# values: they go into the script as #BSUB lines. Not here: -I, -Ip, -Is and -K, which make bsub wait on a
# terminal; -h (the command's own -h is its help); and the options it models.
BSUB_OPTIONS: Mapping[str, tuple[int, int]] = MappingProxyType(
    {
        **dict.fromkeys(("-B", "-H", "-N", "-hl", "-rn", "-ul", "-x", "-XF", "-Zs"), (0, 0)),
        **dict.fromkeys(
            ("-alloc_flags", "-app", "-b", "-C", "-c", "-csm", "-cwd", "-D", "-data", "-E", "-Ep", "-env", "-eo"),
            (1, 1),
        ),
        **dict.fromkeys(
            ("-F", "-f", "-G", "-g", "-i", "-is", "-jsdl", "-k", "-L", "-Lp", "-M", "-m", "-oo", "-outdir", "-p", "-Q"),
            (1, 1),
        ),
        **dict.fromkeys(
            ("-ptl", "-rnc", "-S", "-s", "-sla", "-smt", "-sp", "-T", "-t", "-U", "-u", "-v", "-w"), (1, 1)
        ),
    }
)

# bsub prints `Job <779469> is submitted to default queue <batch>.` (or `… to queue <q>.`)
_SUBMITTED = LazyPattern(r"Job <(\d+)> is submitted to ")
# bjobs(1)'s job states (IBM Spectrum LSF 10.1, bjobs, "Job status"); UNKWN and ZOMBI may still turn into EXIT
_STATES = {
    **dict.fromkeys(("PEND", "PROV", "WAIT"), "PENDING"),
    "RUN": "RUNNING",
    **dict.fromkeys(("PSUSP", "USUSP", "SSUSP"), "SUSPENDED"),
    "DONE": "COMPLETED",
    "EXIT": "FAILED",
    **dict.fromkeys(("UNKWN", "ZOMBI"), "UNKNOWN"),
}


@register
class Lsf(Scheduler):
    """LSF: its jobs (bsub), their hosts, and jsrun, the task launcher of its CSM clusters."""

    name = "lsf"
    title = "LSF"
    more_slots = "the job's slots are bsub -n's: bsub -n 8 gives it 8"
    # bkill (bkill(1)): SIGINT, SIGTERM, then SIGKILL, JOB_TERMINATE_INTERVAL (10 s) apart; to a parallel job
    # SIGKILL alone unless LSB_USE_SEQUENTIAL_SIGNAL=Y. SIGINT first ends the launcher as Ctrl-C: nothing to hold
    signals_job = signal.SIGINT
    clients = ("bsub",)
    ping = "lsid"
    script_on_stdin = True  # bsub reads a script's #BSUB lines only from stdin (`bsub < job.lsf`)
    ranks = Source(
        "jsrun",
        "JSM_NAMESPACE_RANK",
        ("JSM_NAMESPACE_SIZE",),
        "JSM_NAMESPACE_LOCAL_RANK",
        ("JSM_NAMESPACE_LOCAL_SIZE",),
        None,
        (),
        "LSF's jsrun",
    )

    def inside(self, environ: Mapping[str, str]) -> bool:
        """Inside a job when LSF names its hosts (LSB_DJOB_HOSTFILE or LSB_MCPU_HOSTS) and its id (LSB_JOBID)."""
        return "LSB_JOBID" in environ and ("LSB_DJOB_HOSTFILE" in environ or "LSB_MCPU_HOSTS" in environ)

    def allocation(self, environ: Mapping[str, str]) -> str:
        """'the LSF job 779469'."""
        return f"the LSF job {environ.get('LSB_JOBID', '')}".rstrip()

    def hosts(
        self,
        environ: Mapping[str, str],
        slots: int | None = None,
        read: Callable[[str], str] | None = None,
        ask: Callable[[Sequence[str]], str] | None = None,
    ) -> tuple[HostSlots, ...]:
        """LSB_DJOB_HOSTFILE's hosts with a slot per line when it is set and readable, else LSB_MCPU_HOSTS's pairs."""
        path = environ.get("LSB_DJOB_HOSTFILE", "")
        if path and read is not None:
            return slot_lines(read(path), f"LSB_DJOB_HOSTFILE {path}", slots)
        pairs = environ.get("LSB_MCPU_HOSTS", "")
        words = pairs.split()
        if not words or len(words) % 2:
            raise UsageError(
                f"LSB_MCPU_HOSTS={pairs!r} is not 'HOST SLOTS HOST SLOTS …', so this LSF job's hosts are unknown; "
                "give --hostfile or -H"
            )
        lines = "\n".join(f"{host} {count}" for host, count in zip(words[::2], words[1::2], strict=True))
        return host_lines(lines, "LSB_MCPU_HOSTS", "'HOST SLOTS'", host_and_slots, slots)

    def spans_hosts(self, environ: Mapping[str, str]) -> bool:
        """A job whose LSB_MCPU_HOSTS names more than one host."""
        return len(set(environ.get("LSB_MCPU_HOSTS", "").split()[::2])) > 1

    def job_id(self, environ: Mapping[str, str]) -> str | None:
        """LSB_JOBID."""
        return environ.get("LSB_JOBID")

    def submitted(self, output: str) -> str:
        """The job id bsub printed."""
        found = _SUBMITTED.search(output)
        if found is None:
            raise UsageError(f"bsub printed {output.strip()!r} instead of a job id")
        return found[1]

    def submit_argv(self, script: str) -> tuple[str, ...]:
        """`bsub`, the script on stdin."""
        return ("bsub",)

    def state_argv(self, job_id: str) -> tuple[str, ...]:
        """`bjobs -noheader -o stat JOB_ID`: the job's state alone; finished jobs for CLEAN_PERIOD (an hour)."""
        return ("bjobs", "-noheader", "-o", "stat", job_id)

    def job_state(self, job_id: str, status: int, out: str, err: str) -> str | None:
        """The STAT bjobs printed; None when it says `Job <ID> is not found`."""
        if f"Job <{job_id}> is not found" in out + err:
            return None
        if status != 0:
            raise failed_command(self.state_argv(job_id), status, err, self.ping)
        word = out.strip()
        if word not in _STATES:
            raise UsageError(f"`{' '.join(self.state_argv(job_id))}` printed {word!r}, not a job state of bjobs(1)")
        return _STATES[word]

    def cancel_argv(self, job_id: str) -> tuple[str, ...]:
        """`bkill JOB_ID`."""
        return ("bkill", job_id)
