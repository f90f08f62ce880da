"""Parse and format MPI hostfiles and `-H` host lists, and check `-np` against their slots and this machine's CPUs."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from .. import families
from ..errors import UsageError
from ..hosts import HOST_NAME, HostSlots, hosts_text
from ..records import replace
from ..values import MAX_COUNT, parse_whole
from .world import World

__all__ = [
    "MOST_RANKS_A_CPU",
    "check_crowding",
    "check_np",
    "format_hostfile",
    "parse_hostfile",
    "parse_hosts_arg",
    "read_hostfile_text",
    "total_slots",
]

MOST_RANKS_A_CPU = 4  # ranks for each CPU of this machine that -np may ask for without --oversubscribe
_FORMS = "expected 'HOST slots=N [max_slots=M]' or 'HOST:N'"
_H_FORM = "expected -H HOST[:N][,HOST[:N]...], e.g. -H node1:4,node2:4"
# Open MPI's hostfile keywords (prrte's hostfile_lex.l): `count` and `cpu` mean slots; the cap has twelve spellings
_KEYS = {"slots": "slots", "count": "slots", "cpu": "slots"} | {
    key: "max_slots"
    for base in ("slots", "cpu", "count")
    for sep in "_-"
    for key in (f"max{sep}{base}", f"{base}{sep}max")
}
_EQUALS = re.compile(r"\s*=\s*")  # Open MPI takes `slots = 4` as `slots=4`


def parse_hostfile(text: str, source: str) -> tuple[HostSlots, ...]:
    """Parse Open MPI (`host slots=N max_slots=M`) or MPICH (`host:N`) hostfile text."""
    hosts: dict[str, HostSlots] = {}
    first_line: dict[str, int] = {}
    for lineno, raw in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        line = _EQUALS.sub("=", raw.split("#", 1)[0].strip())
        if not line:
            continue
        where = f"{source}:{lineno}"
        entry, explicit = _parse_line(line, where)
        seen = hosts.get(entry.host)
        if seen is None:
            hosts[entry.host] = entry
            first_line[entry.host] = lineno
        elif explicit:
            # Open MPI 5 refuses a second slot count for one host ("multiple definitions").
            raise UsageError(
                f"{where}: host {entry.host!r} is already listed on line {first_line[entry.host]}; "
                f"Open MPI rejects a second slot count for the same host, so merge them into "
                f"one line '{entry.host} slots={seen.slots + entry.slots}'"
            )
        else:
            hosts[entry.host] = _add_bare_slot(seen, where, first_line[entry.host])
    if not hosts:
        raise UsageError(f"{source}: no hosts in hostfile; add lines like 'localhost slots=4'")
    return tuple(hosts.values())


def read_hostfile_text(path: str) -> str:
    """The text of the hostfile at `path` as it is (line ends and byte order mark kept), or a UsageError."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(
            f"cannot read hostfile {path!r} (from {os.getcwd()}): {reason}; give the path of a file with one "
            f"'HOST slots=N' line per host, list the hosts with -H HOST:N[,HOST:N], or leave both out to run "
            f"on this machine"
        ) from exc
    return text


def parse_hosts_arg(value: str) -> tuple[HostSlots, ...]:
    """Parse mpirun's `-H a:2,b:2` (a bare `a` is 1 slot; repeated hosts add up, as in mpirun)."""
    hosts: dict[str, HostSlots] = {}
    for item in value.split(","):
        item = item.strip()
        host, colon, count = item.partition(":")
        if not HOST_NAME.match(host) or (colon and not count):
            raise UsageError(f"-H {value!r}: bad host entry {item!r}; {_H_FORM}")
        slots = _count(count, "slots", f"-H {value!r}", item) if colon else 1
        seen = hosts.get(host)
        hosts[host] = HostSlots(host, slots + (seen.slots if seen else 0))
    return tuple(hosts.values())


def total_slots(hosts: Iterable[HostSlots]) -> int:
    """Sum of slots over `hosts`."""
    return sum(h.slots for h in hosts)


def format_hostfile(hosts: Iterable[HostSlots], style: str = "openmpi") -> str:
    """Render `hosts` one per line as the MPI family `style` reads them (Open MPI: `host slots=N [max_slots=M]`;
    MPICH and the other Hydras: `host:N`)."""
    if style not in families.names():
        raise UsageError(f"unknown hostfile style {style!r}; use one of {', '.join(families.names())}")
    return families.lookup(style).hostfile(tuple(hosts))


