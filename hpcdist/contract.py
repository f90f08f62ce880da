"""The launcher's contract with its ranks: every variable it hands a rank, and every event a rank sends back.

A leaf (it imports only errors, values and the version), read by both sides and the only module they share:

- `RankContract`: what `hpcdist mpirun` (and a generated script) hands each rank, one typed field per `HPCDIST_*`
  variable; the launcher writes it with `environ()`, a rank reads it once with `from_environ()` and passes the
  object down. Its `version` is the launcher's hpcdist: a rank of another version refuses to start (`check_version`).
- Events: what a rank tells its launcher in band, one typed class per kind (`Ready`, `Failed`, `Finished`, `Hang`,
  `Done`, `Vanished`, `Beat`, `Usage`), written as one control line on the rank's stderr by `encode` and read back
  by `parse_event`, the one parser. The line carries the launch's random token, so no program output passes for one.
- The tagged line: `[host:rank] text` (`[host:rank:N] text` for the launcher's router), written by the rank's tagger
  and split again by the launcher (`tag`, `split_tag`), a stream's whole lines and progress-bar redraws
  (`split_segments`), and each rank's log file name (`log_name`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import secrets
import signal
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, NamedTuple
from urllib.parse import quote, unquote

from ._version import __version__
from .errors import UsageError
from .values import MAX_COUNT, ON_FAILURE, parse_seconds, parse_whole

__all__ = [
    "DRY_RUN_TOKEN",
    "EVENTS",
    "NUMBERED",
    "PREFIX",
    "RELAYED_SIGTERM",
    "RESTART_VARS",
    "Beat",
    "Done",
    "Event",
    "Failed",
    "Finished",
    "Hang",
    "RankContract",
    "Ready",
    "Tagged",
    "Usage",
    "Vanished",
    "check_version",
    "encode",
    "log_name",
    "might_start_event",
    "new_token",
    "parse_event",
    "split_segments",
    "split_tag",
    "tag",
]

PREFIX = "HPCDIST_"  # every variable of hpcdist's starts so: the contract's and the settings'
NUMBERED = "numbered"  # HPCDIST_TAG's value when the launcher routes the lines: [host:rank:N], N from 1 per rank
# Every rank turns this signal into SIGTERM to itself (rank/child.py): a launcher that passes SIGTERM on but kills
# the ranks soon after (Open MPI's PRRTE: 0.5 s later, no setting) is sent this one, which it passes on, job kept
RELAYED_SIGTERM = signal.SIGURG
# What a dry run prints for the control token, which each launch makes anew: a rank started by the printed line
# (nobody listening to its events) runs as under a plain mpirun, its lines tagged [host:rank]
DRY_RUN_TOKEN = "<per-launch token>"
RESTART_VARS = ("HPCDIST_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")  # an attempt's index: hpcdist's, torchrun's
_TOKEN = re.compile(r"[0-9a-f]{16}\Z")
_MARK = "@@hpcdist:"
_LINE = re.compile(r"@@hpcdist:(?P<token>[0-9a-f]{16}):(?P<kind>[a-z]+):(?P<rank>[0-9]{1,10}):(?P<detail>[^\n]*)")
_SEGMENT_END = re.compile(rb"\r\n|\n|\r(?!\Z)")  # a lone \r last may still be a \r\n: wait for the next byte
_TAG = re.compile(rb"\[(?P<host>[^\s:\[\]]+):(?P<rank>[0-9]{1,10})(?::(?P<number>[0-9]{1,20}))?\] ")


# -- the variables ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankContract:
    """What hpcdist's launcher hands every rank; each field is one variable (`VARIABLES`), unset at its default."""

    version: str | None = None  # the launcher's hpcdist: a rank of another version refuses to start
    token: str | None = None  # this launch's control token: set, the rank sends events (none otherwise)
    run_id: str | None = None  # one id for every attempt of a launch (the ranks' TORCHELASTIC_RUN_ID)
    restart_count: int | None = None  # this attempt's index, 0 first (None: the launch does not restart)
    max_restarts: int = 0  # --max-restarts (the ranks' TORCHELASTIC_MAX_RESTARTS)
    beat_interval: float | None = None  # seconds between the tagger's heartbeats (None: no heartbeat)
    trace: str | None = None  # --trace: the absolute path rank 0 writes every rank's calls to
    on_failure: str = "end"  # end: a failing rank ends the job; shrink: it ends alone, the survivors carry on
    min_np: int = 1  # under shrink: the fewest ranks the survivors carry on with
    tag: str = ""  # "1": each line tagged [host:rank]; NUMBERED: also numbered for the router; "" or "0": untagged
    log_dir: str | None = None  # each rank also writes its lines to DIR/rank-NNN.log
    ranks: str | None = None  # only these ranks' lines reach the console (e.g. 0,3 or 0-3,7)
    output_rate: float | None = None  # bytes a second a rank's tagger forwards (0: all; None: no limit given)
    bind: str = "none"  # auto: the rank binds itself to its share of the node (placement.binding)
    progress: bool | None = None  # ranks draw progress bars (True) or not (False); None: as their stdout is a terminal

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "version": "HPCDIST_VERSION",
        "token": "HPCDIST_CONTROL",
        "run_id": "HPCDIST_RUN_ID",
        "restart_count": RESTART_VARS[0],
        "max_restarts": "HPCDIST_MAX_RESTARTS",
        "beat_interval": "HPCDIST_HEARTBEAT",
        "trace": "HPCDIST_TRACE",
        "on_failure": "HPCDIST_ON_FAILURE",
        "min_np": "HPCDIST_MIN_NP",
        "tag": "HPCDIST_TAG",
        "log_dir": "HPCDIST_LOG_DIR",
        "ranks": "HPCDIST_RANKS",
        "output_rate": "HPCDIST_OUTPUT_RATE",
        "bind": "HPCDIST_BIND",
        "progress": "HPCDIST_PROGRESS",
    }

    @classmethod
    def variable(cls, field: str) -> str:
        """The environment variable that carries `field`."""
        return cls.VARIABLES[field]

    def environ(self) -> dict[str, str]:
        """The variables to export to every rank: each field that is not at its default (the restart counter twice,
        as hpcdist's and as torchrun's)."""
        out: dict[str, str] = {}
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if value == spec.default:
                continue
            name = self.VARIABLES[spec.name]
            out[name] = _text(value)
        if self.restart_count is not None:
            out[RESTART_VARS[1]] = str(self.restart_count)
        return out

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RankContract:
        """The contract a rank was started with, read from its environment once.

        Raises:
            UsageError: a variable's value is not of its kind; the message names the variable.
        """
        values: dict[str, object] = {}
        hints = typing.get_type_hints(cls)
        for spec in dataclasses.fields(cls):
            name = cls.VARIABLES[spec.name]
            raw = environ.get(name)
            if raw is None or raw == "":
                continue
            values[spec.name] = _read(raw, hints[spec.name], name)
        if values.get("token") == DRY_RUN_TOKEN:  # a dry run's line, run by hand: no launcher reads the events
            values.pop("token")
            if values.get("tag") == NUMBERED:  # numbered for a router that is not there
                values["tag"] = "1"
        contract = cls(**values)  # type: ignore[arg-type]  # each value read by its field's type
        contract._check()
        return contract

    def _check(self) -> None:
        """Refuse values of the right type that are out of range."""
        if self.on_failure not in ON_FAILURE:
            raise UsageError(
                f"{self.variable('on_failure')}={self.on_failure!r}: choose one of {', '.join(ON_FAILURE)} "
                "(hpcdist mpirun --on-failure sets it)"
            )
        if self.tag not in ("", "0", "1", NUMBERED):
            raise UsageError(
                f"{self.variable('tag')}={self.tag!r}: set it to 1 (prefix each line with [host:rank]) or 0"
            )
        if self.min_np < 1:
            raise UsageError(
                f"{self.variable('min_np')}={self.min_np!r} is not a positive whole number; unset it or give a rank "
                "count (hpcdist mpirun --min-np sets it)"
            )
        if self.bind not in ("auto", "none"):
            raise UsageError(f"{self.variable('bind')}={self.bind!r}: set it to auto or none (hpcdist mpirun --bind)")
        if self.token is not None and not _TOKEN.match(self.token):
            raise UsageError(
                f"{self.variable('token')} is set by hpcdist mpirun for each launch and must not be set by hand; "
                "unset it"
            )

    @property
    def shrinks(self) -> bool:
        """Whether a failing rank ends alone (--on-failure shrink) rather than ending the job."""
        return self.on_failure == "shrink"

    @property
    def routed(self) -> bool:
        """Whether a launcher listens to this rank's events and routes its tagged lines (hpcdist mpirun itself)."""
        return self.token is not None

    def tell(self, event: Event) -> None:
        """Send `event` to the launcher as one line on fd 2; nothing when no launcher listens (no token)."""
        if self.token is None:
            return
        with contextlib.suppress(OSError):  # stderr closed: the launcher will not hear this rank
            os.write(2, encode(event, self.token).encode(errors="replace"))


