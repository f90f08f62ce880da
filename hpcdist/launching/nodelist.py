"""Slurm nodelists (`node[01-04],gpu7`) and the current allocation's hosts with their slots (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import UsageError
from ..hosts import HOST_NAME, HostSlots
from ..values import MAX_COUNT, slurm_counts

__all__ = ["allocation_hosts", "collect_nodelist", "expand_nodelist"]


def expand_nodelist(value: str, what: str = "--nodelist") -> list[str]:
    """Host names of a Slurm nodelist such as `node[01-04],gpu7` (python-hostlist), else UsageError."""
    import hostlist

    try:
        hosts = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as exc:
        raise UsageError(f"{what} {value!r} is not a valid Slurm nodelist ({exc}); e.g. 'node[01-04],gpu7'") from None
    bad = [h for h in hosts if not HOST_NAME.match(h) or "@" in h]  # Slurm's node names carry no user@
    if not hosts or bad:
        raise UsageError(
            f"{what} {value!r}: {bad[0] if bad else 'no hosts'!r} is not a host name; e.g. 'node[01-04],gpu7'"
        )
    return hosts


def collect_nodelist(hosts: Sequence[str]) -> str:
    """The Slurm nodelist of `hosts`, sorted and folded into ranges (`n2,n1,n3` -> `n[1-3]`)."""
    import hostlist

    return str(hostlist.collect_hostlist(list(hosts)))


def allocation_hosts(environ: Mapping[str, str], slots: int | None = None) -> tuple[HostSlots, ...]:
    """The current allocation's hosts: SLURM_JOB_NODELIST with SLURM_TASKS_PER_NODE (or `slots` each)."""
    nodelist = environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise UsageError(
            "no hosts given and not inside a Slurm allocation (SLURM_JOB_NODELIST is unset); "
            "give --hosts a,b or --nodelist 'node[01-04]'"
        )
    hosts = expand_nodelist(nodelist, "SLURM_JOB_NODELIST")
    if slots is not None:
        return tuple(HostSlots(h, slots) for h in hosts)
    tasks = environ.get("SLURM_TASKS_PER_NODE")
    if not tasks:
        raise UsageError("SLURM_TASKS_PER_NODE is unset, so the slots per node are unknown; give --slots N")
    try:
        runs = slurm_counts(tasks, "SLURM_TASKS_PER_NODE", len(hosts))
    except UsageError as exc:
        raise UsageError(f"{exc}; or give --slots N") from None
    counts = [count for count, repeat in runs for _ in range(repeat)]  # at most len(hosts) entries
    if len(counts) != len(hosts) or not all(1 <= n <= MAX_COUNT for n in counts):
        raise UsageError(
            f"SLURM_TASKS_PER_NODE={tasks!r} does not match the {len(hosts)} nodes of "
            f"SLURM_JOB_NODELIST={nodelist!r}; give --slots N instead"
        )
    return tuple(HostSlots(h, n) for h, n in zip(hosts, counts, strict=True))
