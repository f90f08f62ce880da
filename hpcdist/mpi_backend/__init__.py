"""A torch.distributed process group on mpi4py, for PyTorch wheels built without MPI.

    hpcdist.init(backend="mpi")                  # registers it and initialises the default group
    dist.all_reduce(tensor)                      # every torch collective, p2p and object collective
    sub = dist.new_group([0, 1])                 # an MPI communicator over those ranks only

The backend is registered with torch as "mpi4py" (torch reserves "mpi" for its native backend); on a wheel without
that one, `new_group(backend="mpi")` means it too (naming.py).
Ranks and sizes come from MPI.COMM_WORLD. The backend itself never reads torch's store, but the
default group gets one all the same (hpcdist's store over MPI, runtime/mpistore.py, so no port opens), so groups
of other backends (gloo, nccl) can be made beside it with `new_group(backend=...)`.

Two implementations: the compiled one (native.cpp, built once per cache by building.py, loaded by native.py; the
default where it builds) runs the hot collectives on MPI's blocking calls from C++ and hands every other call form
to the Python one (MPIProcessGroup, the reference, and all there is with the MPI_NATIVE setting at 0).
Both record every call for hang forensics once the runtime turns it on (`record.py`).

Under --on-failure shrink (ULFM) an operation that fails because ranks died raises `RanksLostError` (a
CollectiveError and an hpcdist.RanksLost) naming them (lost.py); a recovery revokes every communicator made here
(`revoke_all`) and hands the survivors' communicator to `set_parent`, on which the next groups are made. torch's own
`dist.shrink_group` works on both implementations (shrinking.py); when it shrinks the default group, what lives on
the old world follows the survivors (`follow_world`).

May import: the leaves (errors, values, waits, abort, contract, settings, settingtable, commcall), torch and mpi4py.
Never the runtime, launching, jobs or the CLI.
"""

from __future__ import annotations

import contextlib
import weakref
from array import array
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from mpi4py import MPI

from .. import abort, records
from ..contract import RankContract
from ..errors import check_same_world
from ..records import field
from . import naming, shrinking
from .crowding import node_crowded
from .dtypes import reduction_plan
from .errors import CollectiveError, CollectiveTimeout, NativeUnavailable
from .group import BACKEND_NAME, DEVICES, MPIProcessGroup
from .lost import RanksLostError, gather_hosts
from .ring import COMPILED_TAG, SEGMENT, ring_min_bytes
from .work import MPIWork

__all__ = [
    "BACKEND_NAME",
    "CollectiveError",
    "CollectiveTimeout",
    "MPIProcessGroup",
    "MPIWork",
    "NativeUnavailable",
    "RanksLostError",
    "configure",
    "crowded",
    "follow_world",
    "native_active",
    "parent",
    "reduction_plan",
    "register",
    "revoke_all",
    "set_parent",
]

_GROUP_TAG = 0x4D50  # tag for MPI_Comm_create_group; creations are issued in the same order everywhere


@records.record
class _World:
    """The communicator this process's groups are made on, what was decided as they were made, and every group.

    One per process (`_WORLD`): torch calls the backend's creator hook (`_create`) with its own arguments only.
    """

    contract: RankContract = field(default_factory=RankContract)  # the launcher's (`configure`): shrink or not
    comm: MPI.Intracomm | None = None  # the duplicate of COMM_WORLD (after a recovery, the survivors'), once made
    node_crowded: bool = False  # whether this rank's node runs more ranks than their affinity masks give cores
    crowded: dict[tuple[int, ...], bool] = field(default_factory=dict)  # each group's decision, by its global ranks
    groups: weakref.WeakSet[MPIProcessGroup] = field(default_factory=weakref.WeakSet)  # every Python group made
    followers: list[Callable[[MPI.Intracomm], None]] = field(default_factory=list)  # `follow_world`'s callbacks


_WORLD = _World()


def configure(contract: RankContract) -> None:
    """Make this process's groups for a job launched under `contract` (under --on-failure shrink, lost ranks are
    named with their hosts); before its first group."""
    _WORLD.contract = contract


def register() -> None:
    """Make "mpi4py" a torch.distributed backend (idempotent)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=list(DEVICES))
    shrinking.install()
    naming.install(BACKEND_NAME)


def native_active() -> bool:
    """Whether this process's "mpi4py" groups run on the compiled backend (native.py) rather than MPIProcessGroup."""
    from . import native

    return native.active()


def crowded(group: Any = None) -> bool:
    """Whether the "mpi4py" group (default: the default group) is crowded, the node of one of its ranks running more
    ranks than their affinity masks give cores (crowding.py), decided as the group was made: the compiled backend
    then waits on non-blocking calls, yielding the CPU (the Python one's waits spin briefly, then yield, either way).

    Raises:
        ValueError: no "mpi4py" group over those ranks was made in this process.
    """
    ranks = tuple(dist.get_process_group_ranks(group or dist.group.WORLD))
    if ranks not in _WORLD.crowded:
        raise ValueError(f"no mpi4py group over ranks {list(ranks)} was made in this process")
    return _WORLD.crowded[ranks]


def parent() -> MPI.Intracomm:
    """The communicator groups are made on: a private duplicate of COMM_WORLD (errors returned), made (collectively,
    with the exchange that tells whether this rank's node is crowded) at this process's first group or call here;
    after a recovery under --on-failure shrink, the survivors' communicator (`set_parent`)."""
    comm = _WORLD.comm
    if comm is None:
        comm = _WORLD.comm = MPI.COMM_WORLD.Dup()
        comm.Set_errhandler(MPI.ERRORS_RETURN)
        _WORLD.node_crowded = node_crowded(comm)
        if _WORLD.contract.shrinks:
            gather_hosts(comm)  # so that lost ranks are named with their hosts
    return comm


