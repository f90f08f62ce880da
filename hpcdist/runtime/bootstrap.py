"""`hpcdist.init`: the one place that writes os.environ and calls torch.distributed.init_process_group.

Every function here takes this process's RankProcess (runtime/process.py), or its contract: `init` takes the one the
shim made (or makes it, under a plain mpirun or srun), and hands it down.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from .. import settings
from ..abort import install_abort_hook
from ..contract import RankContract
from ..errors import RanksLost, UsageError, check_same_world
from ..events import Ready
from ..values import check_seconds
from . import rendezvous, sockets
from .backends import check_nccl, choose_backend, choose_store
from .env import LaunchEnv, torch_defaults
from .process import Listener, RankProcess, current, existing
from .rendezvous import Rendezvous, check_master_addr, listen, mpi_rendezvous, slurm_rendezvous, store_over

__all__ = [
    "OVER_MPI",
    "Session",
    "check_nccl",
    "forensics_enabled",
    "init",
    "job_timeout",
    "merge_environ",
    "mpi4py_backend",
    "mpi_store_arguments",
    "prepare",
    "program_finished",
    "release_store",
    "say_ready",
    "serve_store",
    "shutdown",
    "socket_ifnames",
    "stacks_on_failure",
    "start_group",
    "startup_timeout",
]

_BACKSTOP = 15.0  # seconds torch's own timeout waits beyond hpcdist's, so the hang report comes first

OVER_MPI = "hpcdist store over MPI"  # what mpi_store_arguments passes as the store: start_group makes it
_IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")  # which interface gloo/NCCL sockets use


@dataclass(frozen=True)
class Session:
    """What `init` set up: the launch, the backend, the rendezvous, this rank's device, and the launcher's contract."""

    env: LaunchEnv
    backend: str
    master_addr: str | None
    master_port: int | None
    device: str
    timeout: float
    contract: RankContract = field(default_factory=RankContract)

    @property
    def rank(self) -> int:
        """This process's global rank."""
        return self.env.rank

    @property
    def world_size(self) -> int:
        """The number of ranks in the job."""
        return self.env.world_size

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if value is not None:
            stacks_on_failure(self.rank, value)  # before shutdown, which would let the others go
        shutdown()


def job_timeout(environ: Mapping[str, str], timeout: float | None = None) -> float:
    """The timeout in seconds: the argument, else the TIMEOUT setting, else 300; finite, above 0, at most 30 days."""
    if timeout is not None:
        return check_seconds(timeout, "the timeout", "e.g. timeout=300")
    return settings.timeout(environ)


def merge_environ(current: Mapping[str, str], computed: Mapping[str, str]) -> dict[str, str]:
    """The variables to write; a differing value the user already set is an error, never overwritten."""
    for name, value in computed.items():
        if name in current and current[name] != value:
            raise UsageError(
                f"{name}={current[name]} is already set, but the launch says {name}={value}; "
                f"unset {name} (a stale value from another launcher?) or make it agree"
            )
    return {name: value for name, value in computed.items() if current.get(name) != value}


