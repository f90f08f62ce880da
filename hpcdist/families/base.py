"""The MPI family plug-in: the spec a launch is built from, what a family's scanner finds, and the base class (pure).

A family is one launcher as hpcdist knows it (an MPI's, or a scheduler's own, such as Slurm's srun): the command
line it takes (`command`), what its output says about ranks and hosts (`scanner`, `hides`, `opens_block`,
`reports_failure`, `in_fatal_report`, `fatal_reporter`), how it reports each rank's exit (`exit_code_line`,
`may_start_exit_codes`, `exit_codes`), the hostfile it reads (`hostfile`, `reads_hostfile`), whether it keeps the
survivors going after a rank is lost (`fault_tolerance`), the variables its ranks see (`ranks`), how its launcher
passes SIGTERM on to the ranks (`sigterm`) and ends the job at once (`ends_job`), how to recognise it (`identity`,
`markers`, `launcher_names`), the scheduler whose job's hosts its launcher reads itself (`job_hosts`, with
`per_node` for the ranks on each) and its quirks that the rest of hpcdist asks about.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from typing import ClassVar

from ..errors import UsageError
from ..hosts import HostSlots, host_slots
from ..plugins import LazyPattern
from ..ranksource import Source
from ..records import record

__all__ = [
    "HELD",
    "AgentFailed",
    "AppContext",
    "Family",
    "HostLost",
    "MpirunSpec",
    "Observation",
    "RankAborted",
    "RankKilled",
    "Scanner",
    "check_job_launch",
    "per_node",
    "told",
]


@record(frozen=True)
class AppContext:
    """One host's part of a launch in app contexts (`-np N -H host:N -x NAME=VALUE PROGRAM :`)."""

    host: HostSlots
    np: int
    env: tuple[tuple[str, str], ...] = ()


@record(frozen=True)
class MpirunSpec:
    """Everything needed to build one launch command line, in the dialect of the family it names."""

    program: tuple[str, ...]
    np: int | None  # None: mpirun takes every slot of the allocation it runs in
    hostfile: str | None = None
    hosts: tuple[HostSlots, ...] = ()
    env: tuple[tuple[str, str | None], ...] = ()
    mca: tuple[tuple[str, str], ...] = ()
    bind_to: str = "none"
    map_by: str = "slot"
    oversubscribe: bool = False
    as_root: bool = False
    skip_fabric_probe: bool = True
    keepalive: bool = False  # the launcher notices a cut link to another host soon: set for jobs on several hosts
    extra: tuple[str, ...] = ()
    mpirun: str = "mpirun"
    contexts: tuple[AppContext, ...] = ()  # set: one app context per host, each with its own variables
    family: str = "openmpi"  # the launcher's dialect: a family's name (hpcdist.families.names())
    launch_agent: str | None = None  # the remote shell that starts the launcher's daemons on other hosts (ssh's)
    slurm: bool = False  # ranks placed by the Slurm allocation it runs in: Hydra starts its proxies with srun
    signalled: int | None = None  # what the scheduler of the job it runs in sends every process (Scheduler.signals_job)
    exit_codes: bool = False  # Hydra: print every rank's exit status at the end (-print-all-exitcodes)
    fault_tolerance: bool = False  # the survivors carry on after a rank is lost (Open MPI's ULFM)
    python: str | None = None  # the Python with hpcdist where the launcher runs (None: --bare, no hpcdist needed)
    container: tuple[str, ...] = ()  # the launcher's own options that start each rank in a container (pyxis: srun's)


HELD = "hpcdist.launching.heldterm"  # the module that runs a launcher with SIGTERM held (Family.held)


_PPR = LazyPattern(r"ppr:(\d{1,9}):node")  # Open MPI's --map-by ranks per node, as hpcdist spells them

# -- what a family's scanner finds in its launcher's lines --------------------------------------------------------


@record(frozen=True)
class HostLost:
    """The launcher lost a host's daemon (its banner: `host` None), or names the host it lost."""

    host: str | None = None


@record(frozen=True)
class AgentFailed:
    """A host's daemon never started: the launch agent (ssh) that was to start it ended with `status`."""

    status: int


@record(frozen=True)
class RankKilled:
    """The launcher says a rank was killed by a signal."""

    rank: int
    host: str
    signal: int


@record(frozen=True)
class RankAborted:
    """The launcher (or the MPI library on the rank's stderr) says a rank called MPI_Abort; `after_peer`: its MPI
    ended it for a peer's lost connection (a peer failed first)."""

    rank: int
    host: str | None = None
    after_peer: bool = False


Observation = HostLost | AgentFailed | RankKilled | RankAborted


