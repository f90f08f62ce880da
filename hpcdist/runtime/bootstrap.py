"""`hpcdist.init`: the process group's start-up under hpcdist's timeouts, with hang forensics, and its end.

`init` chooses the backend and the store, has `prepare` (runtime/prepare.py) write the launch's torch variables and
agree on the rendezvous, then `start_group` calls torch.distributed.init_process_group and turns forensics on;
`shutdown` undoes it. Every function here takes this process's RankProcess (runtime/process.py), or its contract:
`init` takes the one the shim made (or makes it, under a plain mpirun or srun), and hands it down.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from .. import settings
from ..abort import leave_after_peer
from ..contract import RankContract
from ..errors import RanksLost, check_same_world
from ..events import Ready
from ..hosts import this_host
from ..records import field, record
from ..settingtable import STARTUP_TIMEOUT
from ..waits import wait_peers
from . import rendezvous, sockets
from .backends import check_nccl, choose_backend, choose_store
from .env import LaunchEnv
from .prepare import (
    OVER_MPI,
    job_timeout,
    make_store,
    mpi_store_arguments,
    prepare,
    release_store,
    serve_store,
    startup_timeout,
)
from .process import RankProcess, current, existing

__all__ = [
    "Session",
    "check_nccl",
    "forensics_enabled",
    "init",
    "mpi4py_backend",
    "program_finished",
    "say_ready",
    "shutdown",
    "stacks_on_failure",
    "start_group",
]

_BACKSTOP = 15.0  # seconds torch's own timeout waits beyond hpcdist's, so the hang report comes first


@record(frozen=True)
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
        host=this_host(),
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
        if not process.grouped:  # a program's own group after a loss it recovered from is made without the lost
            _all_alive(contract, seconds)
    process.grouped = True
    if kwargs.get("timeout") is None:
        kwargs["timeout"] = timedelta(seconds=startup_timeout(seconds) + _BACKSTOP if forensics else seconds)
    init = getattr(dist.init_process_group, "_hpcdist_original", dist.init_process_group)  # not the shim's wrapper
    if not forensics:
        make_store(process, kwargs)
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
    make_store(process, kwargs)  # in the ledger's init phase: the watchdog names a rank that never comes to make it
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


def _all_alive(contract: RankContract, seconds: float) -> None:
    """Under --on-failure shrink, before torch's group is made: a barrier of MPI's world, which fails at once when a
    rank was lost (MPI's fault tolerance), where torch's init would wait for it until the start-up timeout. With no
    group to shrink yet, this rank then leaves, and so the job ends (measured 2026-12-01: a rank killed before
    hpcdist.init("gloo") left the others in gloo's init for the whole timeout)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    world = mpi.COMM_WORLD
    what = "every rank to come to torch's init_process_group"
    try:
        wait_peers(world, world.Ibarrier(), startup_timeout(seconds), what, STARTUP_TIMEOUT.name)
    except mpi.Exception as exc:
        leave_after_peer(contract, world.rank, f"a peer was lost before the process group was made ({exc})")


def _revocable_world(contract: RankContract) -> None:
    """Under --on-failure shrink, the communicator that survivors shrink (ULFM), made now, every rank alike: the mpi
    backend's parent, which its own groups have made already."""
    if contract.shrinks and "mpi4py" in sys.modules:
        from .. import mpi_backend

        mpi_backend.configure(contract)
        mpi_backend.parent()


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
    contract.tell(Ready(rank, host=this_host(), world=world_size))


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