def check_np(
    np: int,
    hosts: Sequence[HostSlots],
    oversubscribe: bool,
    caller: str | None = None,
    job: tuple[str, str] | None = None,
) -> None:
    """Raise UsageError if `np` ranks do not fit on `hosts`; `caller` names the Python API that asked (None: CLI);
    `job`, for the hosts of a scheduler's job: (the job as a message names it, how to ask the scheduler for more)."""
    what = "-np" if caller is None else f"{caller}'s np="
    if np < 1:
        raise UsageError(f"{what} must be at least 1, got {np}")
    if np > MAX_COUNT:
        raise UsageError(f"{what} must be at most {MAX_COUNT} (MPI counts ranks in an int), got {np}")
    total = total_slots(hosts)
    if np > total and not oversubscribe and job is not None:
        asked, fix = (
            (f"-np {np}", "lower -np, pass --oversubscribe, or give --hostfile or -H")
            if caller is None
            else (f"{caller}'s np={np}", "lower np, or give the hosts in a hostfile")
        )
        listed = hosts_text(hosts)
        raise UsageError(f"{asked} is more than the {total} slots of {job[0]} ({listed}); {job[1]}; or {fix}")
    if np > total and not oversubscribe:
        if caller is None:
            raise UsageError(
                f"-np {np} is more than the {total} slots in the host list; pass --oversubscribe "
                f"or give the hosts more slots (e.g. 'node1 slots=8' in the hostfile or -H node1:8)"
            )
        raise UsageError(
            f"{caller}'s np={np} is more than the {total} slots in its hostfile; lower np, or give the hosts more "
            "slots (e.g. 'node1 slots=8' in the hostfile)"
        )
    # Open MPI never places more ranks on a host than its max_slots, even with --oversubscribe.
    if all(h.max_slots is not None for h in hosts):
        cap = sum(h.max_slots or 0 for h in hosts)
        if np > cap:
            raise UsageError(
                f"-np {np} is more than the {cap} max_slots in the host list, which "
                f"--oversubscribe cannot exceed; raise or remove max_slots in the hostfile"
            )


def _parse_line(line: str, where: str) -> tuple[HostSlots, bool]:
    """One comment-free hostfile line -> (entry, whether it states a slot count or cap)."""
    tokens = line.split()
    if len(tokens) == 1 and ":" in line:
        host, _, count = line.partition(":")
        if not HOST_NAME.match(host):
            raise UsageError(f"{where}: {_FORMS}, got {line!r}")
        return HostSlots(host, _count(count, "slots", where, line)), True
    if not HOST_NAME.match(tokens[0]):
        raise UsageError(f"{where}: {_FORMS}, got {line!r}")
    values: dict[str, int] = {}
    for token in tokens[1:]:
        key, eq, value = token.partition("=")
        if not eq:
            raise UsageError(f"{where}: {_FORMS}, got {line!r}")
        if key not in _KEYS:
            raise UsageError(f"{where}: unknown key {key!r} in {line!r}; {_FORMS}")
        name = _KEYS[key]
        if name in values:
            raise UsageError(f"{where}: {name} given twice in {line!r}; {_FORMS}")
        values[name] = _count(value, name, where, line)
    # A cap alone sets the slots too, as in Open MPI ('node1 max_slots=4' is 4 slots).
    entry = HostSlots(tokens[0], values.get("slots", values.get("max_slots", 1)), values.get("max_slots"))
    if entry.max_slots is not None and entry.max_slots < entry.slots:
        raise UsageError(
            f"{where}: max_slots={entry.max_slots} is less than slots={entry.slots} "
            f"in {line!r}; raise max_slots or lower slots"
        )
    return entry, bool(values)


def _add_bare_slot(seen: HostSlots, where: str, first: int) -> HostSlots:
    """A repeated bare `host` line adds one slot, as Open MPI does."""
    grown = replace(seen, slots=seen.slots + 1)
    if grown.max_slots is not None and grown.slots > grown.max_slots:
        raise UsageError(
            f"{where}: repeating {seen.host!r} makes {grown.slots} slots, more than its "
            f"max_slots={grown.max_slots} from line {first}; raise max_slots or drop this line"
        )
    return grown


def _count(text: str, name: str, where: str, context: str) -> int:
    """Parse a slot count of at least 1, or raise UsageError naming `where`."""
    number = parse_whole(text) if text == text.strip() else None
    if number is None or number < 1:
        raise UsageError(f"{where}: {name} must be a whole number of at least 1, got {text!r} in {context!r}")
    if number > MAX_COUNT:
        raise UsageError(f"{where}: {name} must be at most {MAX_COUNT} (MPI counts ranks in an int), got {text!r}")
    return number


def check_crowding(np: int, oversubscribe: bool, world: World) -> str:
    """The line to say for `-np` beyond this machine's CPUs ("" for none, or with --oversubscribe); more than
    MOST_RANKS_A_CPU ranks for each CPU is refused unless --oversubscribe asks.

    Raises:
        UsageError: so many ranks here, without --oversubscribe (a typo's -np 64 on a laptop).
    """
    cpus = len(world.cpus)
    if world.here and not oversubscribe and np > MOST_RANKS_A_CPU * cpus:
        raise UsageError(
            f"-np {np} is {np / cpus:.3g} ranks for each of the {cpus} CPUs this process may run on; lower -np, give "
            "hosts with --hostfile or -H, or pass --oversubscribe to run that many here anyway"
        )
    if not world.here or oversubscribe or np <= cpus:
        return ""
    return (
        f"hpcdist: -np {np} is more ranks than the {cpus} CPUs this process may run on, so they share them and each "
        "runs slower (--oversubscribe runs them here without this line)"
    )
