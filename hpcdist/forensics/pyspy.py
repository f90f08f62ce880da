"""The stacks of a rank that cannot answer (its main thread holds the GIL in C code), read by py-spy from outside.

Optional: used when py-spy is installed (`pip install py-spy`), for ranks on this host only. A rank's process
is found among this process's siblings (the ranks one MPI daemon started on this host) by the rank variable its
launcher set. py-spy reads the process's memory through ptrace, which a container may forbid.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from .stacks import Stacks, frame, normalised

__all__ = ["fill", "parse", "spy"]

_THREAD = re.compile(r'^Thread (\S+) \(([^)]*)\): "(.*)"$')
_FRAME = re.compile(r"^    (\S.*) \((.*):(\d+)\)$")
_RANK_VARIABLES = (b"OMPI_COMM_WORLD_RANK", b"PMI_RANK", b"PMIX_RANK")
_SECONDS = 10.0  # for one py-spy dump
_MOST = 16  # ranks read at most: a report of 64 ranks a host waits for 16 dumps, 8 at a time, not 64 in turn
_AT_ONCE = 8


def fill(found: dict[int, Stacks], missing: Sequence[int]) -> list[int]:
    """Add the stacks py-spy reads of the ranks that did not answer to `found`; the ranks still without stacks."""
    found.update(spy(missing))
    return [rank for rank in missing if rank not in found]


def spy(ranks: Sequence[int]) -> dict[int, Stacks]:
    """The stacks py-spy reads of the first _MOST of those `ranks` that run on this host, _AT_ONCE at a time; none
    without py-spy."""
    import shutil  # loaded by a hang's report alone, as proctree (subprocess)
    from concurrent.futures import ThreadPoolExecutor

    from .. import proctree

    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    tool = beside if os.access(beside, os.X_OK) else shutil.which("py-spy")
    if tool is None or not ranks:
        return {}
    pids = _siblings_by_rank()
    here = [rank for rank in ranks if rank in pids][:_MOST]
    with ThreadPoolExecutor(_AT_ONCE) as pool:
        dumps = pool.map(lambda rank: proctree.capture([tool, "dump", "--pid", str(pids[rank])], _SECONDS), here)
        return {rank: parse(out) for rank, (status, out, _) in zip(here, dumps, strict=True) if status == 0}


def parse(text: str) -> Stacks:
    """py-spy's dump as Stacks; each thread's name says what py-spy saw, e.g. 'MainThread [py-spy: active+gil]'."""
    threads: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        thread = _THREAD.match(line)
        row = _FRAME.match(line)
        if thread:
            threads.append((f"{thread.group(3)} [py-spy: {thread.group(2)}]", []))
        elif row and threads:
            threads[-1][1].append(frame(row.group(2), row.group(3), row.group(1)))
    return normalised(threads)


def _siblings_by_rank() -> dict[int, int]:
    """rank -> pid of this process's siblings that an MPI launcher started (their rank from their environment)."""
    from .. import proctree

    found = {}
    for sibling in proctree.children().get(os.getppid(), []):
        environ = proctree.environ(sibling)
        if environ is None:
            continue
        rank = next((environ[name] for name in _RANK_VARIABLES if name in environ), b"")
        if rank.isdigit():
            found[int(rank)] = sibling
    return found
