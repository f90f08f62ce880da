"""The events a rank tells its launcher in band (a leaf): one typed class per kind (`Started`, `Ready`, `Failed`,
`Finished`, `Hang`, `Done`, `Vanished`, `Beat`, `Usage`), written as one control line on the rank's stderr by
`encode` and read back by `parse_event`, the one parser. The line carries the launch's random token
(`contract.new_token`), so no program output passes for one.
"""

from __future__ import annotations

import contextlib
import re
import typing
from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import quote, unquote

from . import records
from .ranklist import rank_ranges
from .records import record
from .values import parse_ranks

__all__ = [
    "EVENTS",
    "Beat",
    "Done",
    "Event",
    "Failed",
    "Finished",
    "Hang",
    "Ready",
    "Started",
    "Usage",
    "Vanished",
    "encode",
    "might_start_event",
    "parse_event",
]

_MARK = "@@hpcdist:"
_LINE = re.compile(r"@@hpcdist:(?P<token>[0-9a-f]{16}):(?P<kind>[a-z]+):(?P<rank>[0-9]{1,10}):(?P<detail>[^\n]*)")


@record(frozen=True)
class Event:
    """Something a rank tells its launcher; each kind is a subclass with its own fields."""

    kind: ClassVar[str] = ""
    rank: int


@record(frozen=True)
class Started(Event):
    """Every rank of the job is past MPI_Init: rank 0 says so once, when the rendezvous's first collective over
    COMM_WORLD, to which every rank contributes, has completed."""

    kind: ClassVar[str] = "started"


@record(frozen=True)
class Ready(Event):
    """The rank's process group is initialised."""

    kind: ClassVar[str] = "ready"
    host: str = ""
    world: int | None = None  # the world size as the rank sees it


@record(frozen=True)
class Failed(Event):
    """The rank's program failed: how it ended, and whether a peer went first or a communication call failed."""

    kind: ClassVar[str] = "failed"
    how: str = ""  # 'exit code 1', 'called MPI_Abort', 'killed by SIGKILL'
    host: str = ""
    after_peer: bool = False  # its error said a peer's connection dropped: a peer failed first
    call: str = ""  # the communication call its error came out of: 'all_reduce#2'
    at: float | None = None  # when, by the rank's wall clock


@record(frozen=True)
class Finished(Event):
    """The rank's program ended well; it waits for the others."""

    kind: ClassVar[str] = "finished"
    at: float | None = None


@record(frozen=True)
class Hang(Event):
    """The hang report's verdict: the ranks it blames, by kind, and those that waited, in which call."""

    kind: ClassVar[str] = "hang"
    finished: tuple[int, ...] = ()  # finished their program while others waited
    idle: tuple[int, ...] = ()  # were in no communication call
    uninit: tuple[int, ...] = ()  # never initialised
    waiting: tuple[int, ...] = ()
    call: str = ""  # the call the first of the waiting ranks waited in: 'all_reduce#2'
    at: float | None = None


@record(frozen=True)
class Done(Event):
    """Every part of the rank's program ended: well, or, for a survivor of a failure, with the status it declared."""

    kind: ClassVar[str] = "done"
    status: int = 0  # a survivor's program's exit status (sys.exit's), which it tells instead of exiting with it


@record(frozen=True)
class Vanished(Event):
    """From the rank's tagger: the rank ended without saying how (a signal, or os._exit)."""

    kind: ClassVar[str] = "vanished"
    host: str = ""


