"""`hpcdist.submit`: a Python function as a Slurm batch job, and the handle that follows it to its ranks' values.

The script is the one `hpcdist sbatch` writes, its program `python -m hpcdist.runtime.pycall` (the rank side of
`hpcdist.launch`). The call, the script, each rank's outcome and log, and the job's own output live in a directory
the caller and the job's nodes share (`folder`, else the SUBMIT_DIR setting, else ./hpcdist-jobs). Slurm is asked
through sbatch, scontrol and scancel only (no slurmdbd); a job Slurm has forgotten is read from its files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import re
import sys
import tempfile
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

from ..calling.calls import first_failure, pack, read_outcomes, write_call
from ..errors import JobFailed, UsageError
from ..launching.output import OutputOptions
from ..launching.spawn import submit_sbatch
from ..launching.world import World
from ..ranklist import ranks_text
from ..settings import SUBMIT_DIR, submit_dir
from ..values import check_seconds
from .arrays import array_indices
from .local import local_tools
from .sbatch import SbatchSpec, render_sbatch
from .slurmjob import FINAL_STATES, JobInfo, UnknownJob, cancel_job, rank_log, show_job, wait_job

__all__ = ["Job", "submit"]

_RUNNER = ("-m", "hpcdist.runtime.pycall")
_LAUNCHES = ("srun", "mpirun")
# SbatchSpec fields hpcdist.submit sets itself, with what to do instead
_OWN = {
    "program": "the function is the program",
    "output": "the job's output goes to its directory: read it with job.logs(None)",
    "error": "the job's output goes to its directory: read it with job.logs(None)",
    "rank_output": "each rank's output goes to its directory: read it with job.logs(rank)",
}
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


class Job:
    """A job (or one task of a job array) that `hpcdist.submit` started: its state, its values, its logs."""

    def __init__(self, job_id: str, directory: Path, ranks: int, task: int | None = None) -> None:
        self.job_id, self.directory, self.ranks, self.task = job_id, directory, ranks, task
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
        except (OSError, ValueError, KeyError, TypeError):
            raise UsageError(
                f"no job of hpcdist.submit in {path} (no job.json, or not the one submit wrote); pass the directory "
                "a job handle names (job.directory)"
            ) from None
        if tasks and task not in tasks:
            raise UsageError(f"job {job_id} in {path} is an array: pass task= one of {', '.join(map(str, tasks))}")
        if not tasks and task is not None:
            raise UsageError(f"job {job_id} in {path} is not an array; drop task=")
        return cls(job_id if task is None else f"{job_id}_{task}", path, ranks, task)

    def __repr__(self) -> str:
        return f"<hpcdist.Job {self.job_id} ({self.ranks} ranks) in {self.directory}>"

    def state(self) -> str:
        """Slurm's JobState now (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, …).

        A job Slurm has forgotten (MinJobAge after its end) reads COMPLETED or FAILED from its ranks' outcomes.
        """
        try:
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
        """End the job (`scancel`), or take it out of the queue; its ranks' outcomes then say what had finished."""
        cancel_job(self.job_id)

    def logs(self, rank: int | None = 0) -> str:
        """What rank `rank` has printed so far (stdout and stderr); `None`: the batch script's own output."""
        if rank is None:
            path: Path | None = self.directory / f"slurm-{self.job_id}.out"
        else:
            if not (isinstance(rank, int) and 0 <= rank < self.ranks):
                raise UsageError(f"job.logs({rank!r}): job {self.job_id} has ranks 0 to {self.ranks - 1}")
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
        return read_outcomes(str(self.directory / _template(self.task is not None)), self.ranks, str(self.task))

    def _settled(self) -> str:
        """COMPLETED or FAILED from the ranks' outcomes, for a job Slurm no longer knows; else UnknownJob."""
        outcomes = self._outcomes()
        if first_failure(outcomes) is not None:
            return "FAILED"
        if len(outcomes) == self.ranks:
            return "COMPLETED"
        raise UnknownJob(
            f"Slurm knows no job {self.job_id} any more and its ranks left no outcome in {self.directory} (killed or "
            "cancelled before they ended); its output there says more"
        )


def _keyword(field: str) -> str:
    """A SbatchSpec field as hpcdist.submit takes it, for its errors: `hpcdist.submit's gpus_per_node=`."""
    return f"hpcdist.submit's {field}="


def _template(array: bool) -> str:
    """The name of a rank's outcome file in the job's directory (array tasks share the directory)."""
    return "task-{task}-rank-{rank}.pkl" if array else "rank-{rank}.pkl"


@overload
def submit(
    fn: Callable[..., Any],
    *args: Any,
    nodes: int = ...,
    ntasks_per_node: int | None = ...,
    time: str | None = ...,
    partition: str | None = ...,
    array: None = ...,
    backend: str = ...,
    folder: str | os.PathLike[str] | None = ...,
    **sbatch_options: Any,
) -> Job: ...


@overload
def submit(
    fn: Callable[..., Any],
    *args: Any,
    nodes: int = ...,
    ntasks_per_node: int | None = ...,
    time: str | None = ...,
    partition: str | None = ...,
    array: str,
    backend: str = ...,
    folder: str | os.PathLike[str] | None = ...,
    **sbatch_options: Any,
) -> list[Job]: ...


