"""Slurm: SbatchSpec, one sbatch job, and the checks of its values (times, memory, GPUs, nodelists and signals).

Each check raises UsageError naming the field the way the caller's user set it (`Option`: `--time` for `hpcdist
sbatch`, `time=` for hpcdist.submit); `sbatch` renders a checked spec as its script.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .. import families
from ..errors import UsageError
from ..launching.names import check_env_name
from ..launching.output import OutputOptions
from ..placement.binding import check_bind
from ..program import check_program
from ..records import record
from ..schedulers.slurm import expand_nodelist
from ..values import MAX_COUNT, parse_whole
from . import LAUNCHES
from .arrays import check_array, check_task_file
from .batch import check_container_launch, check_job_launcher
from .torchrun import check_master

__all__ = [
    "GPU_TASK_CPUS",
    "Option",
    "SbatchSpec",
    "check_mem",
    "check_sbatch",
    "cli_option",
    "gpu_count",
    "parse_signal",
    "parse_time",
]

_TIME_FORMS = (
    "use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, or UNLIMITED (also INFINITE, -1 or 0), "
    "e.g. 30, 4:00:00 or 1-12"
)
Option = Callable[[str], str]  # how the caller's user names a SbatchSpec field in an error: `--gpus-per-node`
_TIME = re.compile(
    r"(?:(?P<d>[0-9]+)-(?:(?P<dh>[0-9]+)(?::(?P<dm>[0-9]+)(?::(?P<ds>[0-9]+))?)?)?"
    r"|(?P<a>[0-9]+)(?::(?P<b>[0-9]+)(?::(?P<c>[0-9]+))?)?)\Z"
)
_UNLIMITED = ("-1", "infinite", "unlimited")  # and a limit of zero: Slurm imposes no time limit then
_MAX_TIME = 2**31 - 1  # Slurm adds the fields up in seconds in a C int
_MEM = re.compile(r"[0-9]+[KMGTkmgt]?\Z")
_GPUS = re.compile(r"(?:[A-Za-z0-9_.-]+:)?([0-9]+)\Z")
_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "CONT")
_MAX_SIGNAL_SECONDS = 65535  # Slurm stores the warning time in 16 bits
# CPUs per rank of a GPU job that names none: enough for a few data-loading workers, and no more than a GPU node
# has per GPU anywhere (so the job stays schedulable); OMP_NUM_THREADS follows unless set
GPU_TASK_CPUS = 4
_UNTAGGED = OutputOptions(tag=False)  # scripts print as the launcher does unless asked (--tag, --log-dir, --ranks)


@record(frozen=True)
class SbatchSpec:
    """One sbatch job: the allocation (sbatch's options), environment, setup lines and how to launch the program."""

    program: tuple[str, ...]
    nodes: int = 1
    ntasks_per_node: int | None = None  # default: the GPU count per node, else 1
    gpus_per_node: str | None = None  # "8" or "a100:8"
    cpus_per_task: int | None = None  # default: GPU_TASK_CPUS with GPUs, else Slurm's
    mem: str | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    nodelist: str | None = None
    exclude: str | None = None  # Slurm's --exclude: nodes the job must not get
    exclusive: bool = False
    job_name: str | None = None
    output: str | None = None
    error: str | None = None
    array: str | None = None  # Slurm's --array: task ids such as 0-15, 1,3,5 or 0-31%4
    env: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    launch: str = "srun"
    python: str = "python3"
    mpirun: str = "mpirun"
    mpi: str = "openmpi"  # mpirun mode: the MPI whose dialect the mpirun line speaks (hpcdist.families.names())
    torchrun: str = "torchrun"
    master_addr: str | None = None  # torchrun mode; default: the allocation's first node
    master_port: int | None = None  # torchrun mode; default: a port the first node reserves (bind 0)
    opal_prefix: bool = False  # export OPAL_PREFIX=<python's prefix> (the Open MPI wheel under srun)
    requeue: bool = False
    requeue_signal: str = "USR1@90"
    probe_fabrics: bool = False  # mpirun mode: keep Open MPI's libfabric probe
    bind: str = "none"  # auto: the shim binds each rank (the contract's bind), srun's own binding off (--cpu-bind=none)
    rank_output: OutputOptions = _UNTAGGED  # per-rank output: tags, log files, the console's ranks
    max_restarts: int = 0  # run the launch again after a failure, up to this many times (a loop in the script)
    container_image: str | None = None  # srun and mpirun modes: each rank runs inside this image
    container_runtime: str | None = None  # None: pyxis under srun; under mpirun the first installed on the node
    container_mounts: tuple[str, ...] = ()  # SRC:DST[:ro][,...] host directories mounted in
    container_gpus: bool = False  # NVIDIA GPUs inside, the runtime's own way
    extra: tuple[tuple[str, str | None], ...] = ()  # sbatch's options hpcdist does not model: #SBATCH --name[=value]

    @property
    def tasks_per_node(self) -> int:
        """Ranks per node: --ntasks-per-node, else one per GPU, else 1."""
        if self.ntasks_per_node is not None:
            return self.ntasks_per_node
        return gpu_count(self.gpus_per_node) if self.gpus_per_node else 1

    @property
    def task_cpus(self) -> int | None:
        """CPUs per rank: --cpus-per-task, else GPU_TASK_CPUS in a GPU job, else None (Slurm's default, often 1)."""
        if self.cpus_per_task is not None:
            return self.cpus_per_task
        return GPU_TASK_CPUS if self.gpus_per_node else None


def cli_option(field: str) -> str:
    """A SbatchSpec field as `hpcdist sbatch` spells its option: `gpus_per_node` -> `--gpus-per-node`."""
    return "--" + field.replace("_", "-")


def parse_time(value: str, option: Option = cli_option) -> int | None:
    """Seconds in a Slurm time limit, None for no limit, else UsageError, by Slurm's own rules (time_str2secs).

    Forms: MM, MM:SS, HH:MM:SS, D-[HH[:MM[:SS]]], and UNLIMITED, INFINITE, -1 or 0 for no limit. As in Slurm, a
    field may exceed its unit (`1:60` is two minutes, `2-24` three days).
    """
    text = value.strip()
    if text.lower() in _UNLIMITED:
        return None
    match = _TIME.match(text)
    if match is None:
        raise UsageError(f"{option('time')} {value!r} is not a Slurm time; {_TIME_FORMS}")
    n = {k: parse_whole(v or "0") or 0 for k, v in match.groupdict().items()}
    if match["d"] is not None:
        total = ((n["d"] * 24 + n["dh"]) * 60 + n["dm"]) * 60 + n["ds"]
    elif match["c"] is not None:
        total = (n["a"] * 60 + n["b"]) * 60 + n["c"]
    else:
        total = n["a"] * 60 + n["b"]
    if total > _MAX_TIME:
        raise UsageError(
            f"{option('time')} {value!r} is more than {_MAX_TIME} seconds, the most Slurm counts; {_TIME_FORMS}"
        )
    return total or None  # Slurm: "A time limit of zero requests that no time limit be imposed"


def check_mem(value: str, option: Option = cli_option) -> str:
    """A Slurm --mem value (`16G`, `4000` MB, `0` = all of the node's memory), else UsageError."""
    if not _MEM.match(value) or len(value) > 19:  # 18 digits of megabytes is already a zettabyte
        raise UsageError(
            f"{option('mem')} {value!r} is not a Slurm memory size; use a number with K, M, G or T, e.g. 16G"
        )
    return value


def gpu_count(value: str, option: Option = cli_option) -> int:
    """The count in a --gpus-per-node value such as `8` or `a100:8`, which must be at least 1."""
    match = _GPUS.match(value)
    count = parse_whole(match[1]) if match else None
    if count is None or not 1 <= count <= MAX_COUNT:
        raise UsageError(
            f"{option('gpus_per_node')} {value!r}: expected COUNT or TYPE:COUNT with COUNT a whole number from 1 to "
            f"{MAX_COUNT}, e.g. 8 or a100:8"
        )
    return count


def parse_signal(value: str, option: Option = cli_option) -> tuple[str, int]:
    """`USR1@90` -> ('USR1', 90): the signal Slurm sends and how many seconds before the time limit."""
    name, at, seconds = value.upper().partition("@")
    name = name.removeprefix("SIG")
    lead = parse_whole(seconds) if seconds == seconds.strip() else None
    if name not in _SIGNALS or not at or lead is None or not 0 < lead <= _MAX_SIGNAL_SECONDS:
        raise UsageError(
            f"{option('requeue_signal')} {value!r}: expected SIGNAL@SECONDS with SIGNAL one of {', '.join(_SIGNALS)} "
            f"and 1 to {_MAX_SIGNAL_SECONDS} seconds, e.g. USR1@90"
        )
    return name, lead


def check_sbatch(spec: SbatchSpec, option: Option) -> int | None:
    """Raise UsageError for a spec sbatch would reject or misread; return the time limit in seconds."""
    if spec.launch not in LAUNCHES:
        raise UsageError(f"{option('launch')} {spec.launch!r}: use one of {', '.join(LAUNCHES)}")
    if not spec.program:
        raise UsageError("no program given; usage: hpcdist sbatch [options] -- PROGRAM [ARGS...]")
    check_program(spec.program, "torchrun" if spec.launch == "torchrun" else "hpcdist's wrapper around each rank")
    check_bind(spec.bind, "none", option("bind"))
    if spec.launch == "mpirun":
        check_job_launcher(spec.mpi, "Slurm", option("mpi"))
        check_container_launch(
            spec.container_runtime,
            f"{option('launch')} mpirun starts the ranks with {families.lookup(spec.mpi).title}'s mpirun",
            f"use {option('launch')} srun, or a runtime that wraps each rank (apptainer, singularity, podman, docker, "
            "enroot)",
        )
    if spec.launch == "torchrun" and spec.container_image is not None:
        raise UsageError(
            f"{option('container_image')} runs each rank in an image under hpcdist mpirun, and {option('launch')} "
            f"torchrun starts torchrun on each node without it; use {option('launch')} srun or mpirun, or drop "
            f"{option('container_image')}"
        )
    for name, count in (
        ("nodes", spec.nodes),
        ("ntasks_per_node", spec.ntasks_per_node),
        ("cpus_per_task", spec.cpus_per_task),
    ):
        if count is not None and count < 1:
            raise UsageError(f"{option(name)} must be at least 1, got {count}")
        if count is not None and count > MAX_COUNT:
            raise UsageError(f"{option(name)} must be at most {MAX_COUNT}, got {count}")
    if spec.gpus_per_node is not None:
        gpu_count(spec.gpus_per_node, option)
    if spec.nodes * spec.tasks_per_node > MAX_COUNT:
        raise UsageError(
            f"{option('nodes')} {spec.nodes} x {spec.tasks_per_node} tasks per node is more than the {MAX_COUNT} "
            "ranks MPI can count; ask for fewer"
        )
    if not 0 <= spec.max_restarts <= MAX_COUNT:
        raise UsageError(
            f"{option('max_restarts')} must be a whole number from 0 to {MAX_COUNT}, got {spec.max_restarts}"
        )
    if spec.mem is not None:
        check_mem(spec.mem, option)
    if spec.nodelist is not None:
        expand_nodelist(spec.nodelist, option("nodelist"))
    if spec.exclude is not None:
        expand_nodelist(spec.exclude, option("exclude"))
    for name, _ in spec.env:
        check_env_name(name)
    check_master(spec.master_addr, spec.master_port)
    if spec.array is not None:
        check_array(spec.array, option("array"))
        for name, value in (("output", spec.output), ("error", spec.error)):
            if value is not None:
                check_task_file(option(name), value, option("array"))
    seconds = parse_time(spec.time, option) if spec.time is not None else None
    if spec.requeue:
        _, before = parse_signal(spec.requeue_signal, option)
        if seconds is not None and before >= seconds:
            raise UsageError(
                f"{option('requeue_signal')} {spec.requeue_signal!r} comes {before} s before the end, but "
                f"{option('time')} {spec.time!r} is only {seconds} s; signal later or give more time"
            )
    return seconds
