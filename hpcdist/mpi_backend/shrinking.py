"""torch's `dist.shrink_group` on this backend, over ULFM: the communicator of exactly the ranks kept.

    try:
        dist.all_reduce(t)
    except dist.DistError:                       # rank 2 died (RanksLostError on the Python backend)
        world = dist.shrink_group([2])           # revoke, MPI_Comm_shrink, the group of the ranks kept

ULFM's MPI_Comm_shrink drops every failed process, not a chosen list, and waits for every live one: a rank in
`ranks_to_exclude` must have failed (or exited), and every rank that failed must be in it. Both are checked, each
with its own error, before a group is made. torch's shrink path registers the new backend on a ProcessGroup it
makes itself, which a Python process group (this backend without its compiled part) cannot be: `install` gives that
path the rule torch's own group creation has for Python process groups, which stand for themselves.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch
import torch.distributed as dist
from mpi4py import MPI

from ..waits import Backoff, poll_until

__all__ = ["install", "survivors"]

_LEARN = 5.0  # seconds a rank waits to learn that the ranks it excludes failed (ULFM tells every process in time)


def survivors(comms: tuple[MPI.Intracomm, ...], excluded: list[int], who: str, desc: str) -> MPI.Intracomm:
    """Revoke `comms` (the group's, its own first), shrink the first to its live ranks, and return that communicator
    (errors returned): the ranks of the group not in `excluded` (group ranks), in their order.

    Raises:
        ValueError: a rank in `excluded` still runs after `_LEARN` s.
        RuntimeError: a rank that failed is missing from `excluded`.
    """
    comm, out = comms[0], set(excluded)
    deadline = time.monotonic() + _LEARN
    with contextlib.suppress(ValueError):
        poll_until(lambda: out <= _failed(comm), deadline, str, backoff=Backoff(1e-3, 0.05), error=ValueError)
    alive = sorted(out - _failed(comm))
    if alive:
        raise ValueError(
            f"{who}: shrink_group({sorted(out)}) on {desc}: {_ranks(alive)} still running after {_LEARN:g} s; on the "
            "mpi backend a rank leaves a group by failing or exiting (ULFM's shrink keeps every live rank): end it "
            "first, or make a group of the others with dist.new_group"
        )
    for each in comms:
        with contextlib.suppress(MPI.Exception):  # revoked by another rank already
            each.Revoke()
    shrunk: MPI.Intracomm = comm.Shrink()  # type: ignore[assignment]  # an Intracomm's shrink is one
    failed = set(range(comm.size)) - set(_translate(shrunk, comm))
    missing = sorted(failed - out)
    if missing:
        shrunk.Free()
        raise RuntimeError(
            f"{who}: shrink_group({sorted(out)}) on {desc}: {_ranks(missing)} failed too; MPI's shrink drops every "
            f"failed rank: call shrink_group({sorted(out | failed)})"
        )
    shrunk.Set_errhandler(MPI.ERRORS_RETURN)
    return shrunk


def install() -> None:
    """Have torch's shrink path make the new group as torch's group creation does for this backend (idempotent;
    nothing where this torch has no shrink path): a Python process group stands for itself, and the compiled backend
    is registered as the custom backend it is. torch's own path registers any CPU backend as gloo's, and DDP's logger
    then reads it as gloo's: a segmentation fault in the first DistributedDataParallel on the shrunk group."""
    c10d = dist.distributed_c10d
    make = getattr(c10d, "_create_shrunk_process_group", None)
    if make is None or getattr(make, "_hpcdist_original", None) is not None:
        return

    def create(new_backend: Any, remaining_ranks: list[int], metadata: dict[str, Any], is_default_group: bool) -> Any:
        name = metadata["new_group_name"]
        group = new_backend
        if not isinstance(new_backend, dist.ProcessGroup):
            store = dist.PrefixStore(f"{name}/", metadata["store"].clone())  # as torch's path, and its split
            group = dist.ProcessGroup(store, new_backend.rank(), new_backend.size())
            custom = dist.ProcessGroup.BackendType.CUSTOM
            group._register_backend(torch.device("cpu"), custom, new_backend)
            group._set_default_backend(custom)
        group._set_group_name(name)
        group._set_group_desc("default:shrunken" if is_default_group else f"{metadata['original_group_name']}:shrunk")
        return group

    create._hpcdist_original = make  # type: ignore[attr-defined]
    c10d._create_shrunk_process_group = create


def _failed(comm: MPI.Intracomm) -> set[int]:
    """The ranks of `comm` this process knows to have failed."""
    group, mine = comm.Get_failed(), comm.Get_group()
    try:
        return set(MPI.Group.Translate_ranks(group, list(range(group.size)), mine)) if group.size else set()
    finally:
        group.Free()
        mine.Free()


def _translate(part: MPI.Intracomm, whole: MPI.Intracomm) -> list[int]:
    """The rank in `whole` of each rank of `part`."""
    one, other = part.Get_group(), whole.Get_group()
    try:
        return list(MPI.Group.Translate_ranks(one, list(range(one.size)), other))
    finally:
        one.Free()
        other.Free()


def _ranks(ranks: list[int]) -> str:
    """`rank 2` or `ranks 1, 2`."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
