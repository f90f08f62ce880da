"""Slurm: SbatchSpec -> sbatch script text (pure), and checks of times, memory, nodelists and signals."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import jinja2

from ..control import RESTART_VARS
from ..errors import UsageError
from ..launching.hostfile import HostSlots
from ..launching.mpirun import SHIM, MpirunSpec, build_mpirun_argv
from ..launching.names import HOST_NAME, check_env_name
from ..launching.program import check_program
from ..values import MAX_COUNT, parse_whole, slurm_counts
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
_TIME_FORMS = (
    "use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, or UNLIMITED (also INFINITE, -1 or 0), "
    "e.g. --time 30, --time 4:00:00, --time 1-12"
)
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
    max_restarts: int = 0  # run the launch again after a failure, up to this many times (a loop in the script)

    @property
    def tasks_per_node(self) -> int:
        """Ranks per node: --ntasks-per-node, else one per GPU, else 1."""
        if self.ntasks_per_node is not None:
            return self.ntasks_per_node
        return gpu_count(self.gpus_per_node) if self.gpus_per_node else 1


def parse_time(value: str) -> int | None:
    """Seconds in a Slurm time limit, None for no limit, else UsageError, by Slurm's own rules (time_str2secs).

    Forms: MM, MM:SS, HH:MM:SS, D-[HH[:MM[:SS]]], and UNLIMITED, INFINITE, -1 or 0 for no limit. As in Slurm, a
    field may exceed its unit (`1:60` is two minutes, `2-24` three days).
    """
    text = value.strip()
    if text.lower() in _UNLIMITED:
        return None
    match = _TIME.match(text)
    if match is None:
        raise UsageError(f"--time {value!r} is not a Slurm time; {_TIME_FORMS}")
    n = {k: parse_whole(v or "0") or 0 for k, v in match.groupdict().items()}
    if match["d"] is not None:
        total = ((n["d"] * 24 + n["dh"]) * 60 + n["dm"]) * 60 + n["ds"]
    elif match["c"] is not None:
        total = (n["a"] * 60 + n["b"]) * 60 + n["c"]
    else:
        total = n["a"] * 60 + n["b"]
    if total > _MAX_TIME:
        raise UsageError(f"--time {value!r} is more than {_MAX_TIME} seconds, the most Slurm counts; {_TIME_FORMS}")
    return total or None  # Slurm: "A time limit of zero requests that no time limit be imposed"


def check_mem(value: str) -> str:
    """A Slurm --mem value (`16G`, `4000` MB, `0` = all of the node's memory), else UsageError."""
    if not _MEM.match(value) or len(value) > 19:  # 18 digits of megabytes is already a zettabyte
        raise UsageError(f"--mem {value!r} is not a Slurm memory size; use a number with K, M, G or T, e.g. 16G")
    return value


def gpu_count(value: str) -> int:
    """The count in a --gpus-per-node value such as `8` or `a100:8`, which must be at least 1."""
    match = _GPUS.match(value)
    count = parse_whole(match[1]) if match else None
    if count is None or not 1 <= count <= MAX_COUNT:
        raise UsageError(
            f"--gpus-per-node {value!r}: expected COUNT or TYPE:COUNT with COUNT a whole number from 1 to "
            f"{MAX_COUNT}, e.g. 8 or a100:8"
        )
    return count


def parse_signal(value: str) -> tuple[str, int]:
    """`USR1@90` -> ('USR1', 90): the signal Slurm sends and how many seconds before the time limit."""
    name, at, seconds = value.upper().partition("@")
    name = name.removeprefix("SIG")
    lead = parse_whole(seconds) if seconds == seconds.strip() else None
    if name not in _SIGNALS or not at or lead is None or not 0 < lead <= _MAX_SIGNAL_SECONDS:
        raise UsageError(
            f"--requeue-signal {value!r}: expected SIGNAL@SECONDS with SIGNAL one of {', '.join(_SIGNALS)} "
            f"and 1 to {_MAX_SIGNAL_SECONDS} seconds, e.g. USR1@90"
        )
    return name, lead


def expand_nodelist(value: str, what: str = "--nodelist") -> list[str]:
    """Host names of a Slurm nodelist such as `node[01-04],gpu7` (python-hostlist), else UsageError."""
    import hostlist

    try:
        hosts = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as exc:
        raise UsageError(f"{what} {value!r} is not a valid Slurm nodelist ({exc}); e.g. 'node[01-04],gpu7'") from None
    bad = [h for h in hosts if not HOST_NAME.match(h) or "@" in h]  # Slurm's node names carry no user@
    if not hosts or bad:
        raise UsageError(
            f"{what} {value!r}: {bad[0] if bad else 'no hosts'!r} is not a host name; e.g. 'node[01-04],gpu7'"
        )
    return hosts


def allocation_hosts(environ: Mapping[str, str], slots: int | None = None) -> tuple[HostSlots, ...]:
    """The current allocation's hosts: SLURM_JOB_NODELIST with SLURM_TASKS_PER_NODE (or `slots` each)."""
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
        runs = slurm_counts(tasks, "SLURM_TASKS_PER_NODE", len(hosts))
    except UsageError as exc:
        raise UsageError(f"{exc}; or give --slots N") from None
    counts = [count for count, repeat in runs for _ in range(repeat)]  # at most len(hosts) entries
    if len(counts) != len(hosts) or not all(1 <= n <= MAX_COUNT for n in counts):
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
    check_program(spec.program, "torchrun" if spec.launch == "torchrun" else "hpcdist's shim")
    for name, count in (
        ("nodes", spec.nodes),
        ("ntasks-per-node", spec.ntasks_per_node),
        ("cpus-per-task", spec.cpus_per_task),
    ):
        if count is not None and count < 1:
            raise UsageError(f"--{name} must be at least 1, got {count}")
        if count is not None and count > MAX_COUNT:
            raise UsageError(f"--{name} must be at most {MAX_COUNT}, got {count}")
    if spec.gpus_per_node is not None:
        gpu_count(spec.gpus_per_node)
    if spec.nodes * spec.tasks_per_node > MAX_COUNT:
        raise UsageError(
            f"--nodes {spec.nodes} x {spec.tasks_per_node} tasks per node is more than the {MAX_COUNT} ranks MPI "
            "can count; ask for fewer"
        )
    if not 0 <= spec.max_restarts <= MAX_COUNT:
        raise UsageError(f"--max-restarts must be a whole number from 0 to {MAX_COUNT}, got {spec.max_restarts}")
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
        "restarts": spec.max_restarts,
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
                env=tuple((n, None) for n in [*names, *(RESTART_VARS if spec.max_restarts else ())]),
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
