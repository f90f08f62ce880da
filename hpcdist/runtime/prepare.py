"""A rank's rendezvous and torch's store: the torch variables written before torch loads, and where the store lives.

`prepare` detects the launch, agrees on MASTER_ADDR/MASTER_PORT (`_rendezvous`) and writes the torch variables
into os.environ (a differing value the user set is refused: `merge_environ`); `serve_store` serves torch's TCPStore
over rank 0's rendezvous socket, `release_store` closes it unserved; `mpi_store_arguments` and `make_store` put the
store over MPI instead. The timeouts they wait under: `job_timeout`, `startup_timeout`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from .. import settings
from ..abort import install_abort_hook
from ..errors import UsageError, check_same_world
from ..values import check_seconds
from .env import LaunchEnv, torch_defaults
from .process import Listener, RankProcess
from .rendezvous import Rendezvous, check_master_addr, listen, mpi_rendezvous, slurm_rendezvous, store_over

__all__ = [
    "OVER_MPI",
    "job_timeout",
    "make_store",
    "merge_environ",
    "mpi_store_arguments",
    "prepare",
    "release_store",
    "serve_store",
    "socket_ifnames",
    "startup_timeout",
]

OVER_MPI = "hpcdist store over MPI"  # what mpi_store_arguments passes as the store: start_group makes it
_IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")  # which interface gloo/NCCL sockets use


def job_timeout(environ: Mapping[str, str], timeout: float | None = None) -> float:
    """The timeout in seconds: the argument, else the TIMEOUT setting, else 300; finite, above 0, at most 30 days."""
    if timeout is not None:
        return check_seconds(timeout, "the timeout", "e.g. timeout=300")
    return settings.timeout(environ)


def startup_timeout(seconds: float) -> float:
    """How long a rank may wait for the others to arrive (they come after their own start-up): the STARTUP_TIMEOUT
    setting, at least `seconds`."""
    return max(seconds, settings.startup_timeout(os.environ))


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


def make_store(process: RankProcess, kwargs: dict[str, Any]) -> None:
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
