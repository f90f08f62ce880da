"""torch's TCPStore beside hpcdist's store over MPI, side by side in one MPI job; rank 0 prints one line per round.

    mpiexec -n 64 python tests/store_bench.py [ROUNDS] [OPS]

Each round makes each store in turn (the order alternates), then times, as the slowest rank saw it: making it (rank 0
binds or starts serving, every rank connects), OPS rounds of set/get/add per rank, torch's store-based barrier, and
init_process_group on hpcdist's mpi backend with that store plus one barrier. Numbers go to
docs/measurements/scale.md by hand.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from mpi4py import MPI

from hpcdist.mpi_backend import BACKEND_NAME, register
from hpcdist.runtime.mpistore import MPIStore

COMM = MPI.COMM_WORLD
TIMEOUT = timedelta(seconds=600)


def tcp_store() -> Any:
    """Rank 0 binds torch's TCPStore on a free port and broadcasts it; the others connect."""
    if COMM.rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, COMM.size, True, TIMEOUT, wait_for_workers=False)
        COMM.bcast(store.port)
        return store
    return dist.TCPStore("127.0.0.1", COMM.bcast(None), COMM.size, False, TIMEOUT)


def mpi_store() -> Any:
    """hpcdist's store over MPI."""
    return MPIStore(COMM, TIMEOUT.total_seconds())


def slowest(step: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds the slowest rank spent in `step`, all ranks starting together, and this rank's result."""
    COMM.Barrier()
    began = time.perf_counter()
    result = step()
    return COMM.allreduce(time.perf_counter() - began, op=MPI.MAX), result


def measure(kind: str, make: Callable[[], Any], ops: int, tag: str) -> dict[str, Any]:
    """One store's four timings."""
    made, store = slowest(make)
    after = (COMM.rank + 1) % COMM.size

    def traffic() -> None:
        for i in range(ops):
            store.set(f"{tag}/{COMM.rank}/{i}", b"x" * 64)
            store.get(f"{tag}/{after}/{i}")
            store.add(f"{tag}/count", 1)

    ops_s, _ = slowest(traffic)
    barrier_s, _ = slowest(
        lambda: dist.distributed_c10d._store_based_barrier(COMM.rank, store, f"{tag}-barrier", COMM.size, TIMEOUT)  # type: ignore[arg-type]
    )

    def init() -> None:
        dist.init_process_group(BACKEND_NAME, store=dist.PrefixStore(tag, store), rank=COMM.rank, world_size=COMM.size)
        dist.barrier()

    init_s, _ = slowest(init)
    dist.destroy_process_group()
    if kind == "mpi":
        store.close()
    COMM.Barrier()
    return {"store": kind, "make_s": made, f"{ops}x3_ops_s": ops_s, "barrier_s": barrier_s, "init_s": init_s}


def main() -> None:
    """ROUNDS rounds of both stores, alternating which goes first."""
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ops = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    register()
    kinds = [("tcp", tcp_store), ("mpi", mpi_store)]
    for number in range(rounds):
        for kind, make in kinds if number % 2 == 0 else kinds[::-1]:
            row = measure(kind, make, ops, f"r{number}{kind}")
            if COMM.rank == 0:
                print(json.dumps({"ranks": COMM.size, "round": number, **row}), flush=True)


if __name__ == "__main__":
    main()
