"""Options and a world -> a LaunchPlan: the one builder of the launch's MpirunSpec, and of what comes with it.

`plan(options, world)` resolves the hosts and slots, checks -np against them, finds the mpirun and its family, and
derives from the world what the command line says of it (running as root, Open MPI's fabric probe, TCP keepalive
for a job on several hosts, a Slurm allocation). Beside the spec it makes the per-rank output options, the restart
policy, the heartbeat limit and the contract every rank is handed (`contract.RankContract`: the exported variables,
the launcher's hpcdist version among them). `hpcdist mpirun` (its run, dry run and script), `hpcdist.launch`, the
doctor's probe jobs and a batch script's mpirun step all come through here; each attempt's own values (the control
token, the run id, the restart counter) are added by `attempt_spec`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .. import containers, families, records, schedulers, settings
from .._version import __version__
from ..containers.base import PYTHON, Container, parse_mounts
from ..contract import NUMBERED, RESTART_VARS, RankContract
from ..errors import UsageError
from ..families.base import AppContext, Family, MpirunSpec
from ..hosts import HostSlots, hosts_text
from ..placement.binding import check_bind
from ..program import check_program
from ..records import record
from ..values import parse_ranks
from .families import check_launcher, find_mpirun, resolve_family
from .heartbeat import beat_interval, heartbeat_limit
from .hostfile import check_crowding, check_np, parse_hostfile, parse_hosts_arg, read_hostfile_text, total_slots
from .mpirun import SHIM, env_forwards, spans_hosts
from .options import SCRIPT, MpirunOptions
from .output import DEFAULT_TAIL, OutputOptions
from .restarts import RestartPolicy, check_restarts
from .selection import Selected, select_hosts, selection_option
from .world import World

__all__ = ["PER_RUN", "LaunchPlan", "attempt_spec", "container_for", "plan"]

PER_RUN = ("token", "run_id", "restart_count")  # the contract's fields made afresh for each attempt of a launch


@record(frozen=True)
class LaunchPlan:
    """Everything one launch runs from: its spec, the ranks' contract, the output, the restarts and the heartbeat."""

    options: MpirunOptions
    spec: MpirunSpec  # the command line's spec; each attempt adds its own contract values (attempt_spec)
    contract: RankContract  # what every rank is handed, but for the values made per attempt (PER_RUN)
    output: OutputOptions
    policy: RestartPolicy
    heartbeat: float | None  # seconds a running rank may go unheard (None: no heartbeat)
    startup: float | None  # seconds a rank may go unheard until every rank is past MPI_Init: the ranks' start-up wait
    routed: bool  # hpcdist runs it and reads the ranks' lines: tagged, numbered, with events
    exports: tuple[tuple[str, str], ...] = ()  # SCRIPT: the contract's variables, which the script exports
    note: str = ""  # one line said before the ranks start (more ranks than CPUs here); "" for none
    root_check: bool = False  # SCRIPT: whoever runs it may be root, which its launcher must then be told


