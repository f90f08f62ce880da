"""Slurm: SbatchSpec -> sbatch script text (pure): its #SBATCH lines, its step and the rendering of sbatch.sh.j2.

A script's srun or mpirun step is `hpcdist mpirun` (`step_options`: the job's options, the image its ranks run in
too, planned by the launch pipeline in `batch_world`, a batch node inside its allocation, then written as that
command by `batch.mpirun_step`; its --log-dir, which an array task extends when it runs, is the template's), and its
restart loop asks the one restart policy (launching.restarts). The spec and its checks are `sbatchspec`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from .._version import __version__
from ..containers.pyxis import Pyxis
from ..contract import RESTART_VARS, RankContract
from ..errors import UsageError
from ..launching.mpirun import SHIM
from ..launching.options import MpirunOptions
from ..launching.world import World
from ..values import parse_ranks
from .arrays import ARRAY_VARS
from .batch import container_kind, mpirun_step
from .render import render_template
from .sbatchspec import Option, SbatchSpec, check_sbatch, cli_option, parse_signal
from .torchrun import TorchrunSpec, program_words, torchrun_options
from .torchrunlogs import NODE_WRAPPER, PLAIN_WRAPPER

if TYPE_CHECKING:
    import jinja2

__all__ = ["batch_world", "render_sbatch", "step_options"]


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
    check_sbatch(spec, option)
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
