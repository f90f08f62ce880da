"""The job-generation commands (`hpcdist sbatch`, `hostfile`, `torchrun`): argparse -> spec -> text."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import families, settingtable
from ..errors import UsageError
from ..schedulers.slurm import SBATCH_OPTIONS
from . import habits
from .types import (
    Later,
    Whole,
    WholeOrWord,
    add_container_options,
    add_output_options,
    container_settings,
    count,
    port,
    rank,
)

__all__ = ["COMMANDS", "add_parsers", "emit"]

_COUNTS = ("OMP_NUM_THREADS",)  # the environment settings that are counts, checked as every count is
_NO_SBATCH = ", or drop --submit to write the script only"  # what `hpcdist sbatch --submit` can do without sbatch


def _common(p: argparse.ArgumentParser, env: bool = True) -> None:
    """--template-dir and --write, plus the environment options when `env`."""
    p.add_argument(
        "--template-dir",
        metavar="DIR",
        help=f"templates searched before ${settingtable.TEMPLATE_DIR.name} and the bundled set",
    )
    p.add_argument("--write", metavar="FILE", help="write the text to FILE instead of printing it")
    if not env:
        return
    from ..jobs.profiles import PROFILES, SETTINGS

    g = p.add_argument_group("environment (later wins: --profile, --env-file, the NCCL/Gloo options, --env)")
    g.add_argument("--profile", choices=sorted(PROFILES), help="a set of NCCL/Gloo settings to start from")
    g.add_argument(
        "--env-file",
        action="append",
        default=[],
        metavar="FILE",
        help="[export] NAME=VALUE lines read with POSIX sh quoting, without expansion ($X stays $X); "
        "# starts a comment at the start of a word (repeatable)",
    )
    g.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="a variable (repeatable)")
    for option, name, help_text in SETTINGS:
        action = g.add_argument(option, dest=name, metavar="VALUE", help=f"{name}: {help_text}")
        if name in _COUNTS:
            action.type = WholeOrWord(1)


def add_parsers(sub: Any) -> None:
    """Add the job-generation subcommands to the CLI's subparsers."""
    from ..jobs import LAUNCHES

    sb = sub.add_parser(
        "sbatch",
        help="write an sbatch script that launches a program on Slurm",
        description="Options as sbatch's; any other long option of sbatch's (--mail-type=END, --dependency "
        "afterok:42, ...) goes into the script as an #SBATCH line. Everything after `--` is the program each rank "
        "runs.",
    )
    sb.habits = habits.SBATCH
    sb.passes = SBATCH_OPTIONS  # sbatch's other options go into the script as #SBATCH lines
    a = sb.add_argument_group("allocation (as sbatch)")
    a.add_argument("-N", "--nodes", type=count, help="nodes (default: 1, or the nodes --include names)")
    a.add_argument("--ntasks-per-node", type=count, help="ranks per node (default: --gpus-per-node, else 1)")
    a.add_argument(
        "--gpus-per-node",
        type=Later("..jobs.sbatchspec", "gpu_count"),
        metavar="[TYPE:]N",
        help="GPUs per node, e.g. 8 or a100:8",
    )
    a.add_argument("-c", "--cpus-per-task", type=count, help="CPUs per rank")
    for flag, short, help_text in (
        ("--partition", "-p", None),
        ("--account", "-A", None),
        ("--qos", "-q", None),
        ("--constraint", "-C", None),
        ("--nodelist", "-w", "e.g. node[01-02]"),
        ("--job-name", "-J", None),
        ("--output", "-o", "the job's stdout file, e.g. %%x-%%j.out"),
        ("--error", "-e", "the job's stderr file"),
    ):
        a.add_argument(*([short] if short else []), flag, help=help_text)
    a.add_argument("--mem", type=Later("..jobs.sbatchspec", "check_mem"), help="memory per node, e.g. 64G (0 = all)")
    a.add_argument(
        "-t", "--time", type=Later("..jobs.sbatchspec", "parse_time"), help="time limit, e.g. 4:00:00 or 1-12"
    )
    a.add_argument(
        "-a",
        "--array",
        type=Later("..jobs.arrays", "check_array", by_field=False),
        metavar="IDS[%LIMIT]",
        help="a job array, e.g. 0-15, 1,3,5 or 0-31%%4",
    )
    a.add_argument("--exclusive", action="store_true", help="whole nodes only")
    a.add_argument("--include", metavar="NODE@...", help="only these nodes, e.g. n1@n2 or n[1-4] (as --nodelist)")
    a.add_argument("-x", "--exclude", metavar="NODE@...", help="never these nodes, e.g. n3@n[7-8] (as sbatch's)")
    r = sb.add_argument_group("launch")
    r.add_argument(
        "--launch",
        choices=LAUNCHES,
        default="srun",
        help="srun --mpi=pmix (default), mpirun inside the allocation, or one torchrun per node",
    )
    r.add_argument("--setup", action="append", default=[], metavar="LINE", help="a setup line, e.g. 'module load cuda'")
    r.add_argument("--python", help="the Python on the compute nodes (default: this one)")
    r.add_argument("--mpirun", help="mpirun for --launch mpirun (default: beside --python)")
    r.add_argument(
        "--mpi",
        metavar="|".join(families.names()),
        help="--launch mpirun: the MPI whose launcher --mpirun is, and so the dialect of its line (default: told "
        "by the files installed beside it, as hpcdist mpirun; Open MPI when they do not say)",
    )
    r.add_argument("--torchrun", help="torchrun for --launch torchrun (default: beside --python)")
    r.add_argument("--master-addr", help="torchrun: default the first node")
    r.add_argument(
        "--master-port",
        type=port,
        help="torchrun: default a free port the first node holds for the job (bind 0)",
    )
    r.add_argument(
        "--opal-prefix",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="export OPAL_PREFIX for the Open MPI wheel (default: with srun, when this Python has it)",
    )
    r.add_argument("--probe-fabrics", action="store_true", help="mpirun: keep Open MPI's libfabric probe")
    r.add_argument(
        "--bind",
        default="none",
        metavar="auto|none",
        help="auto: hpcdist gives each rank its own cores, OMP_NUM_THREADS and NCCL's NIC (see hpcdist "
        "mpirun --bind); none: no binding (default)",
    )
    r.add_argument("--requeue", action="store_true", help="requeue the job when Slurm signals preemption")
    r.add_argument(
        "--requeue-signal",
        type=Later("..jobs.sbatchspec", "parse_signal"),
        metavar="SIG@SECONDS",
        help="with --requeue: signal and lead time (USR1@90)",
    )
    r.add_argument(
        "--max-restarts",
        type=Whole(0),
        default=0,
        metavar="N",
        help="run the launch again after a failure, up to N times, from a loop in the script (default: 0)",
    )
    r.add_argument("--submit", action="store_true", help="submit with sbatch and print the job id")
    add_container_options(sb, script=True)
    add_output_options(sb, script=True)
    _common(sb)
    sb.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")

    hf = sub.add_parser(
        "hostfile",
        help="write an Open MPI or MPICH hostfile",
        description="Hosts from --hosts, --nodelist, or the current Slurm allocation.",
    )
    hf.add_argument("--hosts", metavar="A,B,...", help="host names, comma-separated")
    hf.add_argument("--nodelist", metavar="NODELIST", help="a Slurm nodelist, e.g. 'node[01-04],gpu7'")
    hf.add_argument("--slots", type=count, help="slots per host (default: 1, or SLURM_TASKS_PER_NODE)")
    hf.add_argument("--format", choices=("openmpi", "mpich"), default="openmpi", help="default: openmpi")
    hf.add_argument("--include", metavar="HOST[:SLOTS]@...", help="keep only these hosts or slots, e.g. n1@n2:0,2")
    hf.add_argument("--exclude", metavar="HOST[:SLOTS]@...", help="leave out these hosts or slots, e.g. n2 or n1:1")
    _common(hf, env=False)

    tr = sub.add_parser(
        "torchrun",
        help="print a multi-node torchrun command (or --script)",
        description="torchrun's own options; everything after `--` is the training program.",
    )
    tr.add_argument(
        "--nproc-per-node",
        type=WholeOrWord(1, ("auto", "gpu", "cpu")),
        default="1",
        help="workers per node: a count or auto/gpu/cpu",
    )
    tr.add_argument("--nnodes", type=count, default=1, help="number of nodes (default: 1)")
    tr.add_argument("--node-rank", type=rank, default=0, help="this node's rank")
    tr.add_argument("--master-addr", help="address of node rank 0")
    tr.add_argument("--master-port", type=port, help="its port")
    tr.add_argument("--torchrun", default="torchrun", help="the torchrun to run (default: torchrun)")
    tr.add_argument("--script", action="store_true", help="a per-node script taking the node rank as $1")
    _common(tr)
    tr.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS...]")


