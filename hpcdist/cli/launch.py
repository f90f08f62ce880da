"""`hpcdist env`, `hpcdist mpirun` and `hpcdist run`: the launch and what runs in each rank."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import families, records, settingtable
from . import habits
from .types import Seconds, Whole, add_container_options, add_output_options, container_settings, count

if TYPE_CHECKING:
    from ..contract import RankContract
    from ..launching.options import MpirunOptions
    from ..launching.world import World
    from ..workloads import WorkloadOptions

__all__ = ["COMMANDS", "add_parsers", "mpirun", "mpirun_options", "workload_options"]


def add_parsers(sub: Any) -> None:
    """Add `env`, `mpirun` and `run` to the CLI's subparsers."""
    from ..contract import RESTART_VARS, RankContract
    from ..values import BACKENDS, ON_FAILURE, STORES
    from ..workloads import WORKLOADS

    env = sub.add_parser("env", help="show the launcher and ranks hpcdist detects in this process")
    env.add_argument("--json", action="store_true", help="print JSON for tools")

    mpirun = sub.add_parser(
        "mpirun",
        help="run a program (e.g. an unmodified torchrun-style script) under mpirun (Open MPI, MPICH or Intel MPI)",
        description="Everything after `--` is the program each rank runs.",
    )
    mpirun.habits = habits.MPIRUN
    mpirun.add_argument("-np", "-n", "--np", dest="np", type=count, help="number of ranks (default: all slots)")
    mpirun.add_argument("--hostfile", "-hostfile", "--machinefile", "-machinefile", help="Open MPI or MPICH hostfile")
    mpirun.add_argument("-H", "--host", "-host", dest="hosts", help="hosts and slots, e.g. a:2,b:2")
    _selection_options(mpirun)
    mpirun.add_argument(
        "-x",
        dest="export",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="export a variable to every rank (repeatable)",
    )
    mpirun.add_argument(
        "--mca",
        "-mca",
        nargs=2,
        action="append",
        default=[],
        metavar=("KEY", "VALUE"),
        help="an MCA parameter, e.g. --mca pml ob1 (repeatable)",
    )
    mpirun.add_argument("--bind-to", "-bind-to", default="none", help="process binding (default: none)")
    mpirun.add_argument("--map-by", "-map-by", default="slot", help="rank placement (default: slot)")
    mpirun.add_argument(
        "--bind",
        default="none",
        metavar="auto|none",
        help="auto: hpcdist gives each local rank its own cores (its GPU's NUMA node on GPU nodes), "
        "OMP_NUM_THREADS and NCCL's nearest NIC; none: no binding (default)",
    )
    mpirun.add_argument("--oversubscribe", action="store_true", help="allow more ranks than slots")
    mpirun.add_argument(
        "--probe-fabrics",
        action="store_true",
        help="keep Open MPI's libfabric probe (costs ~1 s per start without an HPC fabric)",
    )
    mpirun.add_argument(
        "--bare", action="store_true", help="run the program bare, without mapping MPI variables to torchrun's"
    )
    mpirun.add_argument(
        "--max-restarts",
        type=Whole(0),
        default=0,
        metavar="N",
        help="start the whole job again after a failure, up to N times (default: 0); each attempt exports "
        f"{' and '.join(RESTART_VARS)}",
    )
    mpirun.add_argument(
        "--min-np",
        type=count,
        metavar="M",
        help="with --max-restarts: after a lost host, restart with fewer ranks (as many as the slots left hold, at "
        "least M) rather than stop; with --on-failure shrink: the survivors carry on while at least M are left, "
        "and below M the job ends (or restarts, with --max-restarts)",
    )
    mpirun.add_argument(
        "--on-failure",
        choices=ON_FAILURE,
        default="end",
        help="what a failed or lost rank (or host) does to the job: end it (default), or shrink: the survivors carry "
        "on without it, on Open MPI's fault tolerance (ULFM: mpirun --with-ft ulfm over TCP); each rank gets "
        f"{RankContract.variable('on_failure')} and {RankContract.variable('min_np')}, hpcdist.init's groups are "
        "rebuilt on the survivors, and the job's status is the survivors'",
    )
    mpirun.add_argument(
        "--spares",
        type=Whole(0),
        default=0,
        metavar="N",
        help="with --on-failure shrink: launch N more ranks that wait idle outside torch's world; after a loss, as "
        "many of them as ranks were lost join the survivors, with the model, the optimizer and the loop's place "
        "(hpcdist.Survivors), and training goes on at full size",
    )
    mpirun.add_argument(
        "--heartbeat-timeout",
        type=Seconds(off=True),
        metavar="SECONDS",
        help="end the job when a running rank's heartbeat (sent by the helper process beside it, every sixth of "
        "this, at most 5 s) is not heard for this long, or the rank is frozen that long, naming the rank and its host "
        f"(default: ${settingtable.HEARTBEAT_TIMEOUT.name} or 30; 0: off)",
    )
    mpirun.add_argument(
        "--trace",
        metavar="FILE.json",
        help="write every rank's communication calls (and hpcdist.region marks) on one clock into FILE, a Chrome "
        "trace that ui.perfetto.dev opens, and print which rank arrived last at collectives (see `hpcdist trace`)",
    )
    mpirun.add_argument(
        "--outcome",
        metavar="FILE.json",
        help="when the job ends, write how it ended to FILE as JSON, for tools: its status, the ranks that failed "
        "first, each failed rank's host and how it ended, lost hosts, the signal that ended it, each attempt",
    )
    mpirun.add_argument(
        "--mpirun", help=f"the mpirun to use (default: ${settingtable.MPIRUN.name}, the venv's, then PATH)"
    )
    mpirun.add_argument(
        "--mpi",
        metavar="|".join(families.names()),
        help="the MPI whose launcher --mpirun is, and so its command-line dialect, or a scheduler's own launcher "
        "inside its job: srun (Slurm), jsrun (LSF's CSM clusters), flux (flux run) (default: told by the launcher's "
        "name and the files installed beside it; Open MPI when they do not say)",
    )
    mpirun.add_argument(
        "--launch-agent",
        metavar="CMD",
        help="the command the launcher starts its daemons on other hosts with, in place of ssh (Open MPI: "
        "--prtemca plm_ssh_agent CMD; MPICH and Intel MPI: -launcher ssh -launcher-exec CMD, one program)",
    )
    add_container_options(mpirun)
    mpirun.add_argument("--dry-run", action="store_true", help="print the exact command and run nothing")
    mpirun.add_argument(
        "--script", metavar="FILE", help="write the launch as a reusable shell script (- prints it) and run nothing"
    )
    add_output_options(mpirun)
    mpirun.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")

    run = sub.add_parser("run", help="run built-in workloads under any launcher, each verifying its result")
    run.add_argument(
        "names",
        nargs="+",
        choices=sorted(WORKLOADS),
        metavar="NAME",
        help=f"workloads to run in order: {', '.join(WORKLOADS)}",
    )
    run.add_argument("--backend", default="auto", choices=BACKENDS, help="torch.distributed backend (default: auto)")
    run.add_argument(
        "--timeout", type=Seconds(), help=f"seconds any wait may take (default: ${settingtable.TIMEOUT.name} or 300)"
    )
    run.add_argument(
        "--store",
        choices=STORES,
        help="where torch's store lives: tcp (rank 0's port) or mpi (over MPI, no port) "
        f"(default: ${settingtable.STORE.name} or "
        "auto: mpi for the mpi backend under an MPI launch, else tcp)",
    )
    _workload_options(run)