def _text(value: object) -> str:
    """A field's value as its variable holds it: a flag as 1 or 0, a whole number without a fraction (`2097152`,
    `5`), other numbers in as few digits as show them (`0.5`, `1.16667`)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def _read(raw: str, kind: object, name: str) -> object:
    """`raw`, the value of variable `name`, as a field of type `kind`.

    Raises:
        UsageError: it is not of that kind.
    """
    if kind in (str, str | None):
        return raw
    if kind in (bool, bool | None):
        if raw not in ("0", "1"):
            raise UsageError(f"{name}={raw!r}: set it to 1 or 0")
        return raw == "1"
    if kind in (int, int | None):
        number = parse_whole(raw)
        if number is None or number > MAX_COUNT:
            raise UsageError(f"{name}={raw!r} is not a whole number; hpcdist's launcher sets it, so unset it")
        return number
    seconds = parse_seconds(raw)
    if seconds is None or not math.isfinite(seconds):
        raise UsageError(f"{name}={raw!r} is not a number; hpcdist's launcher sets it, so unset it")
    return seconds


def check_version(contract: RankContract, where: str, own: str = __version__) -> None:
    """Refuse to run a rank whose hpcdist differs from its launcher's.

    `where` names this rank (`rank 3 on n2`). A launcher that says no version (a plain mpirun) is not checked.

    Raises:
        UsageError: the versions differ, naming both.
    """
    if contract.version is None or contract.version == own:
        return
    raise UsageError(
        f"the launcher runs hpcdist {contract.version} but {where} has hpcdist {own}; install hpcdist "
        f"{contract.version} in the Python environment every host runs (a container image or a venv on one host may "
        "hold another)"
    )


def new_token() -> str:
    """A fresh token for one launch, so that no program output can pass for an event line by chance."""
    return secrets.token_hex(8)


# -- the events ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """Something a rank tells its launcher; each kind is a subclass with its own fields."""

    kind: ClassVar[str] = ""
    rank: int


@dataclass(frozen=True)
class Ready(Event):
    """The rank's process group is initialised."""

    kind: ClassVar[str] = "ready"
    host: str = ""
    world: int | None = None  # the world size as the rank sees it


