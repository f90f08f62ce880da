"""Control lines: what a rank tells `hpcdist mpirun` in band, through mpirun's own output forwarding.

`hpcdist mpirun` exports a fresh random token per launch in HPCDIST_CONTROL. A rank then writes
`@@hpcdist:<token>:<event>:<rank>:<detail>` as one line on its stderr; the launcher recognises the line
anywhere in mpirun's output (a tag before it does not matter), acts on it, and never shows it. Without
the variable (a generated script, a plain mpirun) nothing is written.

Events: `ready` (this rank's process group is initialised), `failed` (detail: how the program ended, `host=NAME`,
`after=peer` when its error said that a peer's connection dropped: a peer went first, `in=OP#SEQ` when the error came
out of a communication call, `at=` the rank's wall clock), `finished` (the program ended well; the rank waits for the
others), `hang` (the hang report's verdict: the ranks it blames and those that waited, forensics/cause.py), `done`
(every rank's program ended well), `vanished` (from the rank's tagger: the rank ended without `done` or `failed`),
`beat` (from the rank's tagger every BEAT_ENV seconds while the rank runs: launching/heartbeat.py), `usage` (detail: a
usage error's message, percent-quoted onto one line, which the launcher says once for the job however many ranks tell
it).
Each attempt of `hpcdist mpirun --max-restarts` (and of a generated script's restart loop) also exports its
index, 0 first, in RESTART_VARS: hpcdist's name and torchrun's; and the maximum in MAX_RESTARTS_ENV. Every
attempt of one `hpcdist mpirun` exports the same RUN_ID_ENV, which the ranks give as TORCHELASTIC_RUN_ID.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import quote, unquote

from .contract import EVENTS, Event, Failed, Finished, Hang, Ready, Usage, encode

__all__ = [
    "AFTER_PEER",
    "BEAT_ENV",
    "CONTROL_ENV",
    "MAX_RESTARTS_ENV",
    "RESTART_VARS",
    "RUN_ID_ENV",
    "TRACE_ENV",
    "ControlEvent",
    "emit",
    "new_token",
    "parse_control",
    "peer_lost",
    "tell_usage",
    "told_usage",
]

CONTROL_ENV = "HPCDIST_CONTROL"
BEAT_ENV = "HPCDIST_HEARTBEAT"  # seconds between a rank's `beat` lines; set by hpcdist mpirun, unset: no beats
RESTART_VARS = ("HPCDIST_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")  # hpcdist's first, then torchrun's
MAX_RESTARTS_ENV = "HPCDIST_MAX_RESTARTS"  # --max-restarts; unset: 0 (the ranks give it as TORCHELASTIC_MAX_RESTARTS)
TRACE_ENV = "HPCDIST_TRACE"  # hpcdist mpirun --trace FILE: the absolute path rank 0 writes the merged timeline to
RUN_ID_ENV = "HPCDIST_RUN_ID"  # one id for all attempts of one hpcdist mpirun launch
_told: list[str] = []  # the usage error this process told its launcher, if any
# What a rank's error says when it failed because a peer went first: gloo's `[…/gloo/transport/tcp/pair.cc:553]
# Connection closed by peer [127.0.0.1]:64672` (or `Connection reset by peer`), NCCL's `remote process exited or
# there was a network error`, a send's `Broken pipe`. A rank's `failed` line then carries `after=peer` (the shim's
# `peer_lost`); one whose error came out of a communication call carries `in=OP#SEQ` (forensics/cause.py).
_PEER_LOST = re.compile(
    r"[Cc]onnection (?:reset|closed) by peer|remote process exited or there was a network error|Broken pipe"
)
AFTER_PEER = "after=peer"
_HANG_KINDS = ("finished", "idle", "uninit", "waiting")
_LINE = re.compile(r"@@hpcdist:(?P<token>[0-9a-f]{16}):(?P<event>[a-z]+):(?P<rank>[0-9]+):(?P<detail>[^\n]*)")


class ControlEvent(NamedTuple):
    """One control line: what happened, on which rank, and a free-text detail."""

    event: str
    rank: int
    detail: str


def new_token() -> str:
    """A fresh token for one launch, so that no program output can pass for a control line by chance."""
    return secrets.token_hex(8)


def parse_control(line: str, token: str) -> ControlEvent | None:
    """The control event in `line` when it carries this launch's `token`, else None."""
    match = _LINE.search(line)
    if match is None or match["token"] != token:
        return None
    return ControlEvent(match["event"], int(match["rank"]), match["detail"].rstrip("\r\0"))


def emit(event: str, rank: int, detail: str = "", environ: Mapping[str, str] = os.environ) -> None:
    """Write a control line on fd 2 when this rank was started by `hpcdist mpirun`; do nothing otherwise.

    The line is the contract's (`contract.encode` of the typed event `detail` describes), which the launcher parses.
    """
    token = environ.get(CONTROL_ENV, "")
    if not re.fullmatch(r"[0-9a-f]{16}", token):
        return
    line = encode(_typed(event, rank, detail), token)
    with contextlib.suppress(OSError):  # stderr closed: the launcher will not hear this rank (reported not ready)
        os.write(2, line.encode(errors="replace"))


def _typed(event: str, rank: int, detail: str) -> Event:
    """The typed event `detail` describes: its `key=value` words (`in=` the call, `after=peer` a casualty, `at=` the
    time), its other words how a failed rank ended; a usage event's detail is its quoted message."""
    words = detail.split()
    fields = dict(word.partition("=")[::2] for word in words if "=" in word)
    at = float(fields["at"]) if re.fullmatch(r"[0-9]+(?:\.[0-9]*)?", fields.get("at", "")) else None
    host, call = fields.get("host", ""), fields.get("in", "")
    if event == "ready":
        return Ready(rank, host, int(fields["world"]) if fields.get("world", "").isdigit() else None)
    if event == "failed":
        how = " ".join(word for word in words if "=" not in word)
        return Failed(rank, how, host, AFTER_PEER in words, call, at)
    if event == "hang":
        ranks = {kind: tuple(int(r) for r in fields.get(kind, "").split(",") if r.isdigit()) for kind in _HANG_KINDS}
        return Hang(rank, ranks["finished"], ranks["idle"], ranks["uninit"], ranks["waiting"], call, at)
    if event == "finished":
        return Finished(rank, at)
    if event == "usage":
        return Usage(rank, unquote(detail))
    if event in ("vanished", "beat"):
        return EVENTS[event](rank, host)  # type: ignore[call-arg]  # both have a host
    return EVENTS[event](rank)


def peer_lost(error: str) -> bool:
    """Whether a rank's error text says that it failed because a peer's connection went (the peer failed first)."""
    return bool(_PEER_LOST.search(error))


def tell_usage(message: str, rank: int | None = None, environ: Mapping[str, str] = os.environ) -> bool:
    """Hand a usage error to `hpcdist mpirun`, which says it once for the job; False when this process is no rank of
    one (then the caller prints it). `rank`: this rank (default: $RANK, which the shim sets)."""
    given = str(rank) if rank is not None else environ.get("RANK", "")
    if not given.isdigit() or not re.fullmatch(r"[0-9a-f]{16}", environ.get(CONTROL_ENV, "")):
        return False
    emit("usage", int(given), quote(message), environ)  # its lines and spaces kept: the launcher unquotes them
    _told.append(message)
    return True


def told_usage() -> bool:
    """Whether this process told its launcher a usage error (the launcher says it; the rank adds nothing)."""
    return bool(_told)
