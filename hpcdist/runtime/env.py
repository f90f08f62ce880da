"""Work out which launcher started this process and map it onto the variables torchrun gives a worker."""

from __future__ import annotations

from collections.abc import Mapping

from .. import families, records, schedulers
from ..contract import RankContract
from ..errors import UsageError
from ..ranksource import Source
from ..records import record
from ..values import ADDRESS, parse_whole
from .readings import FIELDS, HalfSet, Reading, check_agree, check_below, read_present, read_source, whole

__all__ = [
    "AGENT_VARIABLES",
    "RUN_ID_PREFIX",
    "AgentFacts",
    "LaunchEnv",
    "sources",
    "torch_defaults",
]

# the launch's own counters, which the contract names: this attempt's index (0 first), the most, and the run's id
RESTART_ENV, MAX_RESTARTS_ENV, RUN_ID_ENV = map(RankContract.variable, ("restart_count", "max_restarts", "run_id"))
RUN_ID_PREFIX = "hpcdist-"  # a TORCHELASTIC_RUN_ID hpcdist made, which no torchrun agent stands behind
ROLE = "default"  # torchrun's one role (WorkerSpec.role's default)
_THP = "THP_MEM_ALLOC_ENABLE"  # torch's CPU allocator: transparent huge pages for tensors of 2 MiB and more
# Above this many ranks, torch's nccl groups start with ncclCommInitRankScalable: ceil(N / it) roots each make a unique
# id, and every rank fetches them all from the group's store (torch 2.13 ProcessGroupNCCL::initNCCLComm, which reads
# it at each communicator it makes). 128 is torch's default, "the default NCCL recommended" in its comment there.
RANKS_PER_ROOT, TORCH_RANKS_PER_ROOT = "TORCH_NCCL_RANKS_PER_ROOT", 128
_INT_MAX = 2**31 - 1  # the largest value torch's getCvarInt (std::stoi) reads
# Every name `LaunchEnv.torch_env` may set: what a launch gives each rank, as torchrun's agent gives a worker
AGENT_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
)


# Precedence order: when several sources are present the first one is the launcher and every
# other present source must agree with it on each value both of them carry.
# - torchrun comes first because the user or a shim set RANK & co. explicitly.  A real torchrun
#   agent also sets TORCHELASTIC_RUN_ID; then the MPI/Slurm variables describe the process that
#   started the agent (e.g. one srun task per node), not this worker, and are not compared.
# - then each MPI family's (hpcdist.families), then each scheduler's task launcher's (hpcdist.schedulers); any
#   source may lack its local pair, which is then taken from another source.
# - PMIx gives no world size: it only cross-checks another source and is an error on its own.
_TORCHRUN = Source(
    "torchrun", "RANK", ("WORLD_SIZE",), "LOCAL_RANK", ("LOCAL_WORLD_SIZE",), "GROUP_RANK", ("TORCHELASTIC_RUN_ID",),
    "torchrun", "GROUP_WORLD_SIZE",
)  # fmt: skip
_PMIX = Source("pmix", "PMIX_RANK", (), None, (), None, (), "a PMIx launcher")


def sources(family: str | None = None, scheduler: str | None = None) -> tuple[Source, ...]:
    """Every launcher's variables, in precedence order; with `family`, of the MPI families only that one's (and those
    it is a kind of), and with `scheduler` of the schedulers only that one's (none for schedulers.NONE)."""
    return (_TORCHRUN, *families.rank_sources(family), *schedulers.rank_sources(scheduler), _PMIX)


@record(frozen=True)
class AgentFacts:
    """What hpcdist's rendezvous learnt that torchrun's agent tells its workers: the nodes, the run, the store."""

    node: tuple[int, int] | None = None  # (GROUP_RANK, GROUP_WORLD_SIZE): this host's index, the hosts; None: unknown
    run_id: str | None = None  # TORCHELASTIC_RUN_ID agreed at the rendezvous (rank 0's)
    agent_store: bool | None = None  # True: the store at MASTER_ADDR:MASTER_PORT is already served (by hpcdist)


