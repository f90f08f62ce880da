"""Whether a group's ranks would starve each other of cores: the rule on a node's affinity masks, and its exchange.

A rank that waits in a busy-polling MPI call keeps its core; that is harmless while every rank of a node has a
core of its own, and ruinous where two ranks must take turns on one (raw Allreduce of 16 B took 5 ms at 4 ranks
on 2 cores). So a node is *crowded* when its ranks cannot each be given a distinct core from their own affinity
masks: by Hall's theorem, when some set of its ranks has fewer cores in the union of their masks than ranks.
That covers more ranks than cores, and two ranks pinned to one core, while ranks that all share every core
(`--bind-to none`, as many ranks as cores) are not crowded: the kernel spreads them. Threads a rank starts
itself (torch's intra-op pool) are not counted: they do not run while it waits in MPI.

Every rank of the job on the node counts, not only a group's: two 2-rank groups on one 2-core node starve each
other as one 4-rank group would. So the masks are exchanged once per process, over the whole job (the mpi
backend does it as it duplicates COMM_WORLD, at its first group), and a group yields where any of its ranks' node
is crowded.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from mpi4py import MPI

__all__ = ["crowded", "mask_cores", "node_crowded", "own_mask"]


def own_mask() -> int:
    """This process's affinity mask, bit i set where it may run on CPU i."""
    return sum(1 << cpu for cpu in os.sched_getaffinity(0))


def mask_cores(mask: int) -> list[int]:
    """The CPUs a bitmask names, ascending."""
    return [cpu for cpu in range(mask.bit_length()) if mask >> cpu & 1]


def crowded(masks: Sequence[Collection[int]]) -> bool:
    """Whether these ranks of one node (each given as the CPUs it may run on) cannot each have a core of their own.

    A bipartite matching of ranks to CPUs, each rank first taking a free CPU of its mask, else freeing one along
    an augmenting path (Kuhn's algorithm): the node is crowded exactly when some rank is left without a CPU.
    """
    if len(masks) > len(set().union(*masks)):
        return True
    holder: dict[int, int] = {}  # CPU -> the rank it is given to
    for rank, mask in enumerate(masks):
        free = next((cpu for cpu in mask if cpu not in holder), None)
        if free is not None:
            holder[free] = rank
        elif not _augment(rank, masks, holder):
            return True
    return False


def _augment(rank: int, masks: Sequence[Collection[int]], holder: dict[int, int]) -> bool:
    """Give `rank` a CPU by moving other ranks along an alternating path (iterative depth-first search)."""
    seen: set[int] = set()
    came_from: dict[int, int] = {}  # CPU -> the CPU whose holder reached it (a path's trail back to `rank`)
    stack = [(iter(masks[rank]), -1)]  # the CPUs of a rank on the path still to try, and the CPU it holds
    while stack:
        cpus, via = stack[-1]
        cpu = next((c for c in cpus if c not in seen), None)
        if cpu is None:
            stack.pop()
            continue
        seen.add(cpu)
        came_from[cpu] = via
        if cpu not in holder:  # free: shift every rank on the path one CPU along
            while cpu != -1:
                previous = came_from[cpu]
                holder[cpu] = rank if previous == -1 else holder[previous]
                cpu = previous
            return True
        stack.append((iter(masks[holder[cpu]]), cpu))
    return False


def node_crowded(comm: MPI.Intracomm) -> bool:
    """Whether this rank's node is crowded, by the masks of every rank of `comm` on it (collective over `comm`).

    The masks are exchanged over the node's shared-memory communicator, split from `comm` and freed again.
    """
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        masks = node.allgather(own_mask())
    finally:
        node.Free()
    return crowded([mask_cores(mask) for mask in masks])