def submit(
    fn: Callable[..., Any],
    *args: Any,
    nodes: int = 1,
    ntasks_per_node: int | None = None,
    time: str | None = None,
    partition: str | None = None,
    array: str | None = None,
    backend: str = "auto",
    folder: str | os.PathLike[str] | None = None,
    **sbatch_options: Any,
) -> Job | list[Job]:
    """Submit `fn(*args)` as a Slurm job on `nodes` x `ntasks_per_node` ranks; return its handle (a list for arrays).

    Each rank runs the function with `hpcdist.init(backend)` done; `hpcdist.RANK` as an argument becomes the rank,
    `hpcdist.ARRAY_TASK` the array task's id. `sbatch_options` are `hpcdist sbatch`'s, by their Python names
    (gpus_per_node="4", mem="16G", account=…, requeue=True, launch="mpirun", mpi="mpich", env={"NAME": "value"},
    setup=[lines], bind="auto", max_restarts=2, …). Keyword arguments of `fn`: bind them first (functools.partial).

    Raises:
        UsageError: the function or an argument cannot be sent, an option is wrong, or sbatch refused the job;
            raised before anything runs.
    """
    settings = _settings(
        {"nodes": nodes, "ntasks_per_node": ntasks_per_node, "time": time, "partition": partition, "array": array}
        | sbatch_options
    )
    call = pack(fn, args, {}, "hpcdist.submit")
    name = _NAME.sub("_", getattr(fn, "__name__", "job"))[:64] or "job"
    tasks = array_indices(array, _keyword("array"))[0] if array is not None else []
    launch = settings.pop("launch", "srun")
    given = {
        key: settings.pop(key) for key in ("python", "mpirun", "torchrun", "opal_prefix", "mpi") if key in settings
    }
    world = World.current()
    tools = local_tools(world, launch, **given, option=_keyword)  # the MPI's dialect resolved before anything is made
    base = Path(folder or submit_dir(world.environ) or "hpcdist-jobs").absolute()
    try:
        base.mkdir(parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
    except OSError as exc:
        raise UsageError(
            f"hpcdist.submit cannot make its job directory in {base}: {exc.strerror}; pass folder= (or set "
            f"{SUBMIT_DIR.name}) to a directory you can write that the job's nodes share"
        ) from None
    template = str(directory / _template(array is not None))
    spec = SbatchSpec(
        program=(tools["python"], *_RUNNER, str(directory / "call.pkl"), template),
        launch=launch,
        **{"job_name": name, **settings},
        **tools,
        output=str(directory / ("slurm-%A_%a.out" if array is not None else "slurm-%j.out")),
        rank_output=OutputOptions(tag=False, log_dir=str(directory / "logs")),
    )
    try:
        text = render_sbatch(spec, option=_keyword)
        write_call(str(directory / "call.pkl"), call, backend)
        (directory / "job.sbatch").write_text(text, encoding="utf-8")
        job_id = submit_sbatch(str(directory / "job.sbatch"))
    except BaseException:
        for leftover in directory.iterdir():
            leftover.unlink()
        directory.rmdir()
        raise
    ranks = spec.nodes * spec.tasks_per_node
    (directory / "job.json").write_text(json.dumps({"job_id": job_id, "ranks": ranks, "tasks": tasks}) + "\n")
    if array is None:
        return Job(job_id, directory, ranks)
    return [Job(f"{job_id}_{task}", directory, ranks, task) for task in tasks]


def _settings(options: dict[str, Any]) -> dict[str, Any]:
    """SbatchSpec's fields from submit's keyword options, each checked against the field's type.

    Raises:
        UsageError: an unknown option, one hpcdist.submit sets itself, a value of the wrong type, or a launch mode
            that cannot run a function.
    """
    hints = typing.get_type_hints(SbatchSpec)
    known = sorted(f.name for f in dataclasses.fields(SbatchSpec) if f.name not in _OWN)
    settings: dict[str, Any] = {}
    for key, value in options.items():
        if key in _OWN:
            raise UsageError(f"hpcdist.submit sets {key}= itself: {_OWN[key]}")
        if key not in hints:
            raise UsageError(
                f"hpcdist.submit has no option {key}=; sbatch options are {', '.join(known)} (keyword arguments of "
                "the function: bind them first with functools.partial)"
            )
        if key == "env" and isinstance(value, dict):
            value = tuple((str(name), str(setting)) for name, setting in value.items())
        elif key == "setup" and isinstance(value, Sequence) and not isinstance(value, str):
            value = tuple(value)
        elif isinstance(value, int) and not isinstance(value, bool) and _fits("", hints[key]):
            value = str(value)  # gpus_per_node=4, time=30, mem=4000
        if not _fits(value, hints[key]):
            raise UsageError(
                f"hpcdist.submit's {key}={value!r} ({type(value).__name__}): it takes {_describe(hints[key])}"
            )
        settings[key] = value
    if settings.get("launch", "srun") not in _LAUNCHES:
        raise UsageError(
            f"hpcdist.submit runs a function on ranks that srun or mpirun start, not launch={settings['launch']!r}; "
            "pass launch='srun' (the default) or launch='mpirun'"
        )
    return settings


def _fits(value: object, hint: Any) -> bool:
    """Whether `value` has the type of a SbatchSpec field (str, int, bool, their optionals, tuples of them)."""
    if typing.get_origin(hint) is tuple:
        items = typing.get_args(hint)
        return isinstance(value, tuple) and all(_fits(item, items[0]) for item in value)
    if hint is bool or hint is int:
        return isinstance(value, hint) and (hint is bool or not isinstance(value, bool))
    options = typing.get_args(hint)
    if options:
        return any(_fits(value, option) for option in options)
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    """`str or None`, `int`, `tuple of (str, str)`: a field's type in words."""
    if typing.get_origin(hint) is tuple:
        return f"a sequence of {_describe(typing.get_args(hint)[0])}"
    options = typing.get_args(hint)
    if options:
        return " or ".join(_describe(option) for option in options)
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))
