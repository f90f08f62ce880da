"""`hpcdist.submit`: a Python function as a batch job of Slurm, Grid Engine, PBS, LSF or Flux, and its handle.

The script is the one `hpcdist sbatch` (or `hpcdist gridengine`, `pbs`, `lsf`, `flux`) writes, its program
`python -m hpcdist.runtime.pycall` (the rank side of `hpcdist.launch`). The call, the script, each rank's outcome and
log, and the job's own output live in a directory the caller and the job's nodes share (`folder`, else the
SUBMIT_DIR setting, else ./hpcdist-jobs). The scheduler is `scheduler=`, else the one whose commands are on PATH
(`schedulers.on_path`: sbatch means Slurm); the handle is `handle.Job`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

from .. import schedulers
from ..calling.calls import pack, write_call
from ..errors import UsageError
from ..launching.output import OutputOptions
from ..launching.spawn import submit_script
from ..launching.world import World
from ..schedulers.base import Scheduler
from ..settings import submit_dir
from ..settingtable import SUBMIT_DIR
from . import scripts
from .arrays import array_indices
from .handle import Job, outcome_template
from .local import local_tools
from .sbatch import render_sbatch
from .sbatchspec import SbatchSpec

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


def _keyword(field: str) -> str:
    """A Spec field as hpcdist.submit takes it, for its errors: `hpcdist.submit's gpus_per_node=`."""
    return f"hpcdist.submit's {field}="


@overload
def submit(
    fn: Callable[..., Any],
    *args: Any,
    nodes: int | None = ...,
    ntasks_per_node: int | None = ...,
    time: str | None = ...,
    partition: str | None = ...,
    array: None = ...,
    backend: str = ...,
    folder: str | os.PathLike[str] | None = ...,
    scheduler: str | None = ...,
    **options: Any,
) -> Job: ...


@overload
def submit(
    fn: Callable[..., Any],
    *args: Any,
    nodes: int | None = ...,
    ntasks_per_node: int | None = ...,
    time: str | None = ...,
    partition: str | None = ...,
    array: str,
    backend: str = ...,
    folder: str | os.PathLike[str] | None = ...,
    scheduler: str | None = ...,
    **options: Any,
) -> list[Job]: ...


def submit(
    fn: Callable[..., Any],
    *args: Any,
    nodes: int | None = None,
    ntasks_per_node: int | None = None,
    time: str | None = None,
    partition: str | None = None,
    array: str | None = None,
    backend: str = "auto",
    folder: str | os.PathLike[str] | None = None,
    scheduler: str | None = None,
    **options: Any,
) -> Job | list[Job]:
    """Submit `fn(*args)` as a batch job on `nodes` x `ntasks_per_node` ranks; return its handle (a list for arrays).

    Each rank runs the function with `hpcdist.init(backend)` done; `hpcdist.RANK` as an argument becomes the rank,
    `hpcdist.ARRAY_TASK` the array task's id (Slurm). `scheduler`: slurm, gridengine, pbs, lsf or flux; None: the
    one whose commands are on PATH. `options` are its script's, by their Python names: `hpcdist sbatch`'s for Slurm
    (gpus_per_node="4", mem="16G", account=…, requeue=True, launch="mpirun", mpi="mpich", env={"NAME": "value"},
    setup=[lines], bind="auto", max_restarts=2, …), the QsubSpec, PbsSpec, BsubSpec or FluxSpec fields for the
    others (pe=("mpi", "8"), resources=["h_vmem=4G"], …). Keyword arguments of `fn`: bind them first
    (functools.partial).

    Raises:
        UsageError: the function or an argument cannot be sent, an option is wrong, no scheduler is known, or the
            scheduler refused the job; raised before anything runs.
    """
    world = World.current()
    kind = _scheduler(scheduler, world)
    common = {"nodes": nodes, "ntasks_per_node": ntasks_per_node, "time": time, "partition": partition}
    if kind.name == "slurm":
        stated = {key: value for key, value in common.items() if key != "nodes" or value is not None}
        settings = _settings(kind, stated | {"array": array} | options)
    else:
        if array is not None:
            raise UsageError(f"hpcdist.submit's array= is Slurm's only; submit one job per task under {kind.title}")
        settings = _settings(kind, options)
    call = pack(fn, args, {}, "hpcdist.submit")
    name = _NAME.sub("_", getattr(fn, "__name__", "job"))[:64] or "job"
    tasks = array_indices(array, _keyword("array"))[0] if array is not None else []
    launch = settings.pop("launch", "srun") if kind.name == "slurm" else None
    given = {
        key: settings.pop(key)
        for key in ("python", "mpirun", "torchrun", "opal_prefix", "mpi")
        if key in settings and launch is not None
    }
    # the MPI's dialect resolved before anything is made
    tools = local_tools(world, launch, **given, option=_keyword) if launch is not None else {}
    base = Path(folder or submit_dir(world.environ) or "hpcdist-jobs").absolute()
    try:
        base.mkdir(parents=True, exist_ok=True)
        directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
    except OSError as exc:
        raise UsageError(
            f"hpcdist.submit cannot make its job directory in {base}: {exc.strerror}; pass folder= (or set "
            f"{SUBMIT_DIR.name}) to a directory you can write that the job's nodes share"
        ) from None
    runner = (*_RUNNER, str(directory / "call.pkl"), str(directory / outcome_template(array is not None)))
    try:
        if launch is not None:
            spec = SbatchSpec(
                program=(tools["python"], *runner),
                launch=launch,
                **{"job_name": name, **settings},
                **tools,
                output=str(directory / ("slurm-%A_%a.out" if array is not None else "slurm-%j.out")),
                rank_output=OutputOptions(tag=False, log_dir=str(directory / "logs")),
            )
            script, text = directory / "job.sbatch", render_sbatch(spec, option=_keyword)
            ranks = spec.nodes * spec.tasks_per_node
        else:
            script = directory / "job.sh"
            text, ranks = scripts.render(kind.name, settings, common, runner, directory, world, _keyword)
        write_call(str(directory / "call.pkl"), call, backend)
        script.write_text(text, encoding="utf-8")
        job_id = submit_script(kind.name, str(script))
    except BaseException:
        for leftover in directory.iterdir():
            leftover.unlink()
        directory.rmdir()
        raise
    record = {"job_id": job_id, "ranks": ranks, "tasks": tasks, "scheduler": kind.name}
    (directory / "job.json").write_text(json.dumps(record) + "\n")
    if array is None:
        return Job(job_id, directory, ranks, scheduler=kind.name)
    return [Job(f"{job_id}_{task}", directory, ranks, task) for task in tasks]


def _scheduler(name: str | None, world: World) -> Scheduler:
    """The scheduler called `name`, else the one whose commands are on PATH.

    Raises:
        UsageError: no such scheduler, one hpcdist submits no job to, or none or several on PATH.
    """
    if name is None:
        return schedulers.on_path(lambda command: world.which(command) is not None)
    kind = schedulers.lookup(name) if name in schedulers.names() else None
    if kind is None or not kind.clients:
        takes = ", ".join(repr(s.name) for s in schedulers.every() if s.clients)
        raise UsageError(f"hpcdist.submit's scheduler={name!r}: hpcdist submits jobs to {takes}; pass one of them")
    return kind


def _hints(kind: Scheduler) -> dict[str, Any]:
    """The options hpcdist.submit takes for `kind`, with their types."""
    if kind.name == "slurm":
        return {k: v for k, v in typing.get_type_hints(SbatchSpec).items() if k not in _OWN}
    return scripts.hints(kind.name)


def _settings(kind: Scheduler, options: dict[str, Any]) -> dict[str, Any]:
    """The Spec's fields from submit's keyword options for `kind`, each checked against the field's type.

    Raises:
        UsageError: an unknown option (or another scheduler's), one hpcdist.submit sets itself, a value of the wrong
            type, or a launch mode that cannot run a function.
    """
    hints = _hints(kind)
    settings: dict[str, Any] = {}
    for key, value in options.items():
        own = _OWN.get(key) if kind.name == "slurm" else scripts.own(key)
        if own is not None:
            raise UsageError(f"hpcdist.submit sets {key}= itself: {own}")
        if key not in hints:
            raise UsageError(_unknown(kind, key, sorted(hints)))
        hint = hints[key]
        if key == "env" and isinstance(value, dict):
            value = tuple((str(name), str(setting)) for name, setting in value.items())
        elif typing.get_origin(hint) is tuple and isinstance(value, Sequence) and not isinstance(value, str):
            value = tuple(value)
        elif isinstance(value, int) and not isinstance(value, bool) and _fits("", hint):
            value = str(value)  # gpus_per_node=4, time=30, mem=4000
        if not _fits(value, hint):
            raise UsageError(f"hpcdist.submit's {key}={value!r} ({type(value).__name__}): it takes {_describe(hint)}")
        settings[key] = value
    if kind.name == "slurm" and settings.get("launch", "srun") not in _LAUNCHES:
        raise UsageError(
            f"hpcdist.submit runs a function on ranks that srun or mpirun start, not launch={settings['launch']!r}; "
            "pass launch='srun' (the default) or launch='mpirun'"
        )
    return settings


def _unknown(kind: Scheduler, key: str, known: list[str]) -> str:
    """The error for an option `kind` does not take: whose it is, where another scheduler takes it."""
    if kind.name == "slurm":
        return (
            f"hpcdist.submit has no option {key}=; sbatch options are {', '.join(known)} (keyword arguments of "
            "the function: bind them first with functools.partial)"
        )
    others = [s for s in schedulers.every() if s.clients and s is not kind and key in _hints(s)]
    takes = "takes" if len(others) == 1 else "take"
    whose = f" ({' and '.join(s.title for s in others)} {takes} it, not {kind.title})" if others else ""
    return (
        f"hpcdist.submit has no option {key}= for scheduler={kind.name!r}{whose}; {kind.title}'s options are "
        f"{', '.join(known)} (keyword arguments of the function: bind them first with functools.partial)"
    )


def _fits(value: object, hint: Any) -> bool:
    """Whether `value` has the type of a Spec field (str, int, bool, their optionals, tuples of them)."""
    if typing.get_origin(hint) is tuple:
        items = typing.get_args(hint)
        if items[-1] is not Ellipsis:  # a pair: ('mpi', '8')
            return isinstance(value, tuple) and len(value) == len(items) and all(map(_fits, value, items))
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
        items = typing.get_args(hint)
        if items[-1] is not Ellipsis:
            return f"a pair ({', '.join(map(_describe, items))})"
        return f"a sequence of {_describe(items[0])}"
    options = typing.get_args(hint)
    if options:
        return " or ".join(_describe(option) for option in options)
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))
