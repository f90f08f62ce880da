"""The seed notes' one-to-many program: rank 0 sends a tensor to every other rank with send/recv."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..runtime.bootstrap import Session

__all__ = ["run"]


def expected(dst: int) -> float:
    """The value rank 0 sends to rank `dst`: different per receiver, so a mix-up is caught."""
    return 100.0 + dst


def run(session: Session) -> str | None:
    """Send from rank 0 to each rank in turn; each receiver checks the value it got."""
    rank, size = session.rank, session.world_size
    if rank == 0:
        for dst in range(1, size):
            dist.send(torch.full((1,), expected(dst), device=session.device), dst=dst)
        print(f"rank 0: sent tensor to ranks 1..{size - 1}" if size > 1 else "rank 0: alone, nothing to send")
        return None
    tensor = torch.zeros(1, device=session.device)
    dist.recv(tensor, src=0)
    got = tensor.item()
    print(f"rank {rank}: received {got:g} from rank 0")
    return None if got == expected(rank) else f"rank {rank} received {got:g} from rank 0, expected {expected(rank):g}"