@record(frozen=True)
class LaunchEnv:
    """Which launcher started this process and this process's place in the job."""

    launcher: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int | None
    master_addr: str | None
    master_port: int | None
    nodelist: tuple[str, ...] = ()
    job_id: str | None = None
    step_id: str | None = None
    node_count: int | None = None
    restart_count: int = 0
    max_restarts: int = 0
    run_id: str | None = None  # the launch's TORCHELASTIC_RUN_ID when it is known without a rendezvous

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str], family: str | None = None, scheduler: str | None = None
    ) -> LaunchEnv:
        """Detect the launcher from `environ` (os.environ or a dict) and check its variables agree.

        A torch variable left over in the environment (`WORLD_SIZE` without `RANK`) is accepted when a complete
        launcher source agrees with it, and refused when one disagrees; with no other source it is half-set.
        `family` and `scheduler`: the MPI family the launcher said it launched with and the scheduler whose job it
        runs in (the contract's `mpi` and `scheduler`), whose variables alone are read; every family's when none of
        the family's is set.
        """
        if family is not None and not any(source.rank in environ for source in families.rank_sources(family)):
            family = None
        readings: list[Reading] = []
        stray: tuple[Reading, HalfSet] | None = None
        for source in sources(family, scheduler):
            try:
                reading = read_source(source, environ)
            except HalfSet as half:
                if source.launcher != "torchrun":
                    raise
                stray = (read_present(source, environ), half)
                continue
            if reading is not None:
                readings.append(reading)
        addr, port = _master(environ)
        job_id = schedulers.job_id(environ, scheduler)
        restart_count, max_restarts = _restarts(environ)
        sized = [r for r in readings if "world_size" in r.values]
        if stray is not None and not sized:
            raise stray[1]
        if not readings:
            return cls(
                "single",
                0,
                1,
                0,
                1,
                None,
                addr,
                port,
                job_id=job_id,
                restart_count=restart_count,
                max_restarts=max_restarts,
                run_id=_run_id(environ),
            )
        if not sized:
            raise UsageError(
                f"PMIX_RANK={environ['PMIX_RANK']} is set but no launcher variable gives the world size; "
                "launch with mpirun or srun --mpi=pmix, "
                "or set RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE"
            )
        first = sized[0]
        readings = _comparable(first, readings, environ)
        checked = readings + ([stray[0]] if stray else [])  # a stray torch variable is checked, never taken
        for other in checked[1:]:
            check_agree(first, other)
        value = {f: next((r.values[f][1] for r in readings if f in r.values), None) for f in FIELDS}
        world = first.values["world_size"][1]
        for var, node_rank in (r.values["node_rank"] for r in checked if "node_rank" in r.values):
            if node_rank >= world:  # every node runs at least one rank
                raise UsageError(
                    f"{var}={node_rank} is out of range: {world} ranks run on at most {world} nodes, "
                    f"numbered from 0; fix or unset {var}"
                )
        if value["local_rank"] is None:
            if value["world_size"] != 1:
                s = first.source
                raise UsageError(
                    f"{s.rank} and {first.values['world_size'][0]} are set but {s.local_rank} and "
                    f"{s.local_world_size[0]} are not; set them to this process's rank on this node and "
                    "the number of ranks on this node (torchrun does), or use a launcher that sets them"
                )
            value["local_rank"], value["local_world_size"] = 0, 1  # a one-process world is its own node
        task = next((r for r in readings if schedulers.of_ranks(r.source) is not None), None)
        launcher = first.source.launcher
        echoed = [r for r in readings[1:] if "world_size" in r.values]
        if launcher == "torchrun" and echoed:
            launcher = echoed[0].source.launcher  # RANK & co. agree with this launch: a shim's echo of it
        rank, world_size, local_rank, local_world_size = (
            int(value[f] or 0) for f in ("rank", "world_size", "local_rank", "local_world_size")
        )  # every one is known here: the first source has rank and world size; local ones were defaulted above
        return cls(
            launcher,
            rank,
            world_size,
            local_rank,
            local_world_size,
            value["node_rank"],
            addr,
            port,
            task.nodelist if task else (),
            job_id,
            (task.step_id or None) if task else None,
            _node_count(readings, environ, task.nodelist if task else ()) if value["node_rank"] is not None else None,
            restart_count=restart_count,
            max_restarts=max_restarts,
            run_id=_run_id(environ),
        )

    @property
    def is_mpi(self) -> bool:
        """True when an MPI launcher started this process."""
        return families.of_ranks(self.launcher) is not None

    def torch_env(self, facts: AgentFacts | None = None) -> dict[str, str]:
        """The variables torchrun's agent gives a worker, for this process, all strings.

        Under torchrun itself only this process's place (its agent set the rest); otherwise also its node
        (the launcher's node id and count, else the host's place `facts.node` from the rendezvous, whose count also
        stands in for a launcher that names its nodes but does not count them, as PALS), torchrun's one role,
        the restart counters, and the run id and store of the rendezvous (`facts`) where they are known.
        """
        facts = facts or AgentFacts()
        env = {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
        }
        node: tuple[int | None, int | None] = facts.node or (None, None)
        if self.node_rank is not None:  # the launcher's node id; its count, else the rendezvous's hosts when they fit
            count = self.node_count if self.node_count is not None else node[1]
            node = (self.node_rank, count if count is not None and self.node_rank < count else None)
        if node[0] is not None:
            env["GROUP_RANK"] = str(node[0])
        if self.master_addr is not None:
            env["MASTER_ADDR"] = self.master_addr
        if self.master_port is not None:
            env["MASTER_PORT"] = str(self.master_port)
        if self.launcher == "torchrun":
            return env
        if node[1] is not None:
            env["GROUP_WORLD_SIZE"] = str(node[1])
        env |= {
            "ROLE_NAME": ROLE,
            "ROLE_RANK": str(self.rank),
            "ROLE_WORLD_SIZE": str(self.world_size),
            "TORCHELASTIC_RESTART_COUNT": str(self.restart_count),
            "TORCHELASTIC_MAX_RESTARTS": str(self.max_restarts),
        }
        run_id = self.run_id or facts.run_id
        if run_id is not None:
            env["TORCHELASTIC_RUN_ID"] = run_id
        if facts.agent_store is not None:
            env["TORCHELASTIC_USE_AGENT_STORE"] = str(facts.agent_store)
        return env

    def describe(self) -> list[tuple[str, str]]:
        """(name, value) rows for a table, in field order, "-" for unknown values."""
        rows = []
        for f in records.fields(self):
            value = getattr(self, f.name)
            value = ",".join(value) or None if f.name == "nodelist" else value
            rows.append((f.name, "-" if value is None else str(value)))
        return rows


