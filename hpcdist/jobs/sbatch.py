"""Slurm: SbatchSpec -> sbatch script text (pure), and checks of times, memory, nodelists and signals.

A script's srun or mpirun step is `hpcdist mpirun` (`step_options`: the job's options, the image its ranks run in
too, planned by the launch pipeline in `batch_world`, a batch node inside its allocation, then written as that
command by `batch.mpirun_step`; its --log-dir, which an array task extends when it runs, is the template's), and its
restart loop asks the one restart policy (launching.restarts).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from .. import families
from .._version import __version__
from ..containers.pyxis import Pyxis
from ..contract import RESTART_VARS, RankContract
from ..errors import UsageError
from ..launching.mpirun import SHIM
from ..launching.names import check_env_name
from ..launching.options import MpirunOptions
from ..launching.output import OutputOptions
from ..launching.world import World
from ..placement.binding import check_bind
from ..program import check_program
from ..schedulers.slurm import expand_nodelist
from ..values import MAX_COUNT, parse_ranks, parse_whole
from . import LAUNCHES
from .arrays import ARRAY_VARS, check_array, check_task_file
from .batch import check_container_launch, check_job_launcher, container_kind, mpirun_step
from .render import render_template
from .torchrun import TorchrunSpec, check_master, program_words, torchrun_options
from .torchrunlogs import NODE_WRAPPER, PLAIN_WRAPPER

if TYPE_CHECKING:
    import jinja2

__all__ = [
    "GPU_TASK_CPUS",
    "Option",
    "SbatchSpec",
    "batch_world",
    "check_mem",
    "cli_option",
    "gpu_count",
    "parse_signal",
    "parse_time",
    "render_sbatch",
    "step_options",
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


@dataclass(frozen=True)
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


def _check(spec: SbatchSpec, option: Option) -> int | None:
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


def _sbatch_options(spec: SbatchSpec) -> list[tuple[str, str | None]]:
    """The #SBATCH lines in a fixed order; torchrun mode asks for one task per node with all its CPUs."""
    torchrun = spec.launch == "torchrun"
    cpus = spec.task_cpus * spec.tasks_per_node if torchrun and spec.task_cpus else spec.task_cpus
    options: list[tuple[str, object]] = [
        ("job-name", spec.job_name),
        ("nodes", spec.nodes),
        ("ntasks-per-node", 1 if torchrun else spec.tasks_per_node),
        ("gpus-per-node", spec.gpus_per_node),
        ("cpus-per-task", cpus),
        ("mem", spec.mem),
        ("time", spec.time),
        ("partition", spec.partition),
        ("account", spec.account),
        ("qos", spec.qos),
        ("constraint", spec.constraint),
        ("nodelist", spec.nodelist),
        ("exclude", spec.exclude),
        ("output", spec.output),
        ("error", spec.error),
        ("array", spec.array),
    ]
    result: list[tuple[str, str | None]] = [(name, str(value)) for name, value in options if value is not None]
    if spec.exclusive:
        result.append(("exclusive", None))
    if spec.requeue:
        name, before = parse_signal(spec.requeue_signal)
        result += [("requeue", None), ("open-mode", "append"), ("signal", f"B:{name}@{before}")]
    taken = {name for name, _ in result}
    for name, value in spec.extra:  # after hpcdist's own: sbatch takes the last of an option given twice
        if name in taken:
            raise UsageError(f"--{name} is one hpcdist sbatch writes itself here; give it once, as its own option")
        result.append((name, value))
    return result