def _program(words: Sequence[str], command: str) -> tuple[str, ...]:
    """The words after `--`; UsageError if there are none."""
    program = tuple(words[1:] if words[:1] == ["--"] else words)
    if not program:
        raise UsageError(f"no program given; usage: hpcdist {command} [options] -- PROGRAM [ARGS...]")
    return program


def _environment(args: argparse.Namespace, nodes: int) -> dict[str, str]:
    """The merged job environment; known traps are printed as warnings."""
    from ..jobs.profiles import SETTINGS, env_warnings, job_environment, parse_env_item, read_env_file

    env = job_environment(
        args.profile,
        [read_env_file(path) for path in args.env_file],
        {name: getattr(args, name) for _, name, _ in SETTINGS},
        [parse_env_item(item) for item in args.env],
    )
    for warning in env_warnings(env, nodes):
        print(f"hpcdist: warning: {warning}", file=sys.stderr)
    return env


def emit(text: str, path: str | None, mode: int = 0o644) -> None:
    """Print `text`, or write it to `path`; a script (`#!` first) must pass `bash -n` first."""
    if text.startswith("#!"):
        _check_shell(
            text,
            "the generated script",
            f"a --setup line or a site template (--template-dir, ${settingtable.TEMPLATE_DIR.name}) breaks it: fix "
            "that line",
        )
    if path is None:
        sys.stdout.write(text)
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, mode)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None