def torch_defaults(env: LaunchEnv, current: Mapping[str, str]) -> dict[str, str]:
    """What a rank gets unless set: torchrun's own (OMP_NUM_THREADS=1 beside other local ranks, NCCL's async error
    handling; none under torchrun, whose agent has set them), huge pages for torch's large CPU tensors, and nccl's
    ranks per bootstrap root.

    THP_MEM_ALLOC_ENABLE=1 has torch's CPU allocator ask for transparent huge pages for tensors of 2 MiB and more, as
    numpy does for its arrays; torch reads it once, at its first CPU tensor (not at import).
    TORCH_NCCL_RANKS_PER_ROOT=128 is torch's own default, written down so that the job's threshold for nccl's
    scalable start-up shows in each rank's environment and stays if torch's default moves (docs/scale.md); every
    backend's ranks get it, for the nccl groups a gloo job may make beside its default group.

    Raises:
        UsageError: a TORCH_NCCL_RANKS_PER_ROOT of the user's that is not a whole number from 1 to 2**31 - 1.
    """
    _check_ranks_per_root(current)
    wanted = {_THP: "1", RANKS_PER_ROOT: str(TORCH_RANKS_PER_ROOT)}
    if env.launcher != "torchrun":  # torch/distributed/run.py, local_elastic_agent.py
        wanted["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
        if env.local_world_size > 1:
            wanted["OMP_NUM_THREADS"] = "1"
    return {name: value for name, value in wanted.items() if name not in current}


def _check_ranks_per_root(current: Mapping[str, str]) -> None:
    """A TORCH_NCCL_RANKS_PER_ROOT the user set is a C int above 0: torch parses it with std::stoi and divides by it."""
    text = current.get(RANKS_PER_ROOT)
    if text is None:
        return
    number = parse_whole(text)
    if number is None or not 1 <= number <= _INT_MAX:
        raise UsageError(
            f"{RANKS_PER_ROOT}={text!r} in this rank's environment is not a whole number from 1 to {_INT_MAX}, and "
            f"torch divides each nccl group's ranks by it; set it to e.g. {TORCH_RANKS_PER_ROOT} (torch's default) "
            "or unset it"
        )


def _under_agent(environ: Mapping[str, str]) -> bool:
    """Whether a torchrun agent started this process: it sets TORCHELASTIC_RUN_ID, which hpcdist marks as its own."""
    run_id = environ.get("TORCHELASTIC_RUN_ID")
    return run_id is not None and not run_id.startswith(RUN_ID_PREFIX)


def _run_id(environ: Mapping[str, str]) -> str | None:
    """The run id every rank knows without a rendezvous: the hpcdist mpirun launch's, else the Slurm job's."""
    launch = environ.get(RUN_ID_ENV) or environ.get("SLURM_JOB_ID")
    return f"{RUN_ID_PREFIX}{launch}" if launch else None


def _restarts(environ: Mapping[str, str]) -> tuple[int, int]:
    """This attempt's index and the most restarts, from hpcdist's own counters (unset: 0), the one at most the other."""
    count, most = (whole(environ, var) if var in environ else 0 for var in (RESTART_ENV, MAX_RESTARTS_ENV))
    if MAX_RESTARTS_ENV in environ:
        check_below((RESTART_ENV, count), (MAX_RESTARTS_ENV, most), inclusive=True)
    return count, most


def _node_count(readings: list[Reading], environ: Mapping[str, str], nodelist: tuple[str, ...]) -> int | None:
    """The number of nodes, from the source that gave the node rank (GROUP_WORLD_SIZE, SLURM_STEP_NUM_NODES)."""
    for reading in readings:
        var = reading.source.node_count
        if "node_rank" in reading.values and var and var in environ:
            return whole(environ, var)
    return len(nodelist) or None


def _comparable(first: Reading, readings: list[Reading], environ: Mapping[str, str]) -> list[Reading]:
    """The readings that describe this process, `first` leading; see the notes above `sources`."""
    if first.source.launcher == "torchrun" and _under_agent(environ):
        return [first]
    # A scheduler's task launch of another task count is the one that started the MPI launcher's per-node daemons
    # (Scheduler.same_step), so its rank is not ours.
    world = first.values["world_size"][1]
    return [r for r in readings if r is first or _same_launch(r, environ, world)]


def _same_launch(reading: Reading, environ: Mapping[str, str], world: int) -> bool:
    """Whether `reading` describes this process's launch of `world` ranks (Scheduler.same_step)."""
    scheduler = schedulers.of_ranks(reading.source)
    return scheduler is None or (reading.values["world_size"][1] == world and scheduler.same_step(environ, world))


def _master(environ: Mapping[str, str]) -> tuple[str | None, int | None]:
    """MASTER_ADDR and MASTER_PORT when set (else the Kubeflow Trainer's PET_MASTER_ADDR and PET_MASTER_PORT, which
    torchrun would have made them), checked."""
    if "MASTER_ADDR" not in environ and "MASTER_PORT" not in environ and "PET_MASTER_ADDR" in environ:
        environ = {"MASTER_ADDR": environ["PET_MASTER_ADDR"], "MASTER_PORT": environ.get("PET_MASTER_PORT", "29500")}
    addr = environ.get("MASTER_ADDR")
    if addr is not None and not addr.strip():
        raise UsageError("MASTER_ADDR is set but empty; set it to the hostname of rank 0 or unset it")
    if addr is not None and not ADDRESS.match(addr):
        raise UsageError(
            f"MASTER_ADDR={addr!r} is not a host name or IP address (no blanks or other symbols); "
            "set it to the hostname or address of rank 0's node, or unset it"
        )
    port_text = environ.get("MASTER_PORT")
    if port_text is None:
        return addr, None
    port = parse_whole(port_text)
    if port is None or not 1 <= port <= 65535:
        raise UsageError(f"MASTER_PORT={port_text!r} is not a TCP port (1-65535); set it to a free port such as 29500")
    return addr, port
