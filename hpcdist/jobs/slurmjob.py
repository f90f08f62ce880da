"""A submitted job as Slurm's controller sees it: scontrol asked (with a timeout), its answers parsed, its files."""

from __future__ import annotations

import re
import shlex
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

from ..contract import RankContract
from ..errors import UsageError
from ..lines import log_name
from ..proctree import capture
from ..records import field, record
from ..values import parse_whole
from ..waits import Backoff, poll_until
from .arrays import array_indices

__all__ = [
    "FINAL_STATES",
    "SCONTROL_SECONDS",
    "JobInfo",
    "UnknownJob",
    "batch_script",
    "cancel_job",
    "check_job_id",
    "parse_records",
    "rank_log",
    "show_job",
    "wait_job",
]

SCONTROL_SECONDS = 30.0  # how long one scontrol call may take before the cluster counts as unreachable
# a job in one of these states will not change any more (a requeued one goes back to PENDING first)
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
_JOB_ID = re.compile(r"[0-9]{1,10}(?:_[0-9]{1,10})?\Z")  # 123, or 123_4: task 4 of array job 123
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_/:]*)=")  # scontrol's keys: MinCPUsNode, Socks/Node, ReqB:S:C:T
# srun mode's per-rank files (jobs.sbatch): `--output=DIR/rank-%3t.log`, single-quoted when DIR has blanks
_SRUN_LOG = re.compile(r"--output=([^'\n]+?)/rank-%([0-9]+)t\.log")  # srun's own files: scripts of hpcdist 0.1.0
_STEP_LOG = re.compile(r" -m hpcdist mpirun .*? --log-dir (?P<dir>.+?) -- \\\n", re.S)  # the step's, lines too
_ARRAY_DIR = '/"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"'  # each array task's own directory
_UNKNOWN = (
    "Slurm knows no job {job}: it never existed, or it ended more than MinJobAge (300 s by default) ago and the "
    "controller forgot it (without slurmdbd nothing keeps a record); check the id with `squeue`"
)


class UnknownJob(UsageError):
    """Slurm's controller knows no such job (never submitted, or ended and forgotten)."""


@record(frozen=True)
class JobInfo:
    """One record of `scontrol show job`: a job, or one task of an array."""

    fields: dict[str, str] = field(repr=False)

    @property
    def job_id(self) -> str:
        """`123`, or `123_4` for task 4 of array 123 (`123_[0-9]` for tasks not started yet)."""
        task = self.fields.get("ArrayTaskId")
        if not task:
            return self.fields.get("JobId", "?")
        return f"{self.fields['ArrayJobId']}_{task if task.isdigit() else f'[{task}]'}"

    @property
    def unsplit(self) -> bool:
        """Whether this record stands for array tasks that have not started (each gets a record of its own then)."""
        return not self.fields.get("ArrayTaskId", "0").isdigit()

    @property
    def state(self) -> str:
        """JobState: PENDING, RUNNING, COMPLETED, FAILED, …"""
        return self.fields.get("JobState", "UNKNOWN")

    @property
    def ended(self) -> bool:
        """Whether the job is in a state it will not leave."""
        return self.state in FINAL_STATES

    def path(self, key: str) -> Path | None:
        """StdOut or StdErr (absolute, as scontrol gives them), None when unset."""
        value = self.fields.get(key, "")
        # tasks that have not started have no files yet (scontrol names them with task id 4294967294, NO_VAL)
        return Path(value) if value and value != "(null)" and not self.unsplit else None

    @property
    def tasks(self) -> int:
        """How many jobs this record stands for: 1, or the array tasks not started yet."""
        if not self.unsplit:
            return 1
        try:
            return len(array_indices(self.fields.get("ArrayTaskId", "").partition("%")[0])[0])
        except UsageError:  # a form hpcdist does not read (e.g. a site's larger MaxArraySize): count it once
            return 1

    def summary(self) -> dict[str, str]:
        """What `hpcdist status` shows, keyed by its column names."""
        f = self.fields
        return {
            "job_id": self.job_id,
            "name": f.get("JobName", ""),
            "state": self.state,
            "reason": f.get("Reason", ""),
            "exit_code": f.get("ExitCode", ""),
            "run_time": f.get("RunTime", ""),
            "time_limit": f.get("TimeLimit", ""),
            "nodes": f.get("NodeList", ""),
            "restarts": f.get("Restarts", ""),
            "stdout": str(self.path("StdOut") or ""),
            "stderr": str(self.path("StdErr") or ""),
            "work_dir": f.get("WorkDir", ""),
        }