def plan(options: MpirunOptions, world: World, caller: str | None = None) -> LaunchPlan:
    """The launch `options` describe in `world` (torch's `config_from_args` for `hpcdist mpirun`).

    `caller` names the Python API that made the options (`hpcdist.launch`), so that its errors speak of its
    arguments, not of flags.

    Raises:
        UsageError: no program, a hostfile that cannot be read or parsed, an --include/--exclude that names what
            is not there or leaves nothing, -np that does not fit the (selected) slots, restart or output options
            that do not fit the job, an mpirun that cannot run, or hosts given to a launcher that reads its job's own.
    """
    program = options.program
    if not program:
        raise UsageError("no program given; usage: hpcdist mpirun [options] -- PROGRAM [ARGS...]")
    check_program(program, "mpirun" if options.bare else "hpcdist's wrapper around each rank")
    if options.hostfile is not None and options.hosts is not None:
        raise UsageError("give either --hostfile or -H, not both")
    hostfile, hosts = options.hostfile, parse_hosts_arg(options.hosts) if options.hosts is not None else ()
    own = families.lookup(options.mpi).program if options.mpi is not None else None  # srun's, not an mpirun
    launcher = (
        check_launcher(options.mpirun, "--mpirun", world)
        if options.mpirun is not None
        else own or find_mpirun(world, caller)
    )
    family, launcher = resolve_family(launcher, options.mpi, which=world.which)
    in_job = _job_hosts(options, families.lookup(family))  # its launcher takes the hosts of its scheduler's job
    shrink = options.on_failure == "shrink"
    if shrink:
        families.lookup(family).check_fault_tolerance(launcher, options.mpi)
    if hostfile is not None:
        text = read_hostfile_text(hostfile)
        hosts = parse_hostfile(text, hostfile)
        if not families.lookup(family).reads_hostfile(text):
            hostfile = None  # MPICH's `host:N` for Open MPI, Open MPI's `slots=N` for Hydra: pass the hosts parsed
    note, source = "", f"--hostfile {options.hostfile}" if options.hostfile is not None else f"-H {options.hosts}"
    job: tuple[str, str] | None = None  # hosts read from a scheduler's job: the job, and how to ask for more slots
    scheduler = schedulers.current(world.environ)
    allocation = scheduler if not hosts and not in_job else None
    if allocation is not None and not allocation.launchers_read_hosts and world.here:
        hosts = allocation.hosts(world.environ, read=read_hostfile_text, ask=world.ask)
        source = allocation.allocation(world.environ)
        note, job = f"hpcdist mpirun: on the hosts of {source}: {hosts_text(hosts)}", (source, allocation.more_slots)
    picked = selection_option(options.include, options.exclude)
    selected = _select(options, hosts, source, world.environ) if picked else tuple(Selected(h) for h in hosts)
    hosts = tuple(s.host for s in selected)
    in_allocation = not hosts and allocation is not None  # mpirun reads the allocation itself
    np = options.np + options.spares if options.np is not None else total_slots(hosts) if hosts else None
    if np is not None and options.spares >= np:
        raise UsageError(f"--spares {options.spares} leaves no rank to train of {np}; give fewer spares, or more -np")
    if np is None and not in_allocation and not in_job:
        raise UsageError("give the number of ranks with -np N (or a --hostfile / -H whose slots say it)")
    if np is not None and not hosts and not in_allocation and not in_job:
        note = check_crowding(np, options.oversubscribe, world)
        hosts = (HostSlots("localhost", max(np, 1)),)  # this machine, one slot per requested rank
    sliced = picked is not None and any(s.indices is not None for s in selected)
    if np is not None and hosts:
        check_np(np, hosts, options.oversubscribe and not sliced, caller, job)
    if picked:
        hostfile = None  # the selected hosts go to mpirun as -H (or app contexts), not the whole hostfile
    contexts = _contexts(selected, np or 0, world.environ, options.export, picked) if picked and sliced else ()
    output = output_from_options(options, np, world)
    if options.bare and any(v is not None for v in (options.tag, options.log_dir, options.ranks, options.tail)):
        raise UsageError(
            "--tag/--no-tag, --log-dir, --ranks and --tail need hpcdist's wrapper around each rank "
            "(it tags each rank's lines); drop --bare"
        )
    trained = np - options.spares if np is not None else None  # the spares train only in lost ranks' places
    check_restarts(options.max_restarts, options.min_np, trained, options.on_failure)
    routed = options.mode != SCRIPT and not options.bare  # hpcdist runs it: the ranks' lines come through us
    beating = min(len(hosts), np) if hosts and np else np or len(hosts) or 1  # each host beats once an interval
    limit = heartbeat_limit(options.heartbeat_timeout, world.environ, beating) if routed else None
    inside = scheduler.name if scheduler is not None else schedulers.NONE
    contract = _contract(options, output, world, routed, limit, np or total_slots(hosts), beating, family, inside)
    script = options.mode == SCRIPT
    given = [f"{name}={value}" for name, value in contract.environ().items()]
    if script:  # the script exports the contract's variables and the launcher passes them on by name
        given = [*contract.environ(), *_told_when_run(options.max_restarts, world)]
    container = container_for(options, world, family)
    shim = () if options.bare else (PYTHON if container else world.python, *SHIM)
    rank = (*shim, *program)
    spec = MpirunSpec(
        program=tuple(containers.lookup(container.runtime).wrap(container, rank, world.python)) if container else rank,
        np=np,
        hostfile=hostfile,
        hosts=() if hostfile else hosts,
        env=env_forwards(world.environ, [*given, *options.export]),
        mca=options.mca,
        bind_to=options.bind_to,
        map_by=options.map_by,
        oversubscribe=options.oversubscribe,
        as_root=world.euid == 0,
        skip_fabric_probe=not options.probe_fabrics and "OMPI_MCA_btl" not in world.environ,
        keepalive=spans_hosts(hosts, world.environ),
        mpirun=launcher,
        contexts=contexts,
        family=family,
        launch_agent=options.launch_agent,
        slurm=in_allocation,
        signalled=scheduler.signals_job if scheduler is not None else None,
        exit_codes=routed,  # the watch reads Hydra's exit-code lines (launching/exitcodes.py)
        fault_tolerance=shrink,
        python=None if options.bare else world.python,
        container=tuple(containers.lookup(container.runtime).launcher_options(container)) if container else (),
    )
    if shrink and (spec.keepalive or in_allocation or in_job):
        warning = families.lookup(family).lost_host_warning(world.version(launcher))
        note = "\n".join(line for line in (note, warning and f"hpcdist mpirun: note: {warning}") if line)
    return LaunchPlan(
        options=options,
        spec=spec,
        contract=contract,
        output=output,
        policy=RestartPolicy(options.max_restarts),
        heartbeat=limit,
        startup=_startup_limit(limit, family, world),
        routed=routed,
        exports=tuple(contract.environ().items()) if script else (),
        root_check=script and world.euid is None and families.lookup(family).refuses_root,
        note=note,
    )


