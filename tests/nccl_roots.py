"""Which ranks of a torch 2.13 nccl group make a unique id: the model the unit and MPI tiers check hpcdist against."""

from __future__ import annotations


def nccl_roots(world: int, per_root: int) -> list[int]:
    """The ranks that make a unique id for a nccl group of `world` ranks: rank 0 alone up to `per_root` ranks
    (ncclCommInitRank), else ceil(world / per_root) roots spread as NCCL's user guide spreads them ("Creating a
    communicator using multiple ncclUniqueIds", its rankHasRoot): the first world % roots serve one rank more."""
    if world <= per_root:
        return [0]
    count = -(-world // per_root)
    base, extra = divmod(world, count)
    return [i * (base + 1) if i < extra else extra * (base + 1) + (i - extra) * base for i in range(count)]