def socket_ifnames(ifname: str | None, current: Mapping[str, str]) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME for the interface towards the rendezvous, unless set."""
    if not ifname:
        return {}
    return {name: ifname for name in _IFNAME_VARIABLES if name not in current}


def prepare(process: RankProcess, timeout: float, env: LaunchEnv | None = None) -> tuple[LaunchEnv, Rendezvous]:
    """Detect the launch, agree on a rendezvous, and write the torch variables into os.environ.

    Rank 0's listening socket is kept in `process` until the store is served over it (`serve_store`).

    Raises:
        UsageError: the launch variables are inconsistent, or differ from torch variables the user set.
        RendezvousTimeout: a rank did not reach the rendezvous within startup_timeout(timeout).
        RendezvousUnreachable: some rank cannot connect to the address rank 0 offers (a UsageError).
    """
    env = env or LaunchEnv.from_environ(os.environ)
    # Before torch loads (the program's import, or init's): OpenMP reads OMP_NUM_THREADS when it loads.
    defaults = torch_defaults(env, os.environ)
    os.environ.update(defaults)
    if "OMP_NUM_THREADS" in defaults and "torch" in sys.modules:  # loaded before hpcdist.init: make the value true
        sys.modules["torch"].set_num_threads(int(defaults["OMP_NUM_THREADS"]))
    rdzv = _rendezvous(env, startup_timeout(timeout))
    if rdzv.listener is not None:  # a later prepare() (the program's own init under the shim) keeps it
        process.listener = Listener(rdzv.listener, rdzv.addr, env.world_size, startup_timeout(timeout))
    computed = dict(env.torch_env(rdzv.facts()), MASTER_ADDR=rdzv.addr, MASTER_PORT=str(rdzv.port))
    computed.update(socket_ifnames(rdzv.ifname, os.environ))
    os.environ.update(merge_environ(os.environ, computed))
    if rdzv.facts().agent_store:
        process.agent_store = True  # shutdown releases the store, and the variable that promises it
    if env.is_mpi:
        install_abort_hook(process.contract)
    return env, rdzv


def serve_store(process: RankProcess) -> None:
    """On rank 0, serve torch's TCPStore over the rendezvous's listening socket (once); elsewhere nothing.

    Called where torch is needed: before init_process_group (`start_group`), when a program under the shim
    imports torch.distributed, and before the shim runs a non-Python program, whose ranks connect as clients.
    Until then the ranks' connections wait in the socket's backlog, and rank 0 never imports torch.
    """
    held, process.listener = process.listener, None
    if held is not None:
        process.store = store_over(*held)


def release_store(process: RankProcess) -> None:
    """Close the rendezvous's listening socket unserved, and drop the store if it was served (any rank).

    For a process group that needs no TCP store: after it, MASTER_ADDR:MASTER_PORT is not served, so the
    agent-store promise (TORCHELASTIC_USE_AGENT_STORE) is taken back too.
    """
    held, process.listener, process.store = process.listener, None, None
    if held is not None:
        held.socket.close()
    if process.agent_store:  # on every rank: a later init must not count on rank 0's store
        process.agent_store = False
        os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)


def _rendezvous(env: LaunchEnv, timeout: float) -> Rendezvous:
    """Respect a user's MASTER_ADDR/PORT (once it resolves here); otherwise ask MPI, Slurm, or bind locally."""
    if env.master_addr:
        check_master_addr(env.master_addr)
    if env.master_addr and env.master_port:
        return Rendezvous(env.master_addr, env.master_port, given=True)
    if env.is_mpi:
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        check_same_world(f"the {env.launcher} launch", (env.rank, env.world_size), (world.rank, world.size))
        return mpi_rendezvous(world, env, timeout)
    if env.launcher == "slurm":
        return slurm_rendezvous(env)
    if env.world_size == 1:
        return listen(env.master_addr or "127.0.0.1", 1, timeout, env.master_port or 0)
    raise UsageError(
        f"launcher {env.launcher} started {env.world_size} ranks but did not set MASTER_ADDR and MASTER_PORT; "
        "set both, or launch with mpirun/srun so hpcdist can agree on them"
    )