def check_job_id(text: str) -> str:
    """A Slurm job id as hpcdist takes it (`123`, or `123_4` for one array task), else UsageError."""
    if not _JOB_ID.match(text):
        raise UsageError(f"job id {text!r} is not a Slurm job id; use the number sbatch printed, e.g. 1234 or 1234_5")
    return text


def parse_records(text: str) -> list[dict[str, str]]:
    """The records of `scontrol show job -o` (one per line) as Key -> Value dicts.

    A value runs up to the next ` Key=`, so values holding blanks (a Reason, a Command with spaces) stay whole.
    """
    records = []
    for line in text.splitlines():
        keys = list(_KEY.finditer(line))
        record = {}
        for key, after in zip(keys, [*keys[1:], None], strict=True):
            record[key[1]] = line[key.end() : after.start() if after else len(line)].strip()
        if record:
            records.append(record)
    return records


def _slurm(tool: str, argv: list[str], job: str) -> str:
    """scontrol's or scancel's stdout for `argv`, else UsageError saying whether the job or the cluster is the trouble.

    Raises:
        UnknownJob: Slurm knows no job `job`.
        UsageError: the tool is missing, or the controller did not answer or refused.
    """
    status, out, err = capture([tool, *argv], SCONTROL_SECONDS)
    if status is None:
        raise UsageError(
            f"`{tool} {shlex.join(argv)}` did not answer within {SCONTROL_SECONDS:g} s: the Slurm controller "
            "cannot be reached; check `scontrol ping`, then try again"
        )
    if status == 127:
        raise UsageError(f"{tool} not found on PATH; run this where Slurm's commands are (a login node)")
    if status != 0:
        if "invalid job id" in err.lower():
            raise UnknownJob(_UNKNOWN.format(job=job))
        lines = err.strip().splitlines()
        reason = lines[-1] if lines else f"exit status {status}"  # the last line says why (fatal: …)
        raise UsageError(
            f"`{tool} {shlex.join(argv)}` failed ({reason}): the Slurm controller cannot be reached; check "
            "`scontrol ping` and SLURM_CONF"
        )
    return out


def show_job(job_id: str) -> list[JobInfo]:
    """`scontrol show job -o JOB_ID`: the job, or every task of an array job (one JobInfo each).

    Raises:
        UsageError: a malformed id, a job Slurm does not know, or a controller that cannot be reached.
    """
    job = check_job_id(job_id)
    infos = [JobInfo(record) for record in parse_records(_slurm("scontrol", ["show", "job", "-o", job], job))]
    if not infos:
        raise UnknownJob(_UNKNOWN.format(job=job))
    return infos


def batch_script(job_id: str) -> str:
    """The batch script Slurm keeps for a job (`scontrol write batch_script JOB -`)."""
    return _slurm("scontrol", ["write", "batch_script", check_job_id(job_id), "-"], job_id)


def cancel_job(job_id: str) -> None:
    """`scancel JOB_ID`: end the job (or array task), or take it out of the queue; UsageError as show_job."""
    _slurm("scancel", [check_job_id(job_id)], job_id)