@dataclass(frozen=True)
class Failed(Event):
    """The rank's program failed: how it ended, and whether a peer went first or a communication call failed."""

    kind: ClassVar[str] = "failed"
    how: str = ""  # 'exit code 1', 'called MPI_Abort', 'killed by SIGKILL'
    host: str = ""
    after_peer: bool = False  # its error said a peer's connection dropped: a peer failed first
    call: str = ""  # the communication call its error came out of: 'all_reduce#2'
    at: float | None = None  # when, by the rank's wall clock


@dataclass(frozen=True)
class Finished(Event):
    """The rank's program ended well; it waits for the others."""

    kind: ClassVar[str] = "finished"
    at: float | None = None


@dataclass(frozen=True)
class Hang(Event):
    """The hang report's verdict: the ranks it blames, by kind, and those that waited, in which call."""

    kind: ClassVar[str] = "hang"
    finished: tuple[int, ...] = ()  # finished their program while others waited
    idle: tuple[int, ...] = ()  # were in no communication call
    uninit: tuple[int, ...] = ()  # never initialised
    waiting: tuple[int, ...] = ()
    call: str = ""  # the call the first of the waiting ranks waited in: 'all_reduce#2'
    at: float | None = None


@dataclass(frozen=True)
class Done(Event):
    """Every part of the rank's program ended well."""

    kind: ClassVar[str] = "done"


