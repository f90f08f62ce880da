"""The seed notes' Ray example, `ray.get([compute.remote(i) for i in range(10)])`, as `hpcdist.map`."""

from __future__ import annotations

from ..bootstrap import Session
from ..taskmap import map as task_map

__all__ = ["compute", "run"]


def compute(x: int) -> int:
    """The seeds' remote function."""
    return x**2


def run(session: Session) -> str | None:
    """Square range(10) across the ranks; every rank shows what it computed, rank 0 checks the results."""
    mine: list[int] = []

    def tracked(x: int) -> int:
        mine.append(x)
        return compute(x)

    results = task_map(tracked, range(10), timeout=session.timeout)
    print(f"rank {session.rank}: computed items {mine}")
    if session.rank != 0:
        return None
    want = [compute(x) for x in range(10)]
    print(f"rank 0: map(x**2, range(10)) -> {results}")
    return None if results == want else f"rank 0: map(x**2, range(10)) gave {results}, expected {want}"
