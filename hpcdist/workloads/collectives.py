"""Collective workloads from the seed notes: broadcast, all_reduce (also on a subgroup), reduce, gather."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..runtime.bootstrap import Session

__all__ = ["allreduce", "broadcast", "gather", "reduce"]


def _contribution(rank: int, session: Session) -> torch.Tensor:
    """Rank r contributes (r+1) * [1, 2, 3], like the seeds' [1,2,3] and [4,5,6]."""
    return torch.tensor([1.0, 2.0, 3.0], device=session.device) * (rank + 1)


def _sum_of_contributions(ranks: list[int], session: Session) -> torch.Tensor:
    """What SUM over the given ranks' contributions must give."""
    return torch.tensor([1.0, 2.0, 3.0], device=session.device) * sum(r + 1 for r in ranks)


def _check(name: str, rank: int, got: torch.Tensor, want: torch.Tensor) -> str | None:
    """Print this rank's result line and return a problem if it is wrong."""
    print(f"rank {rank}: {name} -> {got.tolist()}")
    return None if torch.equal(got, want) else f"rank {rank}: {name} gave {got.tolist()}, expected {want.tolist()}"


def broadcast(session: Session) -> str | None:
    """Rank 0 broadcasts [42, 43, 44, 45]; every rank checks it."""
    want = torch.arange(42.0, 46.0, device=session.device)
    tensor = want.clone() if session.rank == 0 else torch.zeros(4, device=session.device)
    dist.broadcast(tensor, src=0)
    return _check("broadcast from rank 0", session.rank, tensor, want)


def allreduce(session: Session) -> str | None:
    """SUM over all ranks, then over the subgroup of ranks 0 and 1 (the seeds' new_group([0, 1]))."""
    rank, size = session.rank, session.world_size
    tensor = _contribution(rank, session)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    problem = _check("all_reduce SUM over all ranks", rank, tensor, _sum_of_contributions(list(range(size)), session))
    members = list(range(min(2, size)))
    group = dist.new_group(members)  # every rank must call new_group, members or not
    if rank in members:
        tensor = _contribution(rank, session)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
        problem = problem or _check(
            f"all_reduce SUM over new_group({members})", rank, tensor, _sum_of_contributions(members, session)
        )
    dist.destroy_process_group(group)
    return problem


def reduce(session: Session) -> str | None:
    """SUM onto rank 0; rank 0 checks the total."""
    rank, size = session.rank, session.world_size
    tensor = _contribution(rank, session)
    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)
    if rank != 0:
        print(f"rank {rank}: reduce to rank 0 sent {_contribution(rank, session).tolist()}")
        return None
    return _check("reduce SUM onto rank 0", rank, tensor, _sum_of_contributions(list(range(size)), session))


def gather(session: Session) -> str | None:
    """Gather every rank's contribution on rank 0, in rank order."""
    rank, size = session.rank, session.world_size
    tensor = _contribution(rank, session)
    parts = [torch.zeros(3, device=session.device) for _ in range(size)] if rank == 0 else None
    dist.gather(tensor, gather_list=parts, dst=0)
    if parts is None:
        print(f"rank {rank}: gather to rank 0 sent {tensor.tolist()}")
        return None
    want = torch.stack([_contribution(r, session) for r in range(size)])
    return _check("gather onto rank 0", rank, torch.stack(parts), want)
