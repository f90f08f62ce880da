"""The supervisor's older reading of the ranks' events, kept for the launching modules that still use it.

The contract (`hpcdist.contract`) is the one definition of what the launcher hands a rank and of the events a rank
sends back; these names are read from it. `parse_control` reads an event line through `contract.parse_event` and
gives it back as a kind, a rank and the words the supervisor's watch reads (`host=`, `world=`, `at=`, `in=`,
`after=peer`, how a rank ended; a usage error's message percent-quoted, which `parse_usage` unquotes).
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import quote, unquote

from .contract import (
    RESTART_VARS,
    Beat,
    Event,
    Failed,
    Finished,
    Hang,
    RankContract,
    Ready,
    Usage,
    Vanished,
    new_token,
    parse_event,
)

__all__ = [
    "AFTER_PEER",
    "BEAT_ENV",
    "CONTROL_ENV",
    "MAX_RESTARTS_ENV",
    "RESTART_VARS",
    "RUN_ID_ENV",
    "TRACE_ENV",
    "ControlEvent",
    "new_token",
    "parse_control",
    "parse_usage",
]

CONTROL_ENV = RankContract.variable("token")
BEAT_ENV = RankContract.variable("beat_interval")
MAX_RESTARTS_ENV = RankContract.variable("max_restarts")
TRACE_ENV = RankContract.variable("trace")
RUN_ID_ENV = RankContract.variable("run_id")
AFTER_PEER = "after=peer"


class ControlEvent(NamedTuple):
    """One event line: what happened, on which rank, and its fields as words."""

    event: str
    rank: int
    detail: str


def parse_control(line: str, token: str) -> ControlEvent | None:
    """The event in `line` when it carries this launch's `token`, else None."""
    event = parse_event(line, token)
    return None if event is None else ControlEvent(event.kind, event.rank, _words(event))


def parse_usage(detail: str) -> str:
    """The message of a `usage` event's detail, as the rank had it."""
    return unquote(detail)


def _words(event: Event) -> str:
    """An event's fields as the watch's words."""
    words: list[str] = []
    if isinstance(event, Usage):
        return quote(event.message)
    if isinstance(event, Failed):
        words += [event.how] if event.how else []
        words += [AFTER_PEER] if event.after_peer else []
        words += [f"in={event.call}"] if event.call else []
    if isinstance(event, (Ready, Failed, Vanished, Beat)) and event.host:
        words.append(f"host={event.host}")
    if isinstance(event, Ready) and event.world is not None:
        words.append(f"world={event.world}")
    if isinstance(event, Hang):
        kinds = {"finished": event.finished, "idle": event.idle, "uninit": event.uninit, "waiting": event.waiting}
        words += [f"{kind}={','.join(map(str, ranks))}" for kind, ranks in kinds.items() if ranks]
        words += [f"in={event.call}"] if event.call else []
    if isinstance(event, (Failed, Finished, Hang)) and event.at is not None:
        words.append(f"at={event.at:.3f}")
    return " ".join(words)
