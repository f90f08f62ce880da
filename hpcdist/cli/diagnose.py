"""`hpcdist bench` and `hpcdist doctor`: measuring and checking a machine (or a job's hosts)."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import records, settingtable
from ..bench.plan import COLLECTIVES, DTYPES, OPS, BenchOptions
from ..bench.recovery import ROWS as RECOVERY_ROWS
from ..bench.startup import ROWS as STARTUP_ROWS
from ..doctor.facts import DEFAULT_TIMEOUT, STATUSES
from ..errors import UsageError
from ..values import BACKENDS
from .types import Seconds, Size, Whole, count

if TYPE_CHECKING:
    from ..containers import Container
    from ..launching.world import World
    from ..runtime.bootstrap import Session

__all__ = ["COMMANDS", "add_parsers", "bench", "bench_options", "doctor"]


def add_parsers(sub: Any) -> None:
    """Add `bench` and `doctor` to the CLI's subparsers."""
    _add_bench(sub)
    _add_doctor(sub)


def _add_bench(subparsers: Any) -> None:
    """Add `hpcdist bench` (nccl-tests' flags: -b -e -f -i -n -w -c -d -o -r)."""
    p = subparsers.add_parser(
        "bench",
        help="benchmark a collective like nccl-tests (time, algbw, busbw, #wrong), or a DDP step, per backend",
        description="Sizes sweep from -b to -e bytes (K/M/G suffixes), times -f or plus -i. Run it under a "
        "launcher, e.g. `hpcdist mpirun -np 2 -- hpcdist bench all_reduce -b 8 -e 64M -f 2 --backend "
        "mpi,gloo --reference`. `bench ddp` times a DDP training step of a fixed MLP on each backend.",
    )
    p.add_argument(
        "collective",
        nargs="?",
        choices=[*COLLECTIVES, "ddp", "startup", "recovery"],
        help="the operation to time, ddp, startup (jobs of 1 to 256 ranks started and timed on this host), or "
        "recovery (a DDP job that loses a rank, recovered each way; the last two run directly, not under a "
        "launcher); may be left out with --from",
    )
    p.add_argument("-b", "--minbytes", type=Size(), help="smallest size in bytes (default: 32M)")
    p.add_argument("-e", "--maxbytes", type=Size(), help="largest size in bytes (default: 32M)")
    step = p.add_mutually_exclusive_group()
    step.add_argument("-f", "--stepfactor", type=count, help="multiply the size by this (default: 1)")
    step.add_argument(
        "-i", "--stepbytes", type=Size(), help="add this many bytes to the size (default: 1M when -f is 1)"
    )
    p.add_argument("-n", "--iters", type=count, default=20, help="timed iterations per size or DDP steps (default: 20)")
    p.add_argument(
        "-w", "--warmup", "--warmup_iters", type=Whole(0), default=5, help="untimed iterations first (default: 5)"
    )
    p.add_argument(
        "--rounds",
        type=count,
        help="split the -n iterations into this many rounds, interleaved across "
        "backends, and report the median round (default: 5 when comparing, else 1 like nccl-tests)",
    )
    p.add_argument("-c", "--check", type=Whole(0), help="result checks per size; 0 skips them (default: 1)")
    p.add_argument(
        "--backend",
        default="auto",
        help=f"torch.distributed backend, or a comma list to compare "
        f"(e.g. mpi,gloo; the first is the default group): {', '.join(BACKENDS)} (default: auto)",
    )
    p.add_argument("-d", "--dtype", "--datatype", help=f"element type: {', '.join(DTYPES)} (default: float32)")
    p.add_argument(
        "-o", "--op", help=f"reduction for all_reduce, reduce_scatter, reduce: {', '.join(OPS)} (default: sum)"
    )
    p.add_argument("-r", "--root", type=Whole(0), help="root rank for broadcast and reduce (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument("--reference", action="store_true", help="also time raw mpi4py on numpy buffers, row by row")
    p.add_argument(
        "--without-forensics",
        action="store_true",
        help="also time each backend with hang forensics off (the dist.* calls' and the mpi backend's "
        "records; torch's Flight Recorder stays as the group was made), row by row",
    )
    p.add_argument(
        "--timeout", type=Seconds(), help=f"seconds any wait may take (default: ${settingtable.TIMEOUT.name} or 300)"
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="rank 0 also draws the results into FILE (.png, .svg or .pdf): bus bandwidth and time against size "
        "per backend, or the DDP step times; needs matplotlib (pip install 'hpcdist[plot]')",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="record every rank's calls as `hpcdist mpirun --trace` does, and at the end print per rank the time in "
        "collectives and between them, how often it arrived last, and the straggler if one stands out",
    )
    p.add_argument(
        "--trace-cost",
        action="store_true",
        help="also time each torch backend with that recording on, in interleaved rounds (rows BACKEND+trace)",
    )
    p.add_argument(
        "--ranks",
        metavar="N,N,...",
        help="bench startup: the rank counts, rising (default: 1,2,4,8,16,32,64,128,256); bench recovery: the "
        "one rank count (default: 4)",
    )
    p.add_argument(
        "--rows",
        metavar="ROW,...",
        help=f"bench startup: the ways of starting to time: {', '.join(STARTUP_ROWS)}; bench recovery: the ways of "
        f"recovering: {', '.join(RECOVERY_ROWS)} (default: all)",
    )
    p.add_argument(
        "--repeats", type=count, help="bench startup and recovery: jobs per row (and rank count) (default: 3)"
    )
    p.add_argument(
        "--hosts",
        metavar="HOST,...",
        help="bench startup: spread each job's ranks evenly over these hosts, reached as mpirun reaches them "
        "(default: this host alone)",
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="FILE.json",
        help="measure nothing: redraw --plot from a run saved with --json (no launcher needed)",
    )


def bench_options(args: argparse.Namespace) -> BenchOptions:
    """`hpcdist bench`'s parsed arguments as BenchOptions, the plan builders' input."""
    return BenchOptions(**{field.name: getattr(args, field.name) for field in records.fields(BenchOptions)})


def bench(args: argparse.Namespace) -> int:
    """`hpcdist bench`: check the options, initialise the first backend, run; 1 if any result was wrong.

    With --from, redraw a saved run instead (no launcher, no torch).
    """
    from ..bench.plot import check_plot_file, replot

    options = bench_options(args)
    if args.collective == "startup":
        from ..bench.startup_run import run_startup

        if args.plot is not None:
            check_plot_file(args.plot, {})
        return run_startup(options)
    if args.collective == "recovery":
        from ..bench.recovery_run import run_recovery

        return run_recovery(options)
    startup_only = [
        flag for flag in ("--ranks", "--rows", "--repeats", "--hosts") if getattr(args, flag[2:]) is not None
    ]
    if startup_only:
        raise UsageError(
            f"{', '.join(startup_only)} belong to `hpcdist bench startup` and `recovery`; drop them or name one"
        )
    if args.plot is not None:
        check_plot_file(args.plot)  # before anything is measured
    if args.source is not None:
        return replot(options)
    if args.collective is None:
        raise UsageError(
            "bench needs the operation to time, e.g. `hpcdist bench all_reduce` or `hpcdist bench ddp`, "
            "or --from FILE.json --plot FILE.png to redraw a saved run"
        )
    from ..bench.plan import plan_from_options
    from ..bench.run import run_plan
    from ..runtime.bootstrap import init

    if args.collective == "ddp":
        from ..bench.ddp import ddp_plan_from_options, run_ddp

        ddp = ddp_plan_from_options(options)
        with init(ddp.backends[0], args.timeout) as session, _report(args.report, session):
            return run_ddp(ddp, session)
    plan = plan_from_options(options)
    with init(plan.backend, args.timeout) as session, _report(args.report, session):
        return run_plan(plan, session)


def _report(on: bool, session: Session) -> contextlib.AbstractContextManager[None]:
    """--report: trace the run and print the straggler table at its end; nothing without it."""
    if not on:
        return contextlib.nullcontext()
    from ..forensics.timeline import reporting
    from ..runtime.bootstrap import forensics_enabled

    return reporting(forensics_enabled(session.env), session.timeout)


def _add_doctor(subparsers: Any) -> None:
    """Add `hpcdist doctor` to the CLI's subparsers."""
    doctor = subparsers.add_parser(
        "doctor",
        help="check MPI, torch backends, hosts, rendezvous, network and GPUs",
        description="Each check prints pass/warn/fail/info; failures come with a fix. "
        "Exit 0 when nothing failed, 1 otherwise.",
    )
    doctor.add_argument("--hostfile", help="also check these hosts: resolution, an mpirun over them, the rendezvous")
    doctor.add_argument(
        "--mpirun", help=f"the mpirun to check (default: ${settingtable.MPIRUN.name}, the venv's, then PATH)"
    )
    doctor.add_argument(
        "--timeout",
        type=Seconds(),
        default=DEFAULT_TIMEOUT,
        help=f"seconds each probe may take (default {DEFAULT_TIMEOUT:g})",
    )
    doctor.add_argument(
        "--local-world-size",
        type=count,
        metavar="N",
        help="ranks per node for the --bind auto plan (default: the launch's, else one per GPU, else 1)",
    )
    doctor.add_argument(
        "--topology", metavar="FILE", help="plan from this hwloc XML (lstopo --of xml) instead of sysfs"
    )
    doctor.add_argument(
        "--container-image",
        "--container",
        metavar="IMAGE",
        help="also check that this image's MPI (mpi4py's library, else ompi_info or mpichversion inside) is the "
        "launcher's family and major version, as `hpcdist mpirun --container-image` needs",
    )
    doctor.add_argument(
        "--container-runtime", metavar="NAME", help="the runtime that runs it (default: the first installed)"
    )
    doctor.add_argument("--json", action="store_true", help="print machine-readable results")


def doctor(args: argparse.Namespace) -> int:
    """`hpcdist doctor`: gather facts, run the checks, print them; 1 if any check failed."""
    from ..doctor.checks import run_checks
    from ..doctor.probe import gather_facts, job_place
    from ..launching.world import World

    world = World.current()
    rank, note = job_place(world.environ, world.hostname)  # in `hpcdist mpirun -- hpcdist doctor`: rank 0 reports
    if rank != 0:
        return 0
    facts = gather_facts(
        world, args.hostfile, args.mpirun, args.timeout, args.local_world_size, args.topology, _container(args, world)
    )
    checks = run_checks(facts)
    checks = [note, *checks] if note is not None else checks
    failed = any(c.status == "fail" for c in checks)
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    if args.json:
        print(
            json.dumps(
                {"ok": not failed, "counts": counts, "checks": [records.asdict(c) for c in checks]}, sort_keys=True
            )
        )
    else:
        width = max(len(c.area) for c in checks)
        for c in checks:
            print(f"{c.status.upper():<4}  {c.area:<{width}}  {c.detail}")
            if c.fix and c.status in ("fail", "warn"):
                print(f"      {'':<{width}}  fix: {c.fix}")
        print(f"{counts['pass']} passed, {counts['warn']} warnings, {counts['fail']} failed, {counts['info']} info")
    return 1 if failed else 0


def _container(args: argparse.Namespace, world: World) -> Container | None:
    """The image `--container-image` names, run as `hpcdist mpirun --container-image` would run it (None: none).

    Raises:
        UsageError: a runtime that is not one, or none installed.
    """
    from ..launching.options import MpirunOptions
    from ..launching.plan import container_for

    options = MpirunOptions(
        program=("true",), container_image=args.container_image, container_runtime=args.container_runtime
    )
    return container_for(options, world, None)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"bench": bench, "doctor": doctor}