def rank_log(script: str, info: JobInfo, rank: int) -> Path | None:
    """Where rank `rank` of a job hpcdist generated wrote its own log file (--log-dir), from the batch script.

    None when the script sent no rank to a file of its own. Relative directories are the job's WorkDir's.

    Raises:
        UsageError: the rank is not one of the job's ranks, or the job ran torchrun with one --log-dir for every
            node (scripts from before jobs.torchrunlogs' per-node layout, which the caller reads first).
    """
    ranks = parse_whole(info.fields.get("NumTasks", "")) or 0  # srun and mpirun modes: one task per rank
    work = Path(info.fields.get("WorkDir", "."))
    srun = _SRUN_LOG.search(script)
    mpirun = re.search(rf"^export {RankContract.variable('log_dir')}=(.+)$", script, re.M) or _STEP_LOG.search(script)
    if srun is None and mpirun is None:
        if "--log-dir=" in script:
            raise UsageError(
                f"job {info.job_id} ran torchrun with one --log-dir for every node (a script from an older "
                f"hpcdist): torchrun names its files itself, under {work}/<log dir>/none_<random>/attempt_N/"
                "<local rank>/, one such directory per node; read them there"
            )
        return None
    if ranks and not 0 <= rank < ranks:
        raise UsageError(f"--rank {rank}: job {info.job_id} has ranks 0 to {ranks - 1}")
    task = f"{info.fields.get('ArrayJobId')}_{info.fields.get('ArrayTaskId')}"  # an array task's directory
    if srun is not None:
        folder = srun[1].replace("%A_%a", task).replace("%%", "%")
        name = f"rank-{rank:0{int(srun[2])}d}.log"
    else:
        given = mpirun[1].removesuffix(_ARRAY_DIR) if mpirun else ""
        words = shlex.split(given)
        folder = words[0] if words else "."
        if _ARRAY_DIR in script and "ArrayTaskId" in info.fields:
            folder = f"{folder}/{task}"
        name = log_name(rank, max(ranks, 1))
    return work / folder / name


def wait_job(job_id: str, timeout: float | None, progress: IO[str] | None = None) -> list[JobInfo]:
    """Poll scontrol until the job, or every task of an array, has ended (None: no time limit); the last records.

    With `progress` (a terminal: the caller decides), a tqdm line there shows the tasks ended and the states.

    Raises:
        WaitTimeout: `timeout` seconds passed first; the message names the job and the states it was in.
        UsageError: as show_job.
    """
    latest: list[JobInfo] = []
    bars: list[Any] = []  # the tqdm bar, made at the first answer (when the number of tasks is known)

    def ended() -> bool:
        latest[:] = show_job(job_id)
        if progress is not None:
            total = sum(info.tasks for info in latest)
            done = sum(info.tasks for info in latest if info.ended)
            if not bars:
                from tqdm import tqdm

                # a fresh pseudo-terminal says 0 x 0, and tqdm would draw nothing: size it (80 x 24 when unknown)
                columns, lines = shutil.get_terminal_size()
                bars.append(tqdm(desc=f"job {job_id}", file=progress, leave=False, bar_format=_BAR, ncols=columns,
                                 nrows=lines, total=total, postfix=_states(latest)))  # fmt: skip
            bars[0].total, bars[0].n = total, done
            bars[0].set_postfix_str(_states(latest))
        return all(info.ended for info in latest)

    try:
        poll_until(
            ended,
            None if timeout is None else time.monotonic() + timeout,
            lambda: (
                f"hpcdist waited {timeout or 0:g} s for job {job_id} to end; it is still {_states(latest)}; "
                f"wait longer (a larger timeout) or look at it with `hpcdist status {job_id}`"
            ),
            backoff=Backoff(0.5, 5.0),
        )
    finally:
        for bar in bars:
            bar.close()
    return latest


_BAR = "{desc}: {n}/{total} ended{postfix} [{elapsed}]"  # tqdm puts ", " before the postfix


def _states(infos: list[JobInfo]) -> str:
    """`RUNNING 2, COMPLETED 1`: how many tasks are in each state."""
    counts: Counter[str] = Counter()
    for info in infos:
        counts[info.state] += info.tasks
    return ", ".join(f"{state} {n}" for state, n in sorted(counts.items())) or "unknown"