class Scanner:
    """Reads the lines of one launch's launcher for what they say of ranks and hosts; this base finds nothing.

    A scanner keeps what it needs between lines (a banner that names its host a few lines further down), so each
    launch has its own (`Family.scanner`). It never sees a rank's control lines.
    """

    def scan(self, stream: str, line: str) -> list[Observation]:
        """What one whole line of the launcher's `stream` ('stdout' or 'stderr') says."""
        return []


# -- the family -----------------------------------------------------------------------------------------------------


class Family:
    """One MPI family's launcher; a subclass registered with `hpcdist.families.register` is one `--mpi` choice.

    Plug-ins are pure: what they need of the machine (a file's existence, a directory's listing) is passed in.
    """

    name: ClassVar[str] = ""  # what --mpi takes, and MpirunSpec.family
    title: ClassVar[str] = ""  # as hpcdist shows it: 'Open MPI'
    order: ClassVar[int] = 100  # where --mpi lists it (a family that is a kind of another is tested before it)
    identity: ClassVar[LazyPattern | None] = None  # `mpirun --version` or MPI_Get_library_version: group 1 version
    markers: ClassVar[tuple[str, ...]] = ()  # files an installation has beside its launcher
    launcher_names: ClassVar[tuple[str, ...]] = ()  # launcher names that say the family (mpirun.openmpi)
    program: ClassVar[str | None] = None  # the launcher it runs unless --mpirun names one (srun); None: an mpirun
    wheel: ClassVar[str | None] = None  # the PyPI wheel that installs it into a venv (mpi4py then loads it)
    ranks: ClassVar[Source | None] = None  # the variables its launcher sets in each rank
    fault_tolerance: ClassVar[bool] = False  # it keeps the survivors going after a rank is lost (--on-failure shrink)
    names_vanished: ClassVar[bool] = False  # its clean-up kills every rank's process group, taggers included: a
    # tagger that says its rank vanished speaks of the rank that was killed (MpirunWatch names those ranks)
    abort_silences_peers: ClassVar[bool] = False  # its MPI_Abort ends the others at once, before a peer killed a
    # moment ago was heard: a rank that aborts first leaves its peers time to be named
    refuses_root: ClassVar[bool] = False  # its launcher will not run as root unless told (a script checks its user)
    sigterm: ClassVar[int] = signal.SIGTERM  # sent to its launcher, every rank gets SIGTERM and the job goes on
    ends_job: ClassVar[int] = signal.SIGINT  # sent to its launcher, it ends the job now, as Ctrl-C does
    lost_host_note: ClassVar[str] = ""  # said after a lost host under --on-failure shrink
    job_hosts: ClassVar[str] = ""  # the scheduler whose job's hosts its launcher starts the ranks on, reading them
    # itself ('LSF' for jsrun): hpcdist then hands it no hosts and refuses --hostfile, -H, --include and --exclude

    def lost_host_warning(self, version: str) -> str:
        """Said before a job on several hosts under --on-failure shrink whose runtime (its launcher's `--version`
        text) ends the whole job when it loses a host; "" where it survives that, or has no word for it."""
        return ""

    def command(self, spec: MpirunSpec) -> list[str]:
        """The argv that launches `spec` (checked by `launching.mpirun.build_mpirun_argv` first).

        Raises:
            UsageError: a spec this launcher cannot carry out.
        """
        raise NotImplementedError

    def held(self, spec: MpirunSpec) -> list[str]:
        """The command that starts its launcher with SIGTERM held (`hpcdist.launching.heldterm`) in the job of a
        scheduler that sends SIGTERM to every process of it (`spec.signalled`: Slurm, PBS), whose ranks get it too:
        the launcher would pass it on (MPICH's Hydra a second SIGTERM; Open MPI's, SIGTERM then SIGKILL half a second
        later). Empty elsewhere; where hpcdist mpirun passes SIGTERM on itself (ranks outside the scheduler's steps)
        and this family's launcher takes that as SIGTERM; without hpcdist's Python (--bare); with a launch agent; or
        with a space in a path (PRRTE splits its agent at spaces).
        """
        relays = spec.slurm or self.sigterm != signal.SIGTERM  # hpcdist's own SIGTERM for the ranks still gets through
        if spec.signalled != signal.SIGTERM or not relays or spec.python is None or spec.launch_agent is not None:
            return []
        held = [spec.python, "-m", HELD]
        return [] if any(" " in word for word in (*held, spec.mpirun)) else held

    def launcher(self, path: str, runnable: Callable[[str], bool]) -> str:
        """The program to run for the launcher at `path` (`runnable(path)`: whether a file there can run)."""
        return path

    def check_fault_tolerance(self, launcher: str, mpi: str | None) -> None:
        """Refuse --on-failure shrink unless this family keeps the survivors going.

        `launcher` is the launcher's path; `mpi` the --mpi given (None: the family was told by its installation).

        Raises:
            UsageError: this family has no fault tolerance hpcdist can start.
        """
        if not self.fault_tolerance:
            raise UsageError(
                f"--on-failure shrink needs an MPI whose survivors are told of a lost rank; the launcher {launcher} "
                f"is {self.title}'s ({told(mpi)}), which hpcdist cannot start so; drop --on-failure shrink"
            )

    def hostfile(self, hosts: Sequence[HostSlots]) -> str:
        """Its hostfile for `hosts`: one `host:N` line per host (caps dropped), unless it reads another form."""
        return "".join(host_slots(h.host, h.slots) + "\n" for h in hosts)

    def reads_hostfile(self, text: str) -> bool:
        """Whether its launcher reads hostfile `text` as hpcdist parsed it; if not, hpcdist passes the hosts."""
        return False

    def scanner(self) -> Scanner:
        """A fresh scanner of its launcher's lines, for one launch."""
        return Scanner()

    def hides(self, text: str) -> bool:
        """Whether a line (a rank's without its tag, or the launcher's) is a banner hpcdist's own report replaces."""
        return False

    def opens_block(self, line: str) -> bool:
        """Whether a launcher's line opens or closes one of its help blocks (which are then judged whole)."""
        return False

    def reports_failure(self, block: str) -> bool:
        """Whether a help block of its launcher (its lines joined) says a rank failed, which hpcdist says itself."""
        return False

    def in_fatal_report(self, text: str, inside: bool) -> bool:
        """Whether a rank's line is part of its MPI's report of an error that ends the rank (`inside`: the rank's
        line before it was), which a peer prints when a rank that failed first closes its connections."""
        return False

    def fatal_reporter(self, lines: Sequence[str]) -> int | None:
        """The rank whose report `lines` are, where the report names it (it came without the rank's tag)."""
        return None

    def exit_code_line(self, line: str, inside: bool) -> bool:
        """Whether a launcher's line (blanks and NULs stripped) is part of its report of each rank's exit
        (`inside`: the line before it was)."""
        return False

    def may_start_exit_codes(self, tail: str, inside: bool) -> bool:
        """Whether an unfinished line may become part of that report (it is then held back until it is whole)."""
        return False

    def exit_codes(self, lines: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
        """Each host's ranks' endings ('exit code 3', 'killed by SIGKILL'), in order, from the lines that
        `exit_code_line` took; none for a launcher that does not report them."""
        return []


def check_job_launch(spec: MpirunSpec, launcher: str, *more: tuple[str, bool]) -> None:
    """Refuse what a scheduler's own launcher (`launcher`, such as "LSF's jsrun") has no word for: hosts of hpcdist's
    choosing, a launch agent, app contexts, fault tolerance, oversubscription, and the options in `more` (each
    flag with whether `spec` uses it).

    Raises:
        UsageError: naming the first such option `spec` uses.
    """
    given = (
        ("--hostfile or -H", bool(spec.hostfile or spec.hosts)),
        ("--launch-agent", spec.launch_agent is not None),
        ("--include/--exclude with slot lists", bool(spec.contexts)),
        ("--on-failure shrink", spec.fault_tolerance),
        ("--oversubscribe", spec.oversubscribe),
        *more,
    )
    flag = next((flag for flag, used in given if used), None)
    if flag is not None:
        raise UsageError(f"{flag} has no {launcher} equivalent; drop it, or use another --mpi")


def per_node(spec: MpirunSpec, launcher: str) -> tuple[int, int]:
    """(nodes, ranks per node) of a launch whose `launcher` places the same ranks on each node of its job: -np
    ranks in all, `--map-by ppr:N:node` on each.

    Raises:
        UsageError: no -np, no --map-by ppr:N:node, or an -np that N does not divide.
    """
    ppr = _PPR.fullmatch(spec.map_by)
    each = int(ppr[1]) if ppr else 0
    if spec.np is None or each < 1:
        got = f"; got --map-by {spec.map_by}" if each < 1 else ""
        raise UsageError(
            f"{launcher} starts the same number of ranks on each node of its job: give the ranks in all and on each "
            f"node, e.g. -np 8 --map-by ppr:4:node (two nodes of 4){got}"
        )
    if spec.np % each:
        raise UsageError(
            f"-np {spec.np} is not a whole number of nodes of {each} ranks (--map-by {spec.map_by}); give an -np "
            f"that {each} divides, e.g. -np {each * max(spec.np // each, 1)}"
        )
    return spec.np // each, each


def told(mpi: str | None) -> str:
    """How a launcher's family was told: 'as --mpi mpich says', or by the files of its installation."""
    return f"as --mpi {mpi} says" if mpi is not None else "as the files beside it say"