def _check_shell(text: str, what: str, culprit: str) -> None:
    """Raise UsageError when bash cannot read `text` (`what`), quoting the line it names; `culprit` is to fix."""
    from ..launching.spawn import shell_syntax_errors

    errors = shell_syntax_errors(text)
    if not errors:
        return
    lines = text.splitlines()
    found = re.search(r"line ([0-9]{1,9})", errors)
    number = min(int(found[1]), len(lines)) if found else 0  # past the end: an open quote, if or here-document
    shown = f"; line {number} is {lines[number - 1]!r}" if number > 0 else ""
    raise UsageError(f"`bash -n` refuses {what} ({errors.splitlines()[0]}){shown}; {culprit}")


def _sbatch(args: argparse.Namespace) -> int:
    """`hpcdist sbatch`: print the script, write it (--write) and/or submit it (--submit)."""
    from ..jobs.local import local_tools
    from ..jobs.render import make_environment
    from ..jobs.sbatch import render_sbatch
    from ..jobs.sbatchspec import SbatchSpec
    from ..launching.output import OutputOptions
    from ..launching.world import World

    program = _program(args.program, "sbatch")
    if args.requeue_signal and not args.requeue:
        raise UsageError("--requeue-signal needs --requeue")
    if args.setup:  # complete on their own: an open quote or here-document would swallow the script after them
        _check_shell(
            "".join(line + "\n" for line in args.setup),
            "the --setup lines",
            "each must be complete: close its quotes, if/fi, loops and here-documents",
        )
    from ..launching.selection import select_nodes

    nodelist, exclude, nodes = select_nodes(args.nodelist, args.include, args.exclude, args.nodes)
    spec = SbatchSpec(
        program=program,
        nodes=nodes,
        ntasks_per_node=args.ntasks_per_node,
        gpus_per_node=args.gpus_per_node,
        cpus_per_task=args.cpus_per_task,
        mem=args.mem,
        time=args.time,
        partition=args.partition,
        account=args.account,
        qos=args.qos,
        constraint=args.constraint,
        nodelist=nodelist,
        exclude=exclude,
        exclusive=args.exclusive,
        job_name=args.job_name,
        output=args.output,
        error=args.error,
        array=args.array,
        env=tuple(_environment(args, nodes).items()),
        setup=tuple(args.setup),
        launch=args.launch,
        **local_tools(
            World.current(), args.launch, args.python, args.mpirun, args.torchrun, args.opal_prefix, args.mpi
        ),
        master_addr=args.master_addr,
        master_port=args.master_port,
        requeue=args.requeue,
        requeue_signal=args.requeue_signal or "USR1@90",
        probe_fabrics=args.probe_fabrics,
        bind=args.bind,
        rank_output=OutputOptions(tag=args.tag, log_dir=args.log_dir, ranks=args.ranks),
        max_restarts=args.max_restarts,
        **container_settings(args),
        extra=tuple(args.passed),
    )
    text = render_sbatch(spec, make_environment(args.template_dir))
    if not args.submit:
        emit(text, args.write, 0o755)
        return 0
    from ..launching.spawn import submit_sbatch

    if args.write:
        emit(text, args.write, 0o755)
        print(submit_sbatch(args.write, _NO_SBATCH))
        return 0
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".sbatch", prefix="hpcdist-", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        print(submit_sbatch(f.name, _NO_SBATCH))  # sbatch keeps its own copy of the script
    return 0


