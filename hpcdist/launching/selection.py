"""`--include` / `--exclude` in DeepSpeed's syntax (`host1@host2:0,2`) over a host list (pure).

As DeepSpeed's `parse_resource_filter`: `@` separates hosts, `HOST:A,B` names slot indices of that host (0 is
its first slot), a bare `HOST` all of them; a host or slot named twice counts once; include keeps what it names,
exclude drops it, hosts keep the host list's order and a host left with no slot is dropped; the two options
exclude each other; a host or slot not in the list is an error. Beyond DeepSpeed: a host may be a Slurm range
(`n[1-4]`, `n[1-4]:0`); naming a host both whole and by slots, an empty part (`a@@b`, `a:`) or a selection that
leaves nothing is a clear error too.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import UsageError
from ..hosts import HOST_NAME, HostSlots
from ..records import record
from ..schedulers.slurm import collect_nodelist, expand_nodelist
from ..values import parse_whole

__all__ = ["Selected", "parse_selection", "select_hosts", "select_nodes", "selection_option"]

_FORM = "use HOST[:SLOT,...] parts joined by '@', e.g. node1@node2:0,2"
Filter = dict[str, tuple[int, ...] | None]  # host -> slot indices, None = the whole host


@record(frozen=True)
class Selected:
    """A selected host: its slots as mpirun sees them, and which of its slot indices (None = all of them)."""

    host: HostSlots
    indices: tuple[int, ...] | None = None


def selection_option(include: str | None, exclude: str | None) -> tuple[str, str] | None:
    """('--include', text) or ('--exclude', text), None when neither is given; both at once is an error."""
    if include is not None and exclude is not None:
        raise UsageError(
            "give either --include or --exclude, not both (as in DeepSpeed); "
            "name what to keep with --include, or what to drop with --exclude"
        )
    if include is not None:
        return "--include", include
    return None if exclude is None else ("--exclude", exclude)


def parse_selection(text: str, option: str) -> Filter:
    """`host1@host2:0,2` -> {'host1': None, 'host2': (0, 2)}, in the order given; UsageError on a bad part."""
    where = f"{option} {text!r}"
    if not text.strip():
        raise UsageError(f"{where}: no host named; {_FORM}")
    chosen: Filter = {}
    for part in text.split("@"):
        name, colon, slot_text = part.partition(":")
        if not part.strip():
            raise UsageError(f"{where}: an empty host between two '@' (or at an end); {_FORM}")
        if colon and not slot_text.strip():
            raise UsageError(
                f"{where}: {part!r} has no slot after ':'; give slot indices (e.g. {name}:0,1) or drop ':'"
            )
        for host in _hosts(name, where):
            indices = _slots(slot_text, host, where) if colon else None
            if host in chosen and (chosen[host] is None) != (indices is None):
                raise UsageError(
                    f"{where}: host {host!r} is named both whole and by slots; name it once, either as {host!r} "
                    f"or as {host}:SLOTS"
                )
            seen = chosen.get(host)
            chosen[host] = None if indices is None else tuple(sorted({*(seen or ()), *indices}))
    return chosen


def select_hosts(
    hosts: Sequence[HostSlots], include: str | None, exclude: str | None, source: str
) -> tuple[Selected, ...]:
    """The hosts and slots of `hosts` (from `source`, e.g. '-H a:4') that the selection keeps, in their order.

    Raises:
        UsageError: both options, a bad part, a host or slot not in `hosts`, or nothing left.
    """
    picked = selection_option(include, exclude)
    if picked is None:
        return tuple(Selected(h) for h in hosts)
    option, text = picked
    chosen = parse_selection(text, option)
    known = {h.host: h for h in hosts}
    for host, indices in chosen.items():
        if host not in known:
            listed = ", ".join(list(known)[:8]) + (", ..." if len(known) > 8 else "")
            raise UsageError(
                f"{option} {text!r}: host {host!r} is not in {source} (hosts: {listed}); name one of those hosts"
            )
        slots = known[host].slots
        for index in indices or ():
            if index >= slots:
                raise UsageError(
                    f"{option} {text!r}: {host} has no slot {index}; its {slots} slot(s) are numbered 0 to "
                    f"{slots - 1} in {source}"
                )
    result = []
    for h in hosts:
        named: Sequence[int] = () if h.host not in chosen else chosen[h.host] or range(h.slots)
        kept = named if option == "--include" else [i for i in range(h.slots) if i not in named]
        result.append(_selected(h, tuple(kept)))
    left = tuple(s for s in result if s is not None)
    if not left:
        raise UsageError(f"{option} {text!r} leaves no host of {source}; keep at least one host or slot")
    return left


def select_nodes(
    nodelist: str | None, include: str | None, exclude: str | None, nodes: int | None
) -> tuple[str | None, str | None, int]:
    """Slurm's view of a selection: (--nodelist, --exclude, --nodes), whole nodes only.

    Without a `nodelist`, --include becomes the nodelist and --exclude Slurm's --exclude; with one, the
    selection filters it and only the nodelist remains. An included set of nodes is the whole job: `nodes`
    (default: their count) must match it, or Slurm would add other nodes or refuse.

    Raises:
        UsageError: both options, a bad part, a slot selection, a node not in `nodelist`, nothing left, or a
            node count that differs from the included nodes.
    """
    picked = selection_option(include, exclude)
    if picked is None:
        return nodelist, None, nodes or 1
    option, text = picked
    chosen = parse_selection(text, option)
    sliced = [host for host, indices in chosen.items() if indices is not None]
    if sliced:
        raise UsageError(
            f"{option} {text!r} selects slots of {sliced[0]!r}; Slurm allocates whole nodes, so name nodes only "
            f"(e.g. {option} {sliced[0]}) and pick slots inside the job with `hpcdist mpirun {option} ...`"
        )
    if nodelist is None and option == "--exclude":
        return None, collect_nodelist(list(chosen)), nodes or 1
    if nodelist is None:
        kept = list(chosen)
    else:
        hosts = [HostSlots(h, 1) for h in expand_nodelist(nodelist)]
        kept = [s.host.host for s in select_hosts(hosts, include, exclude, f"--nodelist {nodelist!r}")]
    if nodes is not None and nodes != len(kept):
        raise UsageError(
            f"--nodes {nodes} does not match the {len(kept)} node(s) {option} {text!r} leaves "
            f"({collect_nodelist(kept)}); Slurm would add other nodes or refuse: give --nodes {len(kept)} or drop it"
        )
    return collect_nodelist(kept), None, len(kept)


def _hosts(name: str, where: str) -> list[str]:
    """The host names of one part: a name, or a Slurm range such as n[1-4]."""
    if "[" in name:
        return expand_nodelist(name, where + ": host range")
    if "," in name:
        raise UsageError(f"{where}: {name!r} lists several hosts with ','; join hosts with '@' instead ({_FORM})")
    if not HOST_NAME.match(name):
        raise UsageError(f"{where}: {name!r} is not a host name; {_FORM}")
    return [name]


def _slots(text: str, host: str, where: str) -> tuple[int, ...]:
    """Slot indices `0,2` of `host`: whole numbers from 0, each given once or more."""
    indices = []
    for item in text.split(","):
        index = parse_whole(item) if item == item.strip() else None
        if index is None:
            raise UsageError(
                f"{where}: slot {item!r} of {host} is not a slot index; give whole numbers from 0, e.g. {host}:0,2"
            )
        indices.append(index)
    return tuple(indices)


def _selected(host: HostSlots, kept: tuple[int, ...]) -> Selected | None:
    """`host` cut down to the slot indices `kept`; None when none is kept."""
    if not kept:
        return None
    if len(kept) == host.slots:
        return Selected(host)
    return Selected(HostSlots(host.host, len(kept)), kept)
