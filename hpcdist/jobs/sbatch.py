"""Slurm: SbatchSpec -> sbatch script text (pure), and checks of times, memory, nodelists and signals."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import jinja2

from ..errors import UsageError
from ..launching.hostfile import HostSlots
from ..launching.mpirun import SHIM, MpirunSpec, build_mpirun_argv
from ..launching.names import check_env_name
from .render import render_template
from .torchrun import TorchrunSpec, check_master, program_words, torchrun_options

__all__ = [
    "LAUNCHES",
    "SbatchSpec",
    "allocation_hosts",
    "check_mem",
    "expand_nodelist",
    "gpu_count",
    "parse_signal",
    "parse_time",
    "render_sbatch",
]

LAUNCHES = ("srun", "mpirun", "torchrun")
_TIME_FORMS = "use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, e.g. --time 30, --time 4:00:00, --time 1-12"
_TIME = re.compile(
    r"(?:(?P<d>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?|(?P<a>\d+)(?::(?P<b>\d+)(?::(?P<c>\d+))?)?)\Z"
)
_MEM = re.compile(r"[0-9]+[KMGTkmgt]?\Z")
_GPUS = re.compile(r"(?:[A-Za-z0-9_.-]+:)?([0-9]+)\Z")
_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "CONT")
_MAX_SIGNAL_SECONDS = 65535  # Slurm stores the warning time in 16 bits


@dataclass(frozen=True)
class SbatchSpec:
    """One sbatch job: the allocation (sbatch's options), environment, setup lines and how to launch the program."""

    program: tuple[str, ...]
    nodes: int = 1
    ntasks_per_node: int | None = None  # default: the GPU count per node, else 1
    gpus_per_node: str | None = None  # "8" or "a100:8"
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    nodelist: str | None = None
    exclusive: bool = False
    job_name: str | None = None
    output: str | None = None
    error: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    launch: str = "srun"
    python: str = "python3"
    mpirun: str = "mpirun"
    torchrun: str = "torchrun"
    master_addr: str | None = None  # torchrun mode; default: the allocation's first node
    master_port: int | None = None  # torchrun mode; default: 15000 + job id % 10000
    opal_prefix: bool = False  # export OPAL_PREFIX=<python's prefix> (the Open MPI wheel under srun)
    requeue: bool = False
    requeue_signal: str = "USR1@90"
    as_root: bool = False  # mpirun mode: add --allow-run-as-root
    probe_fabrics: bool = False  # mpirun mode: keep Open MPI's libfabric probe

    @property
    def tasks_per_node(self) -> int:
        """Ranks per node: --ntasks-per-node, else one per GPU, else 1."""
        if self.ntasks_per_node is not None:
            return self.ntasks_per_node
        return gpu_count(self.gpus_per_node) if self.gpus_per_node else 1


def parse_time(value: str) -> int:
    """Seconds in a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS), else UsageError."""
    match = _TIME.match(value.strip())
    if match is None:
        raise UsageError(f"--time {value!r} is not a Slurm time; {_TIME_FORMS}")
    g = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "d" in g:
        days, hours, minutes, seconds = g["d"], g["dh"], g.get("dm", 0), g.get("ds", 0)
        limits = [("hours", hours, 24), ("minutes", minutes, 60), ("seconds", seconds, 60)]
    elif "c" in g:
        days, hours, minutes, seconds = 0, g["a"], g["b"], g["c"]
        limits = [("minutes", minutes, 60), ("seconds", seconds, 60)]
    else:
        days, hours, minutes, seconds = 0, 0, g["a"], g.get("b", 0)
        limits = [("seconds", seconds, 60)]
    for name, number, limit in limits:
        if number >= limit:
            raise UsageError(f"--time {value!r}: {name} must be below {limit}, got {number}; {_TIME_FORMS}")
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total == 0:
        raise UsageError(f"--time {value!r} is zero; give a time limit of at least one minute")
    return total


def check_mem(value: str) -> str:
    """A Slurm --mem value (`16G`, `4000` MB, `0` = all of the node's memory), else UsageError."""
    if not _MEM.match(value):
        raise UsageError(f"--mem {value!r} is not a Slurm memory size; use a number with K, M, G or T, e.g. 16G")
    return value


def gpu_count(value: str) -> int:
    """The count in a --gpus-per-node value such as `8` or `a100:8`, which must be at least 1."""
    match = _GPUS.match(value)
    if match is None or int(match[1]) < 1:
        raise UsageError(
            f"--gpus-per-node {value!r}: expected COUNT or TYPE:COUNT with COUNT at least 1, e.g. 8 or a100:8"
        )
    return int(match[1])


def parse_signal(value: str) -> tuple[str, int]:
    """`USR1@90` -> ('USR1', 90): the signal Slurm sends and how many seconds before the time limit."""
    name, at, seconds = value.upper().partition("@")
    name = name.removeprefix("SIG")
    if name not in _SIGNALS or not at or not seconds.isdigit() or not 0 < int(seconds) <= _MAX_SIGNAL_SECONDS:
        raise UsageError(
            f"--requeue-signal {value!r}: expected SIGNAL@SECONDS with SIGNAL one of {', '.join(_SIGNALS)} "
            f"and 1 to {_MAX_SIGNAL_SECONDS} seconds, e.g. USR1@90"
        )
    return name, int(seconds)


def expand_nodelist(value: str, what: str = "--nodelist") -> list[str]:
    """Host names of a Slurm nodelist such as `node[01-04],gpu7` (python-hostlist), else UsageError."""
    import hostlist

    try:
        hosts = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as exc:
        raise UsageError(f"{what} {value!r} is not a valid Slurm nodelist ({exc}); e.g. 'node[01-04],gpu7'") from None
    bad = [h for h in hosts if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", h)]
    if not hosts or bad:
        raise UsageError(
            f"{what} {value!r}: {bad[0] if bad else 'no hosts'!r} is not a host name; e.g. 'node[01-04],gpu7'"
        )
    return hosts


def allocation_hosts(environ: Mapping[str, str], slots: int | None = None) -> tuple[HostSlots, ...]:
    """The current allocation's hosts: SLURM_JOB_NODELIST with SLURM_TASKS_PER_NODE (or `slots` each)."""
    import hostlist

    nodelist = environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise UsageError(
            "no hosts given and not inside a Slurm allocation (SLURM_JOB_NODELIST is unset); "
            "give --hosts a,b or --nodelist 'node[01-04]'"
        )
    hosts = expand_nodelist(nodelist, "SLURM_JOB_NODELIST")
    if slots is not None:
        return tuple(HostSlots(h, slots) for h in hosts)
    tasks = environ.get("SLURM_TASKS_PER_NODE")
    if not tasks:
        raise UsageError("SLURM_TASKS_PER_NODE is unset, so the slots per node are unknown; give --slots N")
    try:
        counts = hostlist.parse_slurm_tasks_per_node(tasks)
    except (hostlist.BadHostlist, ValueError):
        raise UsageError(f"SLURM_TASKS_PER_NODE={tasks!r} is not like '8(x2),4'; give --slots N instead") from None
    if len(counts) != len(hosts) or min(counts) < 1:
        raise UsageError(
            f"SLURM_TASKS_PER_NODE={tasks!r} does not match the {len(hosts)} nodes of "
            f"SLURM_JOB_NODELIST={nodelist!r}; give --slots N instead"
        )
    return tuple(HostSlots(h, n) for h, n in zip(hosts, counts, strict=True))


def _check(spec: SbatchSpec) -> int | None:
    """Raise UsageError for a spec sbatch would reject or misread; return the time limit in seconds."""
    if spec.launch not in LAUNCHES:
        raise UsageError(f"--launch {spec.launch!r}: use one of {', '.join(LAUNCHES)}")
    if not spec.program:
        raise UsageError("no program given; usage: hpcdist sbatch [options] -- PROGRAM [ARGS...]")
    for name, count in (
        ("nodes", spec.nodes),
        ("ntasks-per-node", spec.ntasks_per_node),
        ("cpus-per-task", spec.cpus_per_task),
    ):
        if count is not None and count < 1:
            raise UsageError(f"--{name} must be at least 1, got {count}")
    if spec.mem is not None:
        check_mem(spec.mem)
    if spec.nodelist is not None:
        expand_nodelist(spec.nodelist)
    for name, _ in spec.env:
        check_env_name(name)
    check_master(spec.master_addr, spec.master_port)
    seconds = parse_time(spec.time) if spec.time is not None else None
    if spec.requeue:
        _, before = parse_signal(spec.requeue_signal)
        if seconds is not None and before >= seconds:
            raise UsageError(
                f"--requeue-signal {spec.requeue_signal!r} comes {before} s before the end, but --time "
                f"{spec.time!r} is only {seconds} s; signal later or give more time"
            )
    return seconds


def _sbatch_options(spec: SbatchSpec) -> list[tuple[str, str | None]]:
    """The #SBATCH lines in a fixed order; torchrun mode asks for one task per node with all its CPUs."""
    torchrun = spec.launch == "torchrun"
    cpus = spec.cpus_per_task * spec.tasks_per_node if torchrun and spec.cpus_per_task else spec.cpus_per_task
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
        ("output", spec.output),
        ("error", spec.error),
    ]
    result: list[tuple[str, str | None]] = [(name, str(value)) for name, value in options if value is not None]
    if spec.exclusive:
        result.append(("exclusive", None))
    if spec.requeue:
        name, before = parse_signal(spec.requeue_signal)
        result += [("requeue", None), ("open-mode", "append"), ("signal", f"B:{name}@{before}")]
    return result


def render_sbatch(spec: SbatchSpec, jinja: jinja2.Environment | None = None) -> str:
    """The sbatch script for `spec`, rendered from sbatch.sh.j2 (pure: nothing is run or submitted)."""
    _check(spec)
    env = sorted(dict(spec.env).items())
    names = [name for name, _ in env] + (["OPAL_PREFIX"] if spec.opal_prefix else [])
    srun = ["srun", "--kill-on-bad-exit=1"]
    if spec.cpus_per_task:  # since Slurm 22.05, srun no longer inherits sbatch's --cpus-per-task
        cpus = spec.cpus_per_task * (spec.tasks_per_node if spec.launch == "torchrun" else 1)
        srun.append(f"--cpus-per-task={cpus}")
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
        "master_addr": "",
        "master_port": "",
    }
    if spec.requeue:
        # torchrun dies of SIGUSR1 but passes SIGTERM on to its workers; srun and mpirun pass SIGUSR1 on
        context["requeue"] = parse_signal(spec.requeue_signal)[0]
        context["forward"] = "TERM" if spec.launch == "torchrun" else "USR1"
    if spec.launch == "srun":
        context["launcher"] = [srun[0], "--mpi=pmix", *srun[1:]]
    elif spec.launch == "mpirun":
        argv = build_mpirun_argv(
            MpirunSpec(
                program=tuple(shim),
                np=spec.nodes * spec.tasks_per_node,
                env=tuple((n, None) for n in names),
                as_root=spec.as_root,
                skip_fabric_probe=not spec.probe_fabrics,
                mpirun=spec.mpirun,
                keepalive=spec.nodes > 1,  # a lost node ends the job in seconds, not after TCP's ~8 min
            )
        )
        context["launcher"] = argv[: len(argv) - len(shim)]
    else:
        trun = TorchrunSpec(
            spec.program,
            nproc_per_node=str(spec.tasks_per_node),
            nnodes=spec.nodes,
            node_rank=None,
            torchrun=spec.torchrun,
        )
        context.update(
            program=program_words(spec.program),
            torchrun=[spec.torchrun, *torchrun_options(trun)],
            master_addr=spec.master_addr or "",
            master_port=str(spec.master_port or ""),
        )
    return render_template("sbatch.sh.j2", context, jinja)