def _startup_limit(limit: float | None, family: str | None, world: World) -> float | None:
    """The silence allowed until every rank is past MPI_Init, when its rank 0 will say so (its ranks meet over MPI:
    not srun's, jsrun's nor flux run's): the ranks' own start-up wait; None otherwise (the limit from the start)."""
    if limit is None or family is None or families.lookup(family).ranks is None:
        return None
    return max(settings.timeout(world.environ), settings.startup_timeout(world.environ))


def _job_hosts(options: MpirunOptions, family: Family) -> bool:
    """Whether `family`'s launcher starts the ranks on the hosts of its scheduler's job, which it reads itself (jsrun,
    flux run): hpcdist then reads no hosts and makes none up.

    Raises:
        UsageError: hosts were given, which such a launcher has no word for.
    """
    if not family.job_hosts:
        return False
    named = {
        "--hostfile": options.hostfile,
        "-H": options.hosts,
        "--include": options.include,
        "--exclude": options.exclude,
    }
    given = [flag for flag, value in named.items() if value is not None]
    if given:
        raise UsageError(
            f"{family.title} starts the ranks on the hosts of the {family.job_hosts} job it runs in, which it reads "
            f"itself: drop {' and '.join(given)}, or use another --mpi"
        )
    return True


def attempt_spec(launch: LaunchPlan, spec: MpirunSpec, index: int, token: str | None, run_id: str | None) -> MpirunSpec:
    """`spec` (the plan's, or a restart's) with attempt `index`'s own contract values: the control token, the run
    id, and the restart counter when the launch restarts; they replace any the user gave, and come last. A script
    sets them itself when it runs (SCRIPT: `spec` as it is)."""
    if launch.options.mode == SCRIPT:
        return spec
    counted = index if launch.policy.max_restarts else None  # without restarts, the counters are left unset
    contract = records.replace(launch.contract, token=token, run_id=run_id, restart_count=counted)
    names = {RankContract.variable(field) for field in PER_RUN} | set(RESTART_VARS)
    ours = {name: value for name, value in contract.environ().items() if name in names}
    kept = tuple((name, value) for name, value in spec.env if name not in ours)
    return records.replace(spec, env=kept + tuple(ours.items()))


def _contract(
    options: MpirunOptions,
    output: OutputOptions,
    world: World,
    routed: bool,
    limit: float | None,
    np: int,
    beating: int,
    family: str,
    scheduler: str,
) -> RankContract:
    """What every rank is handed (but for the values made per attempt); `beating`: the hosts that beat; `family` and
    `scheduler`: the launcher's and the job's it runs in, whose variables alone the ranks read (when the ranks start
    here, now: a script may run in another job).

    Routed (hpcdist runs the launch): every line tagged and numbered for the launcher to route, the heartbeat, and
    each rank's share of the output rate. Otherwise the tagger starts only when an output option asks for it.
    """
    asked = options.tag or output.log_dir is not None or output.ranks is not None
    tag = NUMBERED if routed else "1" if output.tag and asked and not options.bare else ""
    shrink = options.on_failure == "shrink"
    progress = RankContract.variable("progress")
    return RankContract(
        version=__version__,
        max_restarts=options.max_restarts,
        beat_interval=beat_interval(limit, beating) if limit is not None else None,
        trace=_trace(options, world),
        on_failure=options.on_failure,
        min_np=(options.min_np or 1) if shrink else 1,  # the ranks' side reads both (resilience/ulfm.py)
        spares=options.spares if shrink else 0,
        tag=tag,
        log_dir=output.log_dir,
        ranks=None if routed else output.ranks,
        output_rate=settings.output_rate(world.environ, np) if routed else None,
        bind=_bind(options),
        # ranks' stdout looks like a terminal under Open MPI even when piped: say so when ours really is one (a
        # user's own setting is passed on as it is; unset: each rank asks its own stdout)
        mpi=None if options.bare else family,  # read by the shim, which --bare leaves out
        scheduler=scheduler if options.mode != SCRIPT and world.here and not options.bare else None,
        progress=True if options.mode != SCRIPT and world.stdout_tty and progress not in world.environ else None,
    )