def _workload_options(parser: Any) -> None:
    """Every workload's own options for `hpcdist run`, one group per workload (never imports torch).

    Counts are checked here as WorkloadOptions checks them (workload_options), which a Python caller builds too.
    """
    from ..values import ON_FAILURE
    from ..workloads import MAX_SEED

    ddp = parser.add_argument_group("ddp", "options of the ddp workload")
    ddp.add_argument("--epochs", type=count, default=3, help="epochs to train (default: 3)")
    ddp.add_argument("--batch-size", type=count, default=32, help="samples per rank per step (default: 32)")
    ddp.add_argument("--samples", type=count, default=2048, help="size of the synthetic data set (default: 2048)")
    ddp.add_argument(
        "--seed",
        type=Whole(0, MAX_SEED),
        default=0,
        help=f"seed of the data, the model and the shuffling, 0 to {MAX_SEED} (default: 0)",
    )
    ddp.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="write DIR/ddp.pt atomically after every epoch (default: no checkpoints)",
    )
    ddp.add_argument(
        "--resume",
        action="store_true",
        help="continue from DIR/ddp.pt if it exists (needs --checkpoint-dir and the same world size)",
    )
    ddp.add_argument(
        "--stop-after-epoch",
        type=count,
        metavar="N",
        help="stop after epoch N has been checkpointed, as if the job had been killed (for tests)",
    )
    ddp.add_argument(
        "--report",
        action="store_true",
        help="trace every rank's calls and, after training, print per rank the time in collectives and between "
        "them, how often it arrived last, and the straggler if one stands out (under an MPI launch)",
    )
    ddp.add_argument(
        "--step-log",
        metavar="FILE",
        help="rank 0 appends `epoch step world_size unix_time` to FILE after every step (what `hpcdist bench "
        "recovery` times a recovery by)",
    )
    ddp.add_argument(
        "--on-failure",
        choices=ON_FAILURE,
        help="end: a lost rank ends the job; shrink: the survivors carry on from the last step they all finished "
        "(under `hpcdist mpirun --on-failure shrink`) (default: the launch's, which `hpcdist mpirun --on-failure` "
        "hands each rank, else end)",
    )