def _output(spec: SbatchSpec) -> list[str]:
    """Per-rank output in the torchrun mode, by torchrun's own means (its options); the srun and mpirun modes' is
    hpcdist mpirun's (`step`).
    """
    out = spec.rank_output
    ranks = spec.nodes * spec.tasks_per_node
    if out.ranks is not None:
        parse_ranks(out.ranks, ranks)
    if out.log_dir is not None and not out.log_dir.strip():
        raise UsageError("--log-dir needs a directory, e.g. --log-dir logs")
    if spec.launch != "torchrun":
        return []
    if out.ranks is not None and spec.nodes > 1:
        raise UsageError(
            "--launch torchrun filters the console by local rank (--local-ranks-filter), the same on every node; "
            "--ranks works there with --nodes 1 only; use --launch srun or mpirun"
        )
    torchrun = ["--tee=3"] if out.tag or out.log_dir is not None else []  # --log-dir: see render_sbatch
    if out.ranks is not None:
        torchrun.append(f"--local-ranks-filter={','.join(map(str, sorted(parse_ranks(out.ranks, ranks))))}")
    return torchrun


def _contract(spec: SbatchSpec) -> dict[str, str]:
    """What the script hands each rank under torchrun (the other modes' is hpcdist mpirun's): the version, the
    restarts, the shim's binding, and torchrun's line tags."""
    contract = RankContract(
        version=__version__, max_restarts=spec.max_restarts, bind="auto" if spec.bind == "auto" else "none"
    )
    # torchrun tags the lines it tees with the template's ${rank} (the global rank), e.g. `[3]:text`
    prefix = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}]:"} if spec.rank_output.tag else {}
    return {**contract.environ(), **prefix}


def _step_env(spec: SbatchSpec) -> dict[str, str]:
    """What the script exports for its hpcdist mpirun step beside that step's own: the restarts its loop counts
    (the ranks' TORCHELASTIC_MAX_RESTARTS), and under srun the CPUs of each task, which srun reads from
    SRUN_CPUS_PER_TASK (since Slurm 22.05 it no longer inherits sbatch's --cpus-per-task)."""
    restarts = RankContract(max_restarts=spec.max_restarts).environ()
    cpus = spec.task_cpus if spec.launch == "srun" else None
    return {**restarts, **({"SRUN_CPUS_PER_TASK": str(cpus)} if cpus else {})}


def step_options(spec: SbatchSpec, env: Mapping[str, str]) -> MpirunOptions:
    """The options of a batch script's step under srun or mpirun: hpcdist mpirun with the job's ranks, its launcher
    (Slurm's srun; or the MPI's mpirun, passed the script's variables `env` by name), per-rank output and the image
    each rank runs in (under srun, pyxis's unless another runtime is named). The script's own loop restarts it."""
    srun = spec.launch == "srun"
    pyxis = srun and spec.container_image is not None and spec.container_runtime is None  # srun's own, by default
    array = ARRAY_VARS if spec.array is not None else ()
    names = [*sorted(env), *array, *(RESTART_VARS if spec.max_restarts else ())]
    out = spec.rank_output
    return MpirunOptions(
        program=spec.program,
        np=spec.nodes * spec.tasks_per_node,
        export=() if srun else tuple(names),  # srun passes every variable on
        mpirun=None if srun else spec.mpirun,
        mpi="srun" if srun else spec.mpi,
        probe_fabrics=spec.probe_fabrics,
        bind=spec.bind,
        tag=True if out.tag else None,
        log_dir=out.log_dir,
        ranks=out.ranks,
        container_image=spec.container_image,
        container_runtime=Pyxis.name if pyxis else spec.container_runtime,
        container_mounts=spec.container_mounts,
        container_gpus=spec.container_gpus,
    )


def batch_world(spec: SbatchSpec, env: Mapping[str, str]) -> World:
    """The World a batch script's step runs in: a node of the job's allocation, with the script's variables `env`
    set, its Python, and output to a file; whoever runs it (root or not) is known only when it runs."""
    allocation = {"SLURM_JOB_NODELIST": spec.nodelist or "", "SLURM_JOB_NUM_NODES": str(spec.nodes)}
    return World(environ=MappingProxyType({**env, **allocation}), python=spec.python, hostname="", here=False)