def init(backend: str = "auto", timeout: float | None = None, store: str | None = None) -> Session:
    """Detect the launch, rendezvous, pick the device, and initialise torch.distributed.

    `store` is where torch's key-value store lives (`choose_store`): "auto" (default: the STORE setting, else auto),
    "tcp" (rank 0's TCPStore) or "mpi" (over MPI, under an MPI launch: no port opens for it). The launcher's contract
    is read once, by hpcdist's wrapper before the program or here.

    Raises:
        UsageError: an unknown backend or store, nccl without (enough) GPUs, store "mpi" without an MPI launch, or a
            launch that contradicts itself.
        RendezvousTimeout: a rank did not reach the rendezvous in time (see `prepare`).
    """
    import torch
    import torch.distributed as dist

    process = current()
    seconds = job_timeout(os.environ, timeout)
    env = LaunchEnv.from_environ(os.environ)
    process.rank = env.rank
    cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    chosen = choose_backend(
        backend,
        cuda_devices=cuda_devices,
        local_world_size=env.local_world_size,
        native_mpi=dist.is_mpi_available(),
        host=socket.gethostname(),
        mpi_launch=env.is_mpi,
    )
    over_mpi = choose_store(store or settings.store(os.environ), chosen, mpi_launch=env.is_mpi) == "mpi"
    forensics = forensics_enabled(env)
    if chosen == "mpi4py":
        return _init_mpi4py(process, env, seconds, forensics, over_mpi)
    return _init_torch(process, env, chosen, seconds, forensics, over_mpi)


