"""torch's fetch of nccl's root ids, on the TCPStore and on the store over MPI; rank 0 prints one line per count.

    mpiexec -n 4 python tests/nccl_ids_bench.py [REPEATS]

For 1, 79 and 782 roots (nccl groups of up to 128, 10,000 and 100,000 ranks at 128 ranks per root), rank 0 sets that
many 128-byte ids under `UniqueNCCLID:<i>` through torch's PrefixStore, and every rank then times REPEATS `multi_get`s
of all of them at once, as ProcessGroupNCCL::allgatherUniqueNCCLIDs makes one; the line gives the slowest rank's
mean. Numbers go to docs/measurements/scale.md by hand.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch.distributed as dist
from store_bench import COMM, mpi_store, tcp_store

ROOTS = (1, 79, 782)


def fetch_ms(store: Any, roots: int, repeats: int) -> float:
    """The slowest rank's mean milliseconds for one multi_get of `roots` ids, every rank asking at once."""
    keys = [f"UniqueNCCLID:{i}" for i in range(roots)]
    group_store = dist.PrefixStore(f"ids{roots}", store)
    if COMM.rank == 0:
        group_store.multi_set(keys, [os.urandom(128) for _ in keys])  # type: ignore[attr-defined]
    group_store.multi_get(keys)  # every key is there: no wait below
    COMM.Barrier()
    began = time.perf_counter()
    for _ in range(repeats):
        group_store.multi_get(keys)
    return float(COMM.allreduce((time.perf_counter() - began) / repeats * 1e3, op=max))


def main() -> None:
    """Both stores, each count of roots."""
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    for kind, make in (("tcp", tcp_store), ("mpi", mpi_store)):
        store = make()
        for roots in ROOTS:
            ms = fetch_ms(store, roots, repeats)
            if COMM.rank == 0:
                print(json.dumps({"ranks": COMM.size, "store": kind, "roots": roots, "multi_get_ms": ms}), flush=True)
        if kind == "mpi":
            store.close()
        COMM.Barrier()


if __name__ == "__main__":
    main()