def render_sbatch(spec: SbatchSpec, jinja: jinja2.Environment | None = None, option: Option = cli_option) -> str:
    """The sbatch script for `spec`, rendered from sbatch.sh.j2 (pure: nothing is run or submitted).

    `option` names a field in an error the way the caller's user set it (`--time`; hpcdist.submit: `time=`).
    """
    _check(spec, option)
    bind = spec.bind == "auto"
    torchrun_output = _output(spec)
    # a GPU job's ranks would each start a thread per CPU of the node (torchrun: 1); auto binding sets its own
    threads = {"OMP_NUM_THREADS": str(spec.task_cpus)} if spec.gpus_per_node and not bind else {}
    own = {**threads, **dict(spec.env)}
    stepped = spec.launch != "torchrun"  # srun and mpirun: an hpcdist mpirun step
    env = sorted({**own, **(_step_env(spec) if stepped else _contract(spec))}.items())
    names = [name for name, _ in env] + (["OPAL_PREFIX"] if spec.opal_prefix else [])
    srun = ["srun", "--kill-on-bad-exit=1"]  # torchrun mode's: one task per node
    if bind:  # every task starts with all the step's CPUs on its node; the shim takes its own share of them
        srun.append("--cpu-bind=none")
    if spec.task_cpus:  # since Slurm 22.05, srun no longer inherits sbatch's --cpus-per-task
        srun.append(f"--cpus-per-task={spec.task_cpus * spec.tasks_per_node}")
    srun.append("--export=" + ",".join(["ALL", *names]))
    shim = [spec.python, *SHIM, *spec.program]
    context: dict[str, object] = {
        "sbatch": _sbatch_options(spec),
        "setup": list(spec.setup),
        "env": env,
        "launch": spec.launch,
        "opal_python": spec.python if spec.opal_prefix else "",
        "requeue": "",
        "forward": "",
        "program": shim,
        "launcher": srun,
        "torchrun": [],
        "wrapper": "",
        "wrapper_logs": False,
        "master_addr": "",
        "master_port": "",
        "python": spec.python,
        "log_dir": spec.rank_output.log_dir if spec.launch != "torchrun" else "",
        "array": spec.array is not None,
        "restarts": spec.max_restarts,
        "counters": list(RESTART_VARS),
        "torchrun_restarts": True,
        "gpus": spec.gpus_per_node is not None,
        "container": "",
    }
    if spec.requeue:
        # torchrun dies of SIGUSR1 but passes SIGTERM on to its workers (sent by scancel: srun would kill the step);
        # srun and mpirun pass SIGUSR1 on
        context["requeue"] = parse_signal(spec.requeue_signal)[0]
        context["forward"] = "TERM" if spec.launch == "torchrun" else "USR1"
    if stepped:
        stepping = step_options(spec, own)
        context.update(
            launcher=mpirun_step(stepping, batch_world(spec, own)),
            program=list(spec.program),
            container=container_kind(stepping.container_image, stepping.container_runtime),
        )
    else:
        trun = TorchrunSpec(
            spec.program,
            nproc_per_node=str(spec.tasks_per_node),
            nnodes=spec.nodes,
            node_rank=None,
            torchrun=spec.torchrun,
        )
        # with --log-dir, each node's wrapper gets `--log-dir=DIR` as its $1 and makes it DIR/node-$SLURM_NODEID
        log_dir = spec.rank_output.log_dir
        log_word = [f"--log-dir={log_dir}"] if log_dir is not None else []
        context.update(
            program=["--no_python", *shim] if bind else program_words(spec.program),
            torchrun=[spec.torchrun, *log_word, *torchrun_options(trun), *torchrun_output],
            wrapper=NODE_WRAPPER if log_dir is not None else PLAIN_WRAPPER,
            wrapper_logs=log_dir is not None,
            master_addr=spec.master_addr or "",
            master_port=str(spec.master_port or ""),
        )
    return render_template("sbatch.sh.j2", context, jinja)