def forensics_enabled(env: LaunchEnv, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether hang forensics run: under an MPI launch, unless the FORENSICS setting turns them off."""
    return env.is_mpi and settings.forensics(environ)


def startup_timeout(seconds: float) -> float:
    """How long a rank may wait for the others to arrive (they come after their own start-up): the STARTUP_TIMEOUT
    setting, at least `seconds`."""
    return max(seconds, settings.startup_timeout(os.environ))


def start_group(process: RankProcess, backend: Any, seconds: float, forensics: bool, **kwargs: Any) -> None:
    """torch's init_process_group under hpcdist's timeouts, then (with forensics) the ledger, its sources, the watchdog.

    A `timeout` in kwargs is the caller's. Otherwise, with forensics on, torch's own timeout is a backstop
    a little after hpcdist's, so the watchdog's hang report comes first; without, it is `seconds`. The
    ledger records the wait in init_process_group, which the watchdog allows `startup_timeout(seconds)`.
    """
    from datetime import timedelta  # as torch is: a rank that never loads torch never needs it

    import torch.distributed as dist

    contract = process.contract
    if kwargs.get("store") is not OVER_MPI:
        serve_store(process)
    if contract.shrinks:  # gloo's listeners come after: a recovery cuts their connections
        process.listening = frozenset(sockets.listening())
    if kwargs.get("timeout") is None:
        kwargs["timeout"] = timedelta(seconds=startup_timeout(seconds) + _BACKSTOP if forensics else seconds)
    init = getattr(dist.init_process_group, "_hpcdist_original", dist.init_process_group)  # not the shim's wrapper
    if not forensics:
        _make_store(process, kwargs)
        init(backend, **kwargs)
        rendezvous.all_connected(dist.get_rank(), dist.get_world_size(), dist.get_backend(), kwargs["timeout"])
        _revocable_world(contract)
        say_ready(contract, dist.get_rank(), dist.get_world_size())
        return
    from ..forensics import collect, ledger, recording, sources, watchdog

    _turn_on_nccl_recorder(contract, backend)
    collect.install()  # before the wait in init: its stacks in the hang report, and on SIGUSR2
    recording.instrument(dist)
    sources.enable_flight_recorder()  # gloo's and nccl's calls below dist.*, DDP's among them
    recording.LEDGER.enter(ledger.INITIALISING)
    _make_store(process, kwargs)  # in the ledger's init phase: the watchdog names a rank that never comes to make it
    init(backend, **kwargs)
    rendezvous.all_connected(dist.get_rank(), dist.get_world_size(), dist.get_backend(), kwargs["timeout"])
    recording.LEDGER.enter(ledger.INITIALISED)
    _revocable_world(contract)
    if dist.get_backend() == "mpi4py":  # hpcdist's mpi backend records every call itself
        from ..mpi_backend import BACKEND_NAME, record

        record.enable()
        recording.add_source(BACKEND_NAME, record.calls, record.oldest, record.keep)
    say_ready(contract, dist.get_rank(), dist.get_world_size())
    if watchdog.start(contract, seconds, startup_timeout(seconds)):
        process.watchdog = True  # started here, so shutdown stops it (under the shim, the shim does)


def _revocable_world(contract: RankContract) -> None:
    """Under --on-failure shrink, the communicator that survivors shrink (ULFM), made now, every rank alike: the mpi
    backend's parent, which its own groups have made already."""
    if contract.shrinks and "mpi4py" in sys.modules:
        from .. import mpi_backend

        mpi_backend.configure(contract)
        mpi_backend.parent()


def _make_store(process: RankProcess, kwargs: dict[str, Any]) -> None:
    """Where `mpi_store_arguments` asked for the store over MPI, make it (collective), with torch's timeout."""
    if kwargs.get("store") is not OVER_MPI:
        return
    from mpi4py import MPI

    from .. import mpi_backend
    from .mpistore import MPIStore

    seconds = kwargs["timeout"].total_seconds()
    kwargs["store"] = process.mpi_store = MPIStore(MPI.COMM_WORLD, seconds)
    mpi_backend.follow_world(process.mpi_store.rebase)  # torch's shrink_group of the default group moves it along
    release_store(process)  # the rendezvous's TCP port: nothing connects to it now, so it closes


def _turn_on_nccl_recorder(contract: RankContract, backend: Any) -> None:
    """On nccl (also torch's default backend with a GPU), torch's Flight Recorder and its dump on a timeout.

    The dumps go where hpcdist writes its own on a hang report (forensics.frdump); a variable the user set stays.
    """
    import torch

    if "nccl" not in str(backend).lower() and not (backend is None and torch.cuda.is_available()):
        return
    from ..forensics import frdump

    directory = frdump.dump_dir(contract, os.environ, os.getcwd())
    with contextlib.suppress(OSError):  # a rank that cannot make it loses only its dump on a timeout
        os.makedirs(directory, exist_ok=True)
    os.environ.update(frdump.nccl_environ(os.environ, directory))


def stacks_on_failure(rank: int, error: BaseException) -> None:
    """A rank's program raised on its own (not Ctrl-C, not a peer gone): print the others' stacks, with forensics."""
    collect = sys.modules.get("hpcdist.forensics.collect")  # loaded where forensics run
    if collect is None or isinstance(error, (KeyboardInterrupt, RanksLost)) or _ended_well(error):
        return
    from ..forensics.cause import peer_lost

    if not peer_lost(str(error)):
        collect.on_failure(rank)


def _ended_well(error: BaseException) -> bool:
    """Whether `error` is a sys.exit with status 0 (a spare released at the job's end)."""
    return isinstance(error, SystemExit) and error.code in (0, None)


def program_finished() -> None:
    """The rank's program (hpcdist.launch's function) ended well: its ledger says so from now, with forensics.

    What the rank does after it (its outcome, shutdown, the wait for the others) is hpcdist's: a failing peer's
    report then names this rank as finished instead of printing the stack of its wind-down.
    """
    recording = sys.modules.get("hpcdist.forensics.recording")  # loaded where forensics run
    if recording is not None:
        from ..forensics.ledger import FINISHED

        recording.LEDGER.enter(FINISHED)


def say_ready(contract: RankContract, rank: int, world_size: int) -> None:
    """Tell `hpcdist mpirun` (when it started this rank) that the rank is initialised: a restart may help now."""
    contract.tell(Ready(rank, host=socket.gethostname(), world=world_size))


def mpi4py_backend(contract: RankContract) -> str:
    """Register hpcdist's process group on mpi4py with torch (for a job launched under `contract`); its name."""
    from .. import mpi_backend

    mpi_backend.configure(contract)
    mpi_backend.register()
    return mpi_backend.BACKEND_NAME


def _init_torch(
    process: RankProcess, env: LaunchEnv, chosen: str, seconds: float, forensics: bool, over_mpi: bool = False
) -> Session:
    """torch's own backends: nccl and gloo rendezvous through the TCP store, native mpi needs none."""
    import torch

    env, rdzv = prepare(process, seconds, env)
    device = "cpu"
    kwargs: dict[str, Any] = {}
    if chosen == "nccl":
        torch.cuda.set_device(env.local_rank)
        device = f"cuda:{env.local_rank}"
        kwargs["device_id"] = torch.device(device)
    if chosen == "mpi":
        start_group(process, "mpi", seconds, forensics)
    elif over_mpi:
        start_group(process, chosen, seconds, forensics, **mpi_store_arguments(env), **kwargs)
    else:
        env_init = {"init_method": "env://", "rank": env.rank, "world_size": env.world_size}
        start_group(process, chosen, seconds, forensics, **env_init, **kwargs)
    return Session(env, chosen, rdzv.addr, rdzv.port, device, seconds, process.contract)


def _init_mpi4py(
    process: RankProcess, env: LaunchEnv, seconds: float, forensics: bool, over_mpi: bool = True
) -> Session:
    """The mpi4py backend: ranks come from MPI; the shared store serves groups of other backends beside it."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    check_same_world(f"the {env.launcher} launch", (env.rank, env.world_size), (world.rank, world.size))
    env, rdzv = prepare(process, seconds, env)
    name = mpi4py_backend(process.contract)
    if over_mpi:
        start_group(process, name, seconds, forensics, **mpi_store_arguments(env))
    else:
        start_group(process, name, seconds, forensics, init_method="env://", rank=env.rank, world_size=env.world_size)
    return Session(env, name, rdzv.addr, rdzv.port, "cpu", seconds, process.contract)


def mpi_store_arguments(env: LaunchEnv) -> dict[str, Any]:
    """init_process_group's store arguments under an MPI launch: the store over MPI, so no port opens.

    Where MPI runs below MPI_THREAD_MULTIPLE, the store's server thread could not call MPI beside the program:
    then rank 0's TCP store as before (env://), and rank 0 says so once. `start_group` makes the store, in the
    ledger's init phase.
    """
    from mpi4py import MPI

    from . import mpistore

    if not mpistore.threads_ok():
        if env.rank == 0:
            print(
                "hpcdist: the store goes over TCP (rank 0 opens a port): MPI gave this job thread level "
                f"{MPI.Query_thread()}, and the store over MPI needs MPI_THREAD_MULTIPLE ({MPI.THREAD_MULTIPLE})",
                file=sys.stderr,
                flush=True,
            )
        return {"init_method": "env://", "rank": env.rank, "world_size": env.world_size}
    return {"store": OVER_MPI, "rank": env.rank, "world_size": env.world_size}  # start_group makes it


def shutdown() -> None:
    """Stop the watchdog, tear down the process group (if any) and release the rendezvous store."""
    process = existing()
    spares = sys.modules.get("hpcdist.resilience.spares")  # loaded where a shrinking job has spares
    if spares is not None:
        spares.release()  # the spares still waiting end with the job
    if process is not None and process.watchdog:
        process.watchdog = False
        sys.modules["hpcdist.forensics.watchdog"].stop()
    if "torch.distributed" in sys.modules:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
            # After DDP, torch keeps the gloo group's worker threads alive past destroy_process_group. One of
            # them still freeing a finished work's tensors when the interpreter finalizes dies in take_gil and
            # aborts the rank ("terminate called without an active exception"): measured in 8 of 23 four-rank
            # DDP runs under torchrun. Freeing DDP's cycles here, while Python is whole, made it 0 of 30.
            gc.collect()
    if process is None:
        return
    mpi_store, process.mpi_store = process.mpi_store, None
    if mpi_store is not None:
        mpi_store.close()  # collective, as shutdown is
    release_store(process)