def _hostfile(args: argparse.Namespace) -> int:
    """`hpcdist hostfile`: hosts from --hosts, --nodelist or the allocation, rendered from hostfile.j2."""
    from ..hosts import HOST_NAME, HostSlots
    from ..jobs.render import make_environment, render_hostfile
    from ..launching.selection import select_hosts
    from ..schedulers import lookup
    from ..schedulers.slurm import expand_nodelist

    if args.hosts and args.nodelist:
        raise UsageError("give either --hosts or --nodelist, not both")
    if args.hosts or args.nodelist:
        names = expand_nodelist(args.nodelist) if args.nodelist else [h.strip() for h in args.hosts.split(",")]
        bad = [h for h in names if not HOST_NAME.match(h)] if args.hosts else []
        if bad:
            raise UsageError(
                f"--hosts {args.hosts!r}: expected host names separated by commas, e.g. node1,node2; {bad[0]!r} is "
                "not one (letters, digits, '-', '_' and '.', starting with a letter or digit)"
            )
        twice = sorted({h for h in names if names.count(h) > 1})
        if twice:
            raise UsageError(f"host {twice[0]!r} is listed twice; list each host once and set --slots")
        hosts = tuple(HostSlots(h, args.slots or 1) for h in names)
    else:
        hosts = lookup("slurm").hosts(os.environ, args.slots)
    source = (
        f"--hosts {args.hosts}"
        if args.hosts
        else f"--nodelist {args.nodelist}"
        if args.nodelist
        else lookup("slurm").allocation(os.environ)
    )
    selected = select_hosts(hosts, args.include, args.exclude, source)
    note = ", ".join(f"{s.host.host} slots {','.join(map(str, s.indices))}" for s in selected if s.indices)
    text = render_hostfile(
        [s.host for s in selected],
        args.format,
        f"selected: {note}" if note else "",
        make_environment(args.template_dir),
    )
    emit(text, args.write)
    return 0


def _torchrun(args: argparse.Namespace) -> int:
    """`hpcdist torchrun`: the seed notes' multi-node torchrun command line, or a per-node script."""
    from ..jobs.render import make_environment
    from ..jobs.torchrun import TorchrunSpec, render_torchrun_script, torchrun_line

    spec = TorchrunSpec(
        _program(args.program, "torchrun"),
        args.nproc_per_node,
        args.nnodes,
        args.node_rank,
        args.master_addr,
        args.master_port,
        args.torchrun,
    )
    env = _environment(args, args.nnodes)
    if args.script:
        text = render_torchrun_script(spec, env, make_environment(args.template_dir))
    else:
        text = torchrun_line(spec, env)
    emit(text, args.write, 0o755 if args.script else 0o644)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "sbatch": _sbatch,
    "hostfile": _hostfile,
    "torchrun": _torchrun,
}