@dataclass(frozen=True)
class Vanished(Event):
    """From the rank's tagger: the rank ended without saying how (a signal, or os._exit)."""

    kind: ClassVar[str] = "vanished"
    host: str = ""


@dataclass(frozen=True)
class Beat(Event):
    """From the rank's tagger, every `beat_interval` seconds while the rank runs."""

    kind: ClassVar[str] = "beat"
    host: str = ""
    frozen: str = ""  # how the rank's process is frozen, as its tagger sees it: 'stopped (state T)' ('' when not)


@dataclass(frozen=True)
class Usage(Event):
    """A usage error the rank met, which the launcher says once for the job however many ranks tell it."""

    kind: ClassVar[str] = "usage"
    message: str = ""


EVENTS: Mapping[str, type[Event]] = {
    cls.kind: cls for cls in (Ready, Failed, Finished, Hang, Done, Vanished, Beat, Usage)
}


def encode(event: Event, token: str) -> str:
    """The control line that carries `event` (with its newline): `@@hpcdist:TOKEN:KIND:RANK:key=value ...`.

    Fields at their default are left out; values are percent-quoted, so each line stays one line.
    """
    words = []
    for spec in dataclasses.fields(event):
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


# -- the tagged lines ---------------------------------------------------------------------------------------------


class Tagged(NamedTuple):
    """A tagged line taken apart: its host and rank, its number among the rank's lines (None: not numbered), text."""

    host: str
    rank: int
    number: int | None
    text: bytes


def tag(host: str, rank: int, number: int | None = None) -> bytes:
    """The tag a rank's line starts with: `[host:rank] ` (`[host:rank:N] ` numbered)."""
    return f"[{host}:{rank}{'' if number is None else f':{number}'}] ".encode()


def split_tag(line: bytes) -> Tagged | None:
    """A tagged line `[host:rank] text` (or `[host:rank:N] text`) taken apart, or None for an untagged one."""
    match = _TAG.match(line)
    if match is None:
        return None
    number = int(match["number"]) if match["number"] else None
    return Tagged(match["host"].decode(errors="replace"), int(match["rank"]), number, line[match.end() :])


def log_name(rank: int, size: int) -> str:
    """`rank-003.log`: the rank zero-padded to the width of the largest rank, at least three digits."""
    return f"rank-{rank:0{max(3, len(str(max(size - 1, 0))))}d}.log"


def split_segments(data: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The whole segments of `data`, each with how it ended, and the rest that is not whole yet.

    A segment ends with b"\n" (a line; `\r\n` counts as one) or b"\r" (a progress bar drawing itself again
    on the same line, as tqdm does), so a redrawn bar is passed on at once rather than at its last newline.
    """
    segments, start = [], 0
    for match in _SEGMENT_END.finditer(data):
        segments.append((data[start : match.start()], b"\r" if match.group() == b"\r" else b"\n"))
        start = match.end()
    return segments, data[start:]