def workload_options(args: argparse.Namespace, contract: RankContract | None = None) -> WorkloadOptions:
    """`hpcdist run`'s workload options as the WorkloadOptions a Python caller builds too (checked as made); what
    a failed rank does is the rank's `contract`'s (its launch's --on-failure) unless --on-failure says.

    Raises:
        UsageError: a value the workloads refuse (see WorkloadOptions).
    """
    from ..workloads import WorkloadOptions

    return WorkloadOptions(
        epochs=args.epochs,
        batch_size=args.batch_size,
        samples=args.samples,
        seed=args.seed,
        checkpoint_dir=args.checkpoint_dir,
        resume=args.resume,
        stop_after_epoch=args.stop_after_epoch,
        report=args.report,
        step_log=args.step_log,
        on_failure=args.on_failure or (contract.on_failure if contract is not None else "end"),
    )


def _selection_options(p: Any) -> None:
    """--include and --exclude, DeepSpeed's host and slot selection (they exclude each other)."""
    p.add_argument(
        "--include",
        metavar="HOST[:SLOTS]@...",
        help="only these hosts or slots, e.g. n1@n2:0,2 (slot i of a host gets device i as CUDA_VISIBLE_DEVICES)",
    )
    p.add_argument("--exclude", metavar="HOST[:SLOTS]@...", help="all hosts and slots but these, e.g. n2 or n1:1,3")


def _env(args: argparse.Namespace) -> int:
    """`hpcdist env`: the detected launch, as a table or JSON."""
    from ..runtime.env import LaunchEnv

    env = LaunchEnv.from_environ(os.environ)
    if args.json:
        print(json.dumps(records.asdict(env), sort_keys=True))
    else:
        rows = env.describe()
        width = max(len(key) for key, _ in rows)
        print("\n".join(f"{key:<{width}}  {value}" for key, value in rows))
    return 0


def mpirun_options(args: argparse.Namespace) -> MpirunOptions:
    """`hpcdist mpirun`'s parsed arguments as the MpirunOptions `hpcdist.launch` builds too (checked as it is made).

    Raises:
        UsageError: an option's value is not of its kind (see MpirunOptions).
    """
    from ..launching.options import DRY_RUN, RUN, SCRIPT, MpirunOptions

    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    return MpirunOptions(
        program=tuple(program),
        np=args.np,
        hostfile=args.hostfile,
        hosts=args.hosts,
        include=args.include,
        exclude=args.exclude,
        export=tuple(args.export),
        mca=tuple((key, value) for key, value in args.mca),
        bind_to=args.bind_to,
        map_by=args.map_by,
        bind=args.bind,
        oversubscribe=args.oversubscribe,
        probe_fabrics=args.probe_fabrics,
        bare=args.bare,
        mpirun=args.mpirun,
        mpi=args.mpi,
        launch_agent=args.launch_agent,
        tag=args.tag,
        log_dir=args.log_dir,
        ranks=args.ranks,
        tail=args.tail,
        heartbeat_timeout=args.heartbeat_timeout,
        trace=args.trace,
        outcome=args.outcome,
        on_failure=args.on_failure,
        min_np=args.min_np,
        spares=args.spares,
        max_restarts=args.max_restarts,
        **container_settings(args),
        mode=DRY_RUN if args.dry_run else SCRIPT if args.script else RUN,
        script=None if args.dry_run else args.script,
    )


def _mpirun(args: argparse.Namespace) -> int:
    """`hpcdist mpirun`: argparse -> options -> the launch pipeline, in the world this process runs in."""
    from ..launching.world import World

    return mpirun(mpirun_options(args), World.current())


def mpirun(options: MpirunOptions, world: World) -> int:
    """Print the command (dry run), write it as a script, or run it with its restarts; return the exit status."""
    from ..launching.execute import dry_run, execute, script
    from ..launching.options import DRY_RUN, SCRIPT
    from ..launching.plan import plan

    if options.mode == SCRIPT:  # whoever runs the script, on whatever terminal, is known only when it runs
        world = records.replace(world, euid=None, stdout_tty=None)
    launch = plan(options, world)
    if options.mode == DRY_RUN:
        printed = dry_run(launch)
        world.show(printed.line)
        if printed.note:
            world.say(printed.note)
        return 0
    if options.mode == SCRIPT:
        from ..jobs.render import render_mpirun_script
        from .generate import emit

        written = script(launch)
        text = render_mpirun_script(
            written.argv, dict(written.exports), append=written.append, root_check=written.root_check
        )
        emit(text, None if options.script == "-" else options.script, 0o755)
        return 0
    return execute(launch, world).status


def _run(args: argparse.Namespace) -> int:
    """`hpcdist run NAME...`: initialise once, run each workload, and end the whole job on a wrong result."""
    from ..abort import abort_job
    from ..runtime.bootstrap import init
    from ..runtime.process import current
    from ..workloads import load

    options = workload_options(args, current().contract)  # this rank's contract, read once for the process
    with init(args.backend, args.timeout, args.store) as session:
        for name in args.names:
            problem = load(name)(session, options)
            if problem:
                print(f"hpcdist: {name} FAILED: {problem}", file=sys.stderr)
                abort_job(1)
                return 1
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"env": _env, "mpirun": _mpirun, "run": _run}