def set_parent(comm: MPI.Intracomm) -> None:
    """Make the next groups (the default group's included) on `comm`: the survivors of a failure, errors returned."""
    parent()
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    _WORLD.comm = comm
    _WORLD.crowded.clear()


def follow_world(callback: Callable[[MPI.Intracomm], None]) -> None:
    """Have `callback` called with the survivors' communicator (collectively, on every survivor) when torch's
    shrink_group shrinks the default group: what lives on the old world (the store over MPI) moves there."""
    if callback not in _WORLD.followers:
        _WORLD.followers.append(callback)


def revoke_all() -> None:
    """Revoke (ULFM) the parent and every communicator of every group made here, so no call on them waits any more;
    each group is aborted (its pending operations abandoned)."""
    comms = [_WORLD.comm] if _WORLD.comm is not None else []
    for group in list(_WORLD.groups):
        comms += [group._comm, group._ring_comm]
        group.abort()
    for comm in comms:
        if comm != MPI.COMM_NULL:
            with contextlib.suppress(MPI.Exception):  # freed already, or revoked by another rank
                comm.Revoke()


def _create(options: Any, backend_options: Any = None) -> Any:
    """torch's creator hook: the group for the default group (all ranks) or a subgroup.

    The compiled backend over it when it is available (native.py), else the Python group itself.
    """
    base = parent()
    ranks = list(options.global_ranks_in_group)
    name = str(ranks)  # the group as the ledger names it (as hang forensics name torch's subgroups)
    if not ranks:  # the default group: torch's ranks must be MPI's
        check_same_world("torch's init_process_group", (options.group_rank, options.group_size), (base.rank, base.size))
        ranks = list(range(base.size))
        name = "world"
        comm = base.Dup()
    else:
        if dist.is_initialized():
            check_same_world("torch's default group", (dist.get_rank(), dist.get_world_size()), (base.rank, base.size))
        group = base.Get_group().Incl(ranks)
        comm = base.Create_group(group, _GROUP_TAG)  # collective over the members only
        group.Free()
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    if comm.rank != options.group_rank:
        raise ValueError(
            f"MPI rank {comm.rank} in the new communicator differs from torch's group rank {options.group_rank}"
        )
    return _over(comm, ranks, options.timeout, name, group=True)


def _shrink(reference: MPIProcessGroup, excluded: list[int]) -> Any:
    """torch's shrink_group on `reference`'s group (or the compiled backend over it): the backend of its ranks but
    `excluded`, which failed, on the survivors' communicator (shrinking.py); the old group is abandoned. Shrinking
    the default group makes the survivors the world: the next groups, and the followers' (`follow_world`), are
    theirs, and the process ends without MPI_Finalize, as survivors do."""
    if not _WORLD.contract.shrinks:
        raise ValueError(
            f"{reference._who()}: shrink_group on the mpi backend needs MPI's fault tolerance (ULFM): run the job "
            "under `hpcdist mpirun --on-failure shrink`"
        )
    comm = shrinking.survivors((reference._comm, reference._ring_comm), excluded, reference._who(), reference._desc)
    reference.abort()
    kept = [rank for at, rank in enumerate(reference._ranks) if at not in set(excluded)]
    name = reference._ledger_name
    if name == "world":  # torch renumbers the default group's ranks from 0
        kept = list(range(comm.size))
        set_parent(comm)
        for follower in _WORLD.followers:
            follower(comm)
        abort.survive_finalize()
        comm = comm.Dup()
    else:
        name = str(kept)
    return _over(comm, kept, timedelta(seconds=reference._timeout), name, group=False)


def _over(comm: MPI.Intracomm, ranks: list[int], timeout: timedelta, name: str, group: bool) -> Any:
    """The backend over `comm` for torch (errors returned; `ranks` its global ranks): the compiled one over the
    Python group where every rank has it, else the Python group itself; as a ProcessGroup (`group`) or a Backend."""
    reference = MPIProcessGroup(
        comm, ranks, timeout.total_seconds(), name, shrinker=_shrink, survivors=_WORLD.contract.shrinks
    )
    _WORLD.groups.add(reference)
    from . import native  # not at import: `python -m hpcdist.mpi_backend.native` runs it as __main__

    compiled = native.load()
    # Every rank of the group alike: the compiled backend or not; blocking MPI calls, or (where some node's ranks
    # have fewer cores than ranks) non-blocking ones that yield the CPU while they wait.
    # One buffer call (mpi4py's pickled ones run on a hidden duplicate that a ULFM revoke does not reach): the
    # minimum of (compiled, -crowded) is (all compiled, -(any crowded)).
    flags = array("i", [int(compiled is not None), -int(_WORLD.node_crowded)])
    comm.Allreduce(MPI.IN_PLACE, [flags, MPI.INT], op=MPI.MIN)
    agreed, yielding = flags[0] == 1, flags[1] == -1
    _WORLD.crowded[tuple(ranks)] = yielding
    if compiled is None or not agreed:
        return reference
    native.start_watchdog(compiled)
    spec = compiled.Spec(
        backend_name=BACKEND_NAME,
        who=reference._who(),
        desc=reference._desc,
        name=name,
        ranks=ranks,
        timeout=timeout,
        ring_bytes=ring_min_bytes(compiled=True),
        ring_tag=COMPILED_TAG,
        ring_segment=SEGMENT,
        yielding=yielding,
        survivors=_WORLD.contract.shrinks,
    )
    make = compiled.make_group if group else compiled.make_backend
    return make(comm=comm.handle, rank=comm.rank, size=comm.size, fallback=reference, spec=spec)
