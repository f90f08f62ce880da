"""The job-script commands of the schedulers beside Slurm (`hpcdist gridengine`, …): argparse -> spec -> text.

Each takes its submit command's options in that command's own spelling, and hpcdist's job options (the launch,
environment, setup lines, restarts and requeue) as `hpcdist sbatch` spells them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .. import families, records
from ..errors import UsageError
from ..schedulers import flux, gridengine, lsf, pbs
from .generate import _check_shell, _common, _environment, _program, emit
from .types import Whole, add_container_options, add_output_options, container_settings, count

__all__ = ["COMMANDS", "add_parsers"]


def _job_options(p: argparse.ArgumentParser, requeue: str | None, mpirun: bool = True) -> None:
    """hpcdist's own options of a job script: the ranks, setup lines, restarts, per-rank output, the MPI whose
    mpirun the launch runs (`mpirun`: not where the scheduler's own launcher starts the ranks) and --requeue
    (`requeue`: the scheduler's requeue, in a line; None where it has none)."""
    r = p.add_argument_group("launch (hpcdist's own options)")
    r.add_argument("-np", type=count, metavar="N", help="ranks (default: one in each slot of the job)")
    r.add_argument("--setup", action="append", default=[], metavar="LINE", help="a setup line, e.g. 'module load cuda'")
    r.add_argument("--python", help="the Python on the compute nodes (default: this one)")
    r.add_argument(
        "--max-restarts",
        type=Whole(0),
        default=0,
        metavar="N",
        help="run the launch again after a failure, up to N times, from a loop in the script (default: 0)",
    )
    if mpirun:
        r.add_argument("--mpirun", help="the mpirun hpcdist mpirun runs (default: beside --python)")
        r.add_argument(
            "--mpi",
            metavar="|".join(families.names()),
            help="the MPI whose launcher --mpirun is (default: told by the files installed beside it)",
        )
        r.add_argument("--probe-fabrics", action="store_true", help="keep Open MPI's libfabric probe")
        r.add_argument("--bind", default="none", metavar="auto|none", help="as hpcdist mpirun --bind (default: none)")
    if requeue is not None:
        r.add_argument("--requeue", action="store_true", help=requeue)
    add_container_options(p, script=True)
    add_output_options(p, script=True)
    _common(p)
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")


def add_parsers(sub: Any) -> None:
    """Add the job-script subcommands to the CLI's subparsers."""
    ge = sub.add_parser(
        "gridengine",
        help="write a Grid Engine job script (options as qsub's)",
        description="Options as Grid Engine's qsub; any other qsub option (-M me@site, -m e, -hold_jid 12, ...) "
        "goes into the script as a #$ line. Everything after `--` is the program each rank runs.",
    )
    ge.passes_words, ge.tool = gridengine.QSUB_OPTIONS, "qsub"
    a = ge.add_argument_group("job (as qsub)")
    a.add_argument(
        "-pe", nargs="+", metavar="NAME SLOTS", help="parallel environment and slots, e.g. mpi 8 or mpi 4-16"
    )
    a.add_argument(
        "-l", action="append", default=[], metavar="NAME=VALUE", help="a resource, e.g. h_rt=4:00:00 (repeatable)"
    )
    for flag, metavar, help_text in (
        ("-N", "NAME", "job name"),
        ("-q", "QUEUE", "queue"),
        ("-P", "PROJECT", "project"),
        ("-A", "ACCOUNT", "account string"),
        ("-o", "PATH", "stdout path, e.g. logs/$JOB_NAME.$JOB_ID"),
        ("-e", "PATH", "stderr path"),
        ("-j", "y|n", "y: stderr into stdout"),
        ("-t", "N[-M[:S]]", "array task ids, e.g. 1-10 or 2-20:2"),
        ("-r", "y|n", "y: rerun the job when its host fails"),
    ):
        a.add_argument(flag, metavar=metavar, help=help_text)
    a.add_argument("-cwd", action="store_true", help="run in the directory qsub was run in")
    a.add_argument("-V", action="store_true", help="pass qsub's whole environment on")
    a.add_argument("-notify", action="store_true", help="SIGUSR1/SIGUSR2 ahead of suspend/kill")
    _job_options(ge, "on Grid Engine's notice, pass USR1 to the ranks, then exit 99 so the job is rescheduled")

    pb = sub.add_parser(
        "pbs",
        help="write a PBS Pro / OpenPBS job script (options as qsub's)",
        description="Options as PBS's qsub; any other qsub option (-M me@site, -m e, -W depend=afterok:12, ...) "
        "goes into the script as a #PBS line. Everything after `--` is the program each rank runs.",
    )
    pb.passes_words, pb.tool = pbs.QSUB_OPTIONS, "qsub"
    a = pb.add_argument_group("job (as qsub)")
    a.add_argument(
        "-l",
        action="append",
        default=[],
        metavar="RESOURCES",
        help="select=2:ncpus=64:mpiprocs=4:ngpus=4, walltime=4:00:00, place=scatter, ... (repeatable)",
    )
    for flag, metavar, help_text in (
        ("-N", "NAME", "job name"),
        ("-q", "DESTINATION", "queue"),
        ("-A", "ACCOUNT", "account"),
        ("-o", "PATH", "stdout path"),
        ("-e", "PATH", "stderr path"),
        ("-j", "oe|eo|n", "oe: stderr into stdout"),
        ("-J", "X-Y[:Z]", "array subjob indices, e.g. 0-15 or 1-99:2"),
        ("-r", "y|n", "rerunnable (PBS's default: y)"),
    ):
        a.add_argument(flag, metavar=metavar, help=help_text)
    a.add_argument("-V", action="store_true", help="pass qsub's whole environment on")
    _job_options(pb, "keep the script waiting after PBS's SIGTERM for the ranks to checkpoint; -r y")

    ls = sub.add_parser(
        "lsf",
        help="write an LSF job script (options as bsub's)",
        description="Options as LSF's bsub; any other bsub option (-alloc_flags 'gpumps smt1', -B, -w 'done(12)', "
        "...) goes into the script as a #BSUB line. Everything after `--` is the program each rank runs. Submit it "
        "with `bsub < job.sh`.",
    )
    ls.passes_words, ls.tool = lsf.BSUB_OPTIONS, "bsub"
    a = ls.add_argument_group("job (as bsub)")
    a.add_argument("-n", metavar="MIN[,MAX]", help="slots (the ranks, unless -np)")
    a.add_argument("-nnodes", type=count, metavar="N", help="whole nodes (LSF's CSM clusters)")
    a.add_argument("-R", action="append", default=[], metavar="REQ", help='e.g. "span[ptile=4]" (repeatable)')
    a.add_argument("-gpu", metavar="SPEC", help='GPUs per host, e.g. "num=4"')
    for flag, metavar, help_text in (
        ("-W", "[HH:]MM", "run limit"),
        ("-q", "QUEUE", "queue"),
        ("-P", "PROJECT", "project"),
        ("-J", "NAME", "job name, or an array: 'name[1-10]%%2'"),
        ("-o", "FILE", "stdout file, e.g. out.%%J"),
        ("-e", "FILE", "stderr file"),
        ("-wa", "SIGNAL", "the warning signal (with --requeue: USR1)"),
        ("-wt", "[HH:]MM", "its time ahead of the action (with --requeue: 2)"),
    ):
        a.add_argument(flag, metavar=metavar, help=help_text)
    a.add_argument("-r", action="store_true", help="rerun the job when its host fails")
    a.add_argument(
        "--launch",
        choices=("mpirun", "jsrun"),
        default="mpirun",
        help="mpirun (default): the MPI's, on the job's hosts; jsrun: LSF's own (CSM clusters, -nnodes and -np)",
    )
    _job_options(ls, "on LSF's warning (-wa/-wt), pass USR1 to the ranks, then exit 99, which -Q 99 requeues")

    fl = sub.add_parser(
        "flux",
        help="write a Flux batch script (options as flux batch's)",
        description="Options as flux batch's; any other long option of flux batch's (--setattr=KEY=VAL, "
        "--dependency=afterok:JOBID, ...) goes into the script as a `# flux:` line. Everything after `--` is the "
        "program each rank runs; hpcdist mpirun --mpi flux starts the ranks with flux run, as many on every node.",
    )
    fl.passes, fl.tool = flux.BATCH_OPTIONS, "flux batch"
    fl.habits = {"--requeue": "Flux requeues no job; --max-restarts N runs the launch again from the script"}
    a = fl.add_argument_group("job (as flux batch)")
    a.add_argument("-N", "--nodes", type=count, help="nodes (the ranks are spread evenly over them)")
    a.add_argument("-n", "--nslots", type=count, help="slots: a rank in each, unless -np")
    a.add_argument("-c", "--cores-per-slot", type=count, metavar="N", help="cores of each slot (rank)")
    a.add_argument("-g", "--gpus-per-slot", type=count, metavar="N", help="GPUs of each slot (rank)")
    a.add_argument("-t", "--time-limit", metavar="MINUTES|FSD", help="e.g. 30 or 2h")
    a.add_argument("-q", "--queue", help="queue")
    a.add_argument("-B", "--bank", help="bank")
    a.add_argument("--job-name", help="job name")
    a.add_argument("--output", metavar="TEMPLATE", help="stdout file (flux batch's default: flux-{{id}}.out)")
    a.add_argument("--error", metavar="TEMPLATE", help="stderr file")
    a.add_argument("-x", "--exclusive", action="store_true", help="whole nodes only")
    _job_options(fl, None, mpirun=False)


def _job(args: argparse.Namespace, command: str) -> Any:
    """The BatchJob the options describe (without --mpirun where the scheduler's own launcher starts the ranks)."""
    from ..jobs.batch import BatchJob
    from ..jobs.local import local_tools
    from ..launching.output import OutputOptions
    from ..launching.world import World

    program = _program(args.program, command)
    if args.setup:  # complete on their own: an open quote or here-document would swallow the script after them
        _check_shell(
            "".join(line + "\n" for line in args.setup),
            "the --setup lines",
            "each must be complete: close its quotes, if/fi, loops and here-documents",
        )
    world = World.current()
    job = BatchJob(
        program=program,
        np=args.np,
        env=tuple(_environment(args, 1).items()),
        setup=tuple(args.setup),
        python=args.python or world.python,
        rank_output=OutputOptions(tag=args.tag, log_dir=args.log_dir, ranks=args.ranks),
        max_restarts=args.max_restarts,
        requeue=getattr(args, "requeue", False),
        **container_settings(args),
    )
    if "mpirun" not in args or getattr(args, "launch", "mpirun") != "mpirun":
        return job
    tools = local_tools(world, "mpirun", args.python, args.mpirun, None, False, args.mpi)
    return records.replace(
        job, mpirun=tools["mpirun"], mpi=tools["mpi"], probe_fabrics=args.probe_fabrics, bind=args.bind
    )


def _pe(words: list[str] | None) -> tuple[str, str] | None:
    """-pe's two values, NAME and SLOTS."""
    if words is None:
        return None
    if len(words) != 2:
        raise UsageError(f"-pe takes NAME and SLOTS, got {' '.join(words)!r}; e.g. -pe mpi 8 or -pe mpi 4-16")
    return words[0], words[1]


def _gridengine(args: argparse.Namespace) -> int:
    """`hpcdist gridengine`: print the script or write it (--write)."""
    from ..jobs.gridengine import QsubSpec, render_gridengine
    from ..jobs.render import make_environment

    spec = QsubSpec(
        job=_job(args, "gridengine"),
        pe=_pe(args.pe),
        resources=tuple(args.l),
        name=args.N,
        queue=args.q,
        project=args.P,
        account=args.A,
        output=args.o,
        error=args.e,
        join=args.j,
        array=args.t,
        rerun=args.r,
        cwd=args.cwd,
        export_all=args.V,
        notify=args.notify,
        extra=tuple(args.passed),
    )
    emit(render_gridengine(spec, make_environment(args.template_dir)), args.write, 0o755)
    return 0


def _pbs(args: argparse.Namespace) -> int:
    """`hpcdist pbs`: print the script or write it (--write)."""
    from ..jobs.pbs import PbsSpec, render_pbs
    from ..jobs.render import make_environment

    spec = PbsSpec(
        job=_job(args, "pbs"),
        resources=tuple(args.l),
        name=args.N,
        queue=args.q,
        account=args.A,
        output=args.o,
        error=args.e,
        join=args.j,
        array=args.J,
        rerun=args.r,
        export_all=args.V,
        extra=tuple(args.passed),
    )
    emit(render_pbs(spec, make_environment(args.template_dir)), args.write, 0o755)
    return 0


def _lsf(args: argparse.Namespace) -> int:
    """`hpcdist lsf`: print the script or write it (--write)."""
    from ..jobs.lsf import BsubSpec, render_lsf
    from ..jobs.render import make_environment

    if args.launch == "jsrun" and (args.mpirun or args.mpi):
        raise UsageError("--mpirun and --mpi name the MPI of --launch mpirun; with --launch jsrun, drop them")
    spec = BsubSpec(
        job=_job(args, "lsf"),
        slots=args.n,
        nnodes=args.nnodes,
        requirements=tuple(args.R),
        gpu=args.gpu,
        runlimit=args.W,
        queue=args.q,
        project=args.P,
        name=args.J,
        output=args.o,
        error=args.e,
        rerun=args.r,
        warning=args.wa,
        warning_time=args.wt,
        launch=args.launch,
        extra=tuple(args.passed),
    )
    emit(render_lsf(spec, make_environment(args.template_dir)), args.write, 0o755)
    return 0


def _flux(args: argparse.Namespace) -> int:
    """`hpcdist flux`: print the script or write it (--write)."""
    from ..jobs.flux import FluxSpec, render_flux
    from ..jobs.render import make_environment

    spec = FluxSpec(
        job=_job(args, "flux"),
        nodes=args.nodes,
        nslots=args.nslots,
        cores_per_slot=args.cores_per_slot,
        gpus_per_slot=args.gpus_per_slot,
        time_limit=args.time_limit,
        queue=args.queue,
        bank=args.bank,
        job_name=args.job_name,
        output=args.output,
        error=args.error,
        exclusive=args.exclusive,
        extra=tuple(args.passed),
    )
    emit(render_flux(spec, make_environment(args.template_dir)), args.write, 0o755)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "gridengine": _gridengine,
    "pbs": _pbs,
    "lsf": _lsf,
    "flux": _flux,
}
