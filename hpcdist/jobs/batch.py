"""What every scheduler's batch script shares (pure): the job's program, ranks, environment, setup lines and restarts
(`BatchJob`), its `hpcdist mpirun` launch line (`mpirun_step`), the checks of a directive's value, and the rendering
through job.sh.j2 that each scheduler's template extends (`render_batch`).

A scheduler's module (gridengine, pbs, lsf, flux) owns only its words: its directives, the variables of its job that
the ranks need, and how it requeues a job; the rest is here, once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from .. import containers, families, records, schedulers
from ..contract import RESTART_VARS, RankContract
from ..errors import UsageError
from ..launching.mpirun import build_mpirun_argv
from ..launching.names import check_env_name
from ..launching.options import MpirunOptions
from ..launching.output import OutputOptions
from ..launching.plan import plan
from ..launching.world import World
from ..placement.binding import check_bind
from ..program import check_program
from ..records import record
from ..values import MAX_COUNT, parse_ranks
from .render import render_template

if TYPE_CHECKING:
    import jinja2

__all__ = [
    "BatchJob",
    "Words",
    "check_choice",
    "check_container_launch",
    "check_word",
    "container_kind",
    "mpirun_step",
    "render_batch",
]

_UNTAGGED = OutputOptions(tag=False)  # scripts print as the launcher does unless asked (--tag, --log-dir, --ranks)


@record(frozen=True)
class BatchJob:
    """A batch script's job beside its scheduler's directives: the program, its ranks, environment, setup, restarts."""

    program: tuple[str, ...]
    np: int | None = None  # None: every slot of the job, which hpcdist mpirun reads in the job
    env: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    python: str = "python3"
    mpirun: str = "mpirun"
    mpi: str = "openmpi"  # the MPI whose dialect the mpirun line speaks (hpcdist.families.names())
    probe_fabrics: bool = False  # keep Open MPI's libfabric probe
    bind: str = "none"
    rank_output: OutputOptions = _UNTAGGED
    max_restarts: int = 0  # run the launch again after a failure, up to this many times (a loop in the script)
    requeue: bool = False  # on the scheduler's notice, pass it to the ranks and have the job requeued
    container_image: str | None = None  # each rank runs inside this image (hpcdist mpirun --container-image)
    container_runtime: str | None = None  # None: the first installed on the node, chosen when the job runs
    container_mounts: tuple[str, ...] = ()  # SRC:DST[:ro][,...] host directories mounted in
    container_gpus: bool = False  # NVIDIA GPUs inside, the runtime's own way


@record(frozen=True)
class Words:
    """What one scheduler says in a script: its directives and what its job holds for the launch line."""

    scheduler: str  # its name in hpcdist.schedulers
    command: str  # `hpcdist gridengine`, for a message
    directives: tuple[str, ...]  # whole lines: `#$ -pe mpi 8`
    allocation: Mapping[str, str]  # variables that tell hpcdist mpirun it runs in this scheduler's job (planning)
    array_vars: tuple[str, ...] = ()  # an array task's variables, passed on to every rank
    array_dir: str = ""  # appended to --log-dir in an array task: '/"${JOB_ID}.${SGE_TASK_ID}"'
    slots: int | None = None  # the fewest slots the job gets, when known: -np may not exceed them
    family: str | None = None  # the scheduler's own launcher that starts the ranks (--mpi flux, jsrun), else the MPI's
    per_node: int | None = None  # the ranks on each node, for a launcher that places as many on every node


def check_word(option: str, value: str, plain: re.Pattern[str], allowed: str) -> str:
    """`value` for a directive line of `option` when `plain` matches it whole, else UsageError saying what is allowed.

    Directive lines are read by the scheduler's submit command, not by bash: a blank or quote would split the value
    into options of its own, so what is not plain is refused rather than guessed at.
    """
    if not plain.fullmatch(value):
        raise UsageError(
            f"{option} {value!r} cannot be written into a directive line, which the submit command reads with its own "
            f"rules, not bash's; use {allowed}"
        )
    return value


def check_choice(option: str, value: str, choices: tuple[str, ...]) -> str:
    """`value` when it is one of `choices` (a y|n or oe|eo|n of a submit command's), else UsageError."""
    if value not in choices:
        raise UsageError(f"{option} {value!r}: give one of {', '.join(choices)}, e.g. {option} {choices[0]}")
    return value


def _check(job: BatchJob, words: Words) -> None:
    """Raise UsageError for a job no script of `words`'s scheduler can run."""
    if not job.program:
        raise UsageError(f"no program given; usage: {words.command} [options] -- PROGRAM [ARGS...]")
    check_program(job.program, "hpcdist's wrapper around each rank")
    check_bind(job.bind, "none", "--bind")
    if not 0 <= job.max_restarts <= MAX_COUNT:
        raise UsageError(f"--max-restarts must be a whole number from 0 to {MAX_COUNT}, got {job.max_restarts}")
    for name, _ in job.env:
        check_env_name(name)
    title = schedulers.lookup(words.scheduler).title
    check_job_launcher(words.family or job.mpi, title, "--mpi")
    check_container_launch(
        job.container_runtime,
        f"this {title} script starts the ranks under {families.lookup(words.family or job.mpi).title}",
        "name a runtime that wraps each rank (apptainer, singularity, podman, docker, enroot), or write a Slurm "
        "script: hpcdist sbatch --launch srun",
    )
    if job.np is not None and words.slots is not None and job.np > words.slots:
        more = schedulers.lookup(words.scheduler).more_slots
        raise UsageError(
            f"-np {job.np} is more ranks than the {words.slots} slots the job is sure to get; give -np {words.slots} "
            f"or fewer, or more slots{f' ({more})' if more else ''}"
        )
    out = job.rank_output
    if out.ranks is not None and job.np is not None:
        parse_ranks(out.ranks, job.np)
    if out.log_dir is not None and not out.log_dir.strip():
        raise UsageError("--log-dir needs a directory, e.g. --log-dir logs")


def check_job_launcher(mpi: str, scheduler: str, option: str) -> None:
    """Refuse a launcher that starts ranks only in another scheduler's job (jsrun: LSF's; flux run: Flux's) in a
    script for `scheduler` (its title: 'Slurm').

    Raises:
        UsageError: `mpi`'s launcher reads the hosts of another scheduler's job.
    """
    family = families.lookup(mpi)
    home = family.job_hosts
    if home and home != scheduler:
        command = next(s.name for s in schedulers.every() if s.title == home)
        raise UsageError(
            f"{option} {mpi}: {family.title} starts ranks only inside {home} jobs, and this script is for "
            f"{scheduler}; write the script with `hpcdist {command}`, or give another {option}"
        )


def check_container_launch(runtime: str | None, launch: str, fix: str) -> None:
    """Refuse a runtime whose words go on its own launcher's line (pyxis: srun's) in a script whose `launch` (what
    starts the ranks, in words) is another; `fix` says what to do instead.

    Raises:
        UsageError: a runtime hpcdist does not know, or a launcher's own under another launcher.
    """
    found = containers.lookup(runtime) if runtime is not None else None
    if found is not None and found.launcher_only:
        raise UsageError(
            f"--container-runtime {runtime} gives {found.program}'s own container options, and {launch}; {fix}"
        )


def container_kind(image: str | None, runtime: str | None) -> str:
    """What a script's comment says of the ranks' image: "" (none), the runtime's name, or "any" (the node's)."""
    return "" if image is None else runtime or "any"


def mpirun_step(options: MpirunOptions, world: World) -> list[str]:
    """`hpcdist mpirun` with `options` up to `--`, planned in `world` (a node of the job) first, so that what it would
    refuse in the job is refused now; its --log-dir is left to the template (an array task extends it)."""
    build_mpirun_argv(plan(options, world).spec)
    words = records.replace(options, log_dir=None, program=()).argv()[:-1]
    return [world.python, "-m", "hpcdist", "mpirun", *words]


def _step(job: BatchJob, words: Words, env: Sequence[tuple[str, str]]) -> list[str]:
    """The script's launch line: hpcdist mpirun in the scheduler's job, passed the script's variables by name."""
    out = job.rank_output
    names = [*(name for name, _ in env), *words.array_vars, *(RESTART_VARS if job.max_restarts else ())]
    options = MpirunOptions(
        program=job.program,
        np=job.np,
        export=tuple(names),
        mpirun=None if words.family else job.mpirun,
        mpi=words.family or job.mpi,
        probe_fabrics=job.probe_fabrics,
        bind=job.bind,
        tag=True if out.tag else None,
        log_dir=out.log_dir,
        ranks=out.ranks,
        container_image=job.container_image,
        container_runtime=job.container_runtime,
        container_mounts=job.container_mounts,
        container_gpus=job.container_gpus,
    )
    if words.per_node:
        options = records.replace(options, map_by=f"ppr:{words.per_node}:node")
    environ = {**dict(env), **words.allocation}
    world = World(environ=MappingProxyType(environ), python=job.python, hostname="", here=False)
    return mpirun_step(options, world)


def render_batch(
    template: str,
    job: BatchJob,
    words: Words,
    context: Mapping[str, object],
    jinja: jinja2.Environment | None = None,
) -> str:
    """The script of `job` in `words`'s scheduler, from `template` (which extends job.sh.j2) and its own `context`."""
    _check(job, words)
    env = sorted({**dict(job.env), **RankContract(max_restarts=job.max_restarts).environ()}.items())
    shared: dict[str, object] = {
        "directives": list(words.directives),
        "setup": list(job.setup),
        "env": env,
        "opal_python": "",
        "requeue": job.requeue,
        "launcher": _step(job, words, env),
        "program": list(job.program),
        "log_dir": job.rank_output.log_dir or "",
        "array_dir": words.array_dir,
        "python": job.python,
        "restarts": job.max_restarts,
        "counters": list(RESTART_VARS),
        "torchrun_restarts": False,
        "container": container_kind(job.container_image, job.container_runtime),
    }
    return render_template(template, {**shared, **context}, jinja)
