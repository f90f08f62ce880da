"""The handle of a job `hpcdist.submit` started, under any scheduler: its state, its values, its logs.

One mechanism for every scheduler: the ranks' outcomes and logs in the job's directory say what each rank did, and
the scheduler is asked only for the job's state and to cancel it (Slurm through `slurmjob`'s scontrol and scancel,
the others through their plug-in's words, `queued`). A job its scheduler has forgotten (Grid Engine forgets one as it
ends, Slurm after MinJobAge) is read from its files.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from .. import schedulers
from ..calling.calls import first_failure, read_outcomes
from ..errors import JobFailed, UsageError
from ..lines import log_name
from ..ranklist import ranks_text
from ..values import check_seconds
from . import queued
from .slurmjob import FINAL_STATES, JobInfo, UnknownJob, cancel_job, rank_log, show_job, wait_job

__all__ = ["Job", "outcome_template"]

_CANCELLED = "cancelled"  # the file job.cancel() leaves in the job's directory, for when the scheduler forgets it


class Job:
    """A job (or one task of a job array) that `hpcdist.submit` started: its state, its values, its logs."""

    def __init__(
        self, job_id: str, directory: Path, ranks: int, task: int | None = None, scheduler: str = "slurm"
    ) -> None:
        self.job_id, self.directory, self.ranks, self.task = job_id, directory, ranks, task
        self.scheduler = schedulers.lookup(scheduler)
        self._info: JobInfo | None = None  # Slurm's last record of the job

    @classmethod
    def attach(cls, directory: str | os.PathLike[str], task: int | None = None) -> Job:
        """The handle of the job `hpcdist.submit` made in `directory` (`task`: which task of an array), e.g. anew
        in another session.

        Raises:
            UsageError: the directory holds no such job.
        """
        path = Path(directory).absolute()
        try:
            record = json.loads((path / "job.json").read_text(encoding="utf-8"))
            job_id, ranks, tasks = str(record["job_id"]), int(record["ranks"]), list(record["tasks"])
            scheduler = str(record.get("scheduler", "slurm"))  # job.json of hpcdist 0.1: Slurm's
        except (OSError, ValueError, KeyError, TypeError):
            raise UsageError(
                f"no job of hpcdist.submit in {path} (no job.json, or not the one submit wrote); pass the directory "
                "a job handle names (job.directory)"
            ) from None
        if tasks and task not in tasks:
            raise UsageError(f"job {job_id} in {path} is an array: pass task= one of {', '.join(map(str, tasks))}")
        if not tasks and task is not None:
            raise UsageError(f"job {job_id} in {path} is not an array; drop task=")
        return cls(job_id if task is None else f"{job_id}_{task}", path, ranks, task, scheduler)

    def __repr__(self) -> str:
        return f"<hpcdist.Job {self.job_id} ({self.ranks} ranks) in {self.directory}>"

    def state(self) -> str:
        """The job's state now, in Slurm's words under every scheduler (PENDING, RUNNING, SUSPENDED, COMPLETED,
        FAILED, CANCELLED, TIMEOUT, …).

        A job its scheduler has forgotten reads COMPLETED or FAILED from its ranks' outcomes, CANCELLED after
        job.cancel().
        """
        try:
            if self.scheduler.name != "slurm":
                return queued.state(self.scheduler, self.job_id)
            self._info = show_job(self.job_id)[0]
        except UnknownJob:
            return self._settled()
        return self._info.state

    def done(self) -> bool:
        """Whether the job has ended (requeued jobs go back to PENDING: not done)."""
        return self.state() in FINAL_STATES

    def wait(self, timeout: float | None = None) -> str:
        """Wait until the job has ended and return its state; a progress line on a terminal (stderr), none on a pipe.

        Raises:
            WaitTimeout: `timeout` seconds passed first (None: no limit); the job goes on.
        """
        seconds = None if timeout is None else check_seconds(timeout, "the timeout", "e.g. job.wait(timeout=600)")
        try:
            if self.scheduler.name != "slurm":
                return queued.wait(self.scheduler, self.job_id, seconds)
            self._info = wait_job(self.job_id, seconds, sys.stderr if sys.stderr.isatty() else None)[0]
        except UnknownJob:
            return self._settled()
        return self._info.state

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the end; the error `result()` would raise (RankFailed, JobFailed), None when every rank returned."""
        state = self.wait(timeout)
        outcomes = self._outcomes()
        failure = first_failure(outcomes)
        if failure is not None:
            return failure
        missing = [rank for rank in range(self.ranks) if rank not in outcomes]
        if state == "COMPLETED" and not missing:
            return None
        reason = self._info.fields.get("Reason", "") if self._info is not None else ""
        why = f" ({reason})" if reason and reason != "None" else ""
        return JobFailed(
            self.job_id,
            state,
            f"job {self.job_id} ended {state}{why}; {ranks_text(missing)} of {self.ranks} returned no value; its "
            f"output says why: job.logs(None) (the batch script), job.logs(RANK) (a rank), in {self.directory}",
        )

    def result(self, timeout: float | None = None, *, all_ranks: bool = False) -> Any:
        """Wait for the end and return rank 0's value (`all_ranks=True`: every rank's, in rank order).

        Rank 0's by default, as submitit's `Job.result` is its first task's; `all_ranks=True` gives the list
        `hpcdist.launch` returns (a call waited on, like `mp.spawn`), so the two differ only on purpose.

        Raises:
            RankFailed: a rank raised (the first to fail); its exception is the cause.
            JobFailed: the job ended (cancelled, out of time, a node lost, …) before every rank returned.
            WaitTimeout: `timeout` seconds passed first; the job goes on.
        """
        error = self.exception(timeout)
        if error is not None:
            raise error
        outcomes = self._outcomes()
        values = [pickle.loads(outcomes[rank]["value"]) for rank in (range(self.ranks) if all_ranks else [0])]
        return values if all_ranks else values[0]

    def cancel(self) -> None:
        """End the job (scancel, qdel, bkill, flux cancel), or take it out of the queue; its ranks' outcomes then
        say what had finished."""
        if self.scheduler.name == "slurm":
            cancel_job(self.job_id)
        else:
            queued.cancel(self.scheduler, self.job_id)
        (self.directory / _CANCELLED).touch()

    def logs(self, rank: int | None = 0) -> str:
        """What rank `rank` has printed so far (stdout and stderr); `None`: the batch script's own output."""
        slurm = self.scheduler.name == "slurm"
        if rank is None:
            path: Path | None = self.directory / (f"slurm-{self.job_id}.out" if slurm else "job.out")
        elif not (isinstance(rank, int) and 0 <= rank < self.ranks):
            raise UsageError(f"job.logs({rank!r}): job {self.job_id} has ranks 0 to {self.ranks - 1}")
        elif not slurm:  # hpcdist mpirun --log-dir DIRECTORY/logs
            path = self.directory / "logs" / log_name(rank, self.ranks)
        else:
            script = (self.directory / "job.sbatch").read_text(encoding="utf-8")
            array, _, task = self.job_id.partition("_")
            fields = {"NumTasks": str(self.ranks), "WorkDir": str(self.directory)}
            if task:
                fields.update(ArrayJobId=array, ArrayTaskId=task)
            path = rank_log(script, JobInfo(fields), rank)
        try:
            return path.read_text(encoding="utf-8", errors="replace") if path else ""
        except FileNotFoundError:  # not started yet
            return ""

    def _outcomes(self) -> dict[int, dict[str, Any]]:
        """The outcomes this job's ranks wrote so far."""
        return read_outcomes(str(self.directory / outcome_template(self.task is not None)), self.ranks, str(self.task))

    def _settled(self) -> str:
        """COMPLETED, FAILED or CANCELLED from the job's files, for a job its scheduler no longer knows; else
        UnknownJob."""
        outcomes = self._outcomes()
        if first_failure(outcomes) is not None:
            return "FAILED"
        if len(outcomes) == self.ranks:
            return "COMPLETED"
        if (self.directory / _CANCELLED).exists():
            return "CANCELLED"
        raise UnknownJob(
            f"{self.scheduler.title} knows no job {self.job_id} any more and its ranks left no outcome in "
            f"{self.directory} (killed or cancelled before they ended); its output there says more"
        )


def outcome_template(array: bool) -> str:
    """The name of a rank's outcome file in the job's directory (array tasks share the directory)."""
    return "task-{task}-rank-{rank}.pkl" if array else "rank-{rank}.pkl"