def container_for(options: MpirunOptions, world: World, family: str | None) -> Container | None:
    """The container each rank runs in (None: none asked, or none named for a `world` that describes another
    machine, a job's node, whose installed runtime is chosen there when the launch runs): its runtime, or the first
    installed; `family` is the launcher's (None: not checked against a runtime that is its launcher's own).

    Raises:
        UsageError: no runtime is installed, or a runtime that is its launcher's own (pyxis) under another launcher.
    """
    if options.container_image is None or (options.container_runtime is None and not world.here):
        return None
    runtime = (
        containers.lookup(options.container_runtime)
        if options.container_runtime is not None
        else containers.installed(world.which)
    )
    if runtime.launcher_only and family is not None and family != runtime.program:
        raise UsageError(
            f"--container-runtime {runtime.name} gives {runtime.program}'s own container options, and this launch "
            f"runs {families.lookup(family).title}'s launcher; add --mpi {runtime.program} inside a Slurm "
            "allocation, or choose another runtime"
        )
    return Container(
        image=options.container_image,
        runtime=runtime.name,
        mounts=parse_mounts(options.container_mounts),
        gpus=options.container_gpus,
        exported=tuple(item.partition("=")[0] for item in options.export),
        workdir=world.cwd,
        tmpdir=world.environ.get("TMPDIR") or "/tmp",
    )


def _told_when_run(max_restarts: int, world: World) -> list[str]:
    """The variables a script sets when it runs, passed on by name: whether its output is a terminal (when that is
    known only then), and each attempt's restart counters (its restart loop)."""
    names = [RankContract.variable("progress")] if world.stdout_tty is None else []
    return names + (list(RESTART_VARS) if max_restarts else [])


def output_from_options(options: MpirunOptions, np: int | None, world: World) -> OutputOptions:
    """The per-rank output options (--[no-]tag, --log-dir, --ranks, --tail), checked against -np when known.

    Lines are tagged by default when our output is a terminal (as `ls --color=auto`); piped output stays as
    the program printed it, for the tools that read it. A log directory is made absolute where the launch runs here.

    Raises:
        UsageError: a rank list that is not one, or names a rank the job does not have.
    """
    if options.ranks is not None:
        parse_ranks(options.ranks, np)
    log_dir = options.log_dir
    return OutputOptions(
        tag=bool(world.stdout_tty) if options.tag is None else options.tag,
        log_dir=os.path.abspath(log_dir) if log_dir is not None and world.here else log_dir,
        ranks=options.ranks,
        tail=DEFAULT_TAIL if options.tail is None else options.tail,
    )


def _select(
    options: MpirunOptions, hosts: tuple[HostSlots, ...], source: str, environ: Mapping[str, str]
) -> tuple[Selected, ...]:
    """The hosts and slots --include/--exclude keep of `hosts` (from `source`: the hostfile, -H or an allocation), or
    of the allocation its MPI's launcher reads itself (Slurm's)."""
    scheduler = schedulers.current(environ)
    if not hosts and scheduler is not None:
        hosts, source = scheduler.hosts(environ, read=read_hostfile_text), scheduler.allocation(environ)
    elif not hosts:
        raise UsageError(
            "--include/--exclude choose from a host list: give --hostfile FILE or -H, e.g. -H localhost:4 "
            "--exclude localhost:1 (or run inside a Slurm, PBS, LSF, Grid Engine or Flux job)"
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


def _bind(options: MpirunOptions) -> str:
    """`--bind auto` reaches the shim in the contract (the shim applies it); none asks nothing."""
    if check_bind(options.bind, options.bind_to) == "none":
        return "none"
    if options.bare:
        raise UsageError(
            "--bind auto is applied by hpcdist's wrapper around each rank, so it cannot be used with --bare; drop one"
        )
    return "auto"


def _trace(options: MpirunOptions, world: World) -> str | None:
    """`--trace FILE` as every rank's shim gets it: an absolute path (rank 0 writes it at the end).

    Raises:
        UsageError: --bare (the wrapper around each rank records the calls), or a directory that does not exist here.
    """
    if options.trace is None:
        return None
    if options.bare:
        raise UsageError(
            "--trace is recorded by hpcdist's wrapper around each rank, so it cannot be used with --bare; drop one"
        )
    if not world.here:
        return options.trace
    path = os.path.abspath(options.trace)
    if os.path.isdir(path) or not os.path.isdir(os.path.dirname(path)):
        raise UsageError(
            f"--trace {options.trace}: {'is a directory' if os.path.isdir(path) else 'its directory does not exist'}; "
            "give a file to write in an existing directory, e.g. --trace trace.json"
        )
    return path