@record(frozen=True)
class Beat(Event):
    """From the tagger of the lowest rank of a host still beating, every `beat_interval` seconds: the host's ranks
    that beat, and how those frozen are (rank.hostbeat)."""

    kind: ClassVar[str] = "beat"
    host: str = ""
    ranks: str = ""  # the ranks that beat now, as --ranks reads them: '0-3,7' ('': `rank` alone)
    late: str = ""  # ranks whose last beat is older, with its age in seconds: '5:12.5; 9:20'
    frozen: str = ""  # how those frozen are, as their taggers see it: '2:stopped (state T); 5:in a frozen cgroup'

    @classmethod
    def of(cls, rank: int, host: str, notes: Mapping[int, tuple[float, str]], interval: float) -> Beat:
        """`rank`'s beat on `host` for the ranks of `notes` (rank -> (its last beat's age, how it is frozen)): those
        older than `interval` are late."""
        now = [other for other, (age, _) in notes.items() if age <= interval]
        late = "; ".join(f"{other}:{age:.1f}" for other, (age, _) in sorted(notes.items()) if age > interval)
        frozen = "; ".join(f"{other}:{how}" for other, (_, how) in sorted(notes.items()) if how)
        return cls(rank, host=host, ranks=rank_ranges(now), late=late, frozen=frozen)

    def members(self) -> dict[int, tuple[float, str]]:
        """The ranks it speaks for, each with its last beat's age in seconds and how it is frozen ('' when not)."""
        ages = dict.fromkeys(parse_ranks(self.ranks) if self.ranks else () if self.late else (self.rank,), 0.0)
        ages.update((rank, float(age)) for rank, age in _pairs(self.late) if _seconds(age))
        frozen = dict(_pairs(self.frozen))
        return {rank: (age, frozen.get(rank, "")) for rank, age in ages.items()}


def _pairs(text: str) -> list[tuple[int, str]]:
    """'2:a; 5:b' -> [(2, 'a'), (5, 'b')] (items without a rank left out)."""
    said = (item.partition(":") for item in text.split("; ") if item)
    return [(int(rank), value) for rank, _, value in said if rank.isdigit()]


def _seconds(text: str) -> bool:
    """Whether `text` is a number of seconds, as a beat's ages are written."""
    return re.fullmatch(r"[0-9]{1,9}(\.[0-9])?", text) is not None


@record(frozen=True)
class Usage(Event):
    """An error every rank meets alike, which the launcher says once for the job however many ranks tell it: a usage
    error (status 2), or survivors too few to go on (status 1: a restart may go on, from a checkpoint)."""

    kind: ClassVar[str] = "usage"
    message: str = ""
    status: int = 2


EVENTS: Mapping[str, type[Event]] = {
    cls.kind: cls for cls in (Started, Ready, Failed, Finished, Hang, Done, Vanished, Beat, Usage)
}


def encode(event: Event, token: str) -> str:
    """The control line that carries `event` (with its newline): `@@hpcdist:TOKEN:KIND:RANK:key=value ...`.

    Fields at their default are left out; values are percent-quoted, so each line stays one line.
    """
    words = []
    for spec in records.fields(event):
        value = getattr(event, spec.name)
        if spec.name == "rank" or value == spec.default:
            continue
        if isinstance(value, tuple):
            text = ",".join(map(str, value))
        elif isinstance(value, bool):
            text = "1"
        elif isinstance(value, float):
            text = f"{value:.3f}"
        else:
            text = str(value)
        words.append(f"{spec.name}={quote(text, safe=',.#:/-')}")
    return f"{_MARK}{token}:{event.kind}:{event.rank}:{' '.join(words)}\n"


def parse_event(line: str, token: str) -> Event | None:
    """The event a line carries when it holds a control line of this launch's `token` (anywhere in it), else None."""
    match = _LINE.search(line)
    if match is None or match["token"] != token or match["kind"] not in EVENTS:
        return None
    cls = EVENTS[match["kind"]]
    hints = typing.get_type_hints(cls)
    values: dict[str, object] = {"rank": int(match["rank"])}
    for word in match["detail"].rstrip("\r\0").split():
        key, _, text = word.partition("=")
        if key in hints and key != "rank" and key != "kind":
            value = _field(unquote(text), hints[key])
            if value is not None:
                values[key] = value
    return cls(**values)  # type: ignore[arg-type]  # each value converted by its field's type


def _field(text: str, kind: object) -> object:
    """An event field's text as its type (None when it is not: the field keeps its default)."""
    if kind is bool:
        return text == "1"
    if kind == tuple[int, ...]:
        return tuple(int(word) for word in text.split(",") if word.isdigit())
    if kind in (int, int | None):
        return int(text) if text.isdigit() else None
    if kind in (float, float | None):
        with contextlib.suppress(ValueError):
            return float(text)
        return None
    return text


def might_start_event(tail: bytes) -> int:
    """Where in an unfinished line an event line may begin (its length when nowhere): what is before can be shown."""
    mark = _MARK.encode()
    at = tail.find(b"@")
    while at != -1:
        rest = tail[at:]
        if rest.startswith(mark) or mark.startswith(rest):
            return at
        at = tail.find(b"@", at + 1)
    return len(tail)
