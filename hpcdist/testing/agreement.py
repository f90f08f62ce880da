"""Ranks agree on each test phase's outcome: one rank's failure or lone skip fails the test everywhere."""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Sequence
from typing import Any

from ..ranklist import ranks_text
from ..records import record
from ..waits import Backoff, poll_until

__all__ = ["Outcome", "Verdict", "agree", "apply_verdict", "combine", "outcome_of", "pack", "unpack"]

SLOT_BYTES = 1024  # one rank's outcome on the wire: nodeid, phase, kind and a short reason, JSON, zero-padded
_REASON_CHARS = 240
_KINDS = ("passed", "failed", "skipped", "xfailed", "xpassed")


@record(frozen=True)
class Outcome:
    """One rank's result of one test phase: kind is passed/failed/skipped/xfailed/xpassed."""

    nodeid: str
    when: str
    kind: str
    reason: str = ""


@record(frozen=True)
class Verdict:
    """What every rank reports instead, when the ranks did not all see the same outcome."""

    kind: str  # "failed" or "xfailed"
    message: str


def outcome_of(report: Any) -> Outcome:
    """The Outcome of a pytest TestReport (xfail/xpass told apart from skip/pass)."""
    kind = ("xfailed" if report.skipped else "xpassed") if hasattr(report, "wasxfail") else report.outcome
    return Outcome(report.nodeid, report.when, kind, _short_reason(report, kind))


def _short_reason(report: Any, kind: str) -> str:
    """A one-line reason: the exception line of a failure, the text of a skip."""
    longrepr = report.longrepr
    if kind in ("passed", "xpassed") or longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # a skip: (path, lineno, reason)
        text = str(longrepr[2])
    else:
        crash = getattr(longrepr, "reprcrash", None)
        lines = (crash.message if crash is not None else str(longrepr)).strip().splitlines()
        text = (lines[0] if crash is not None else lines[-1]) if lines else ""
    if kind == "xfailed":
        text = str(getattr(report, "wasxfail", "")) or text
    line = " ".join(str(text).split())
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 1] + "…"


def pack(outcome: Outcome) -> bytes:
    """Outcome -> exactly SLOT_BYTES bytes (the reason, then the nodeid, shortened to fit)."""
    fields = [outcome.nodeid, outcome.when, outcome.kind, outcome.reason]
    data = json.dumps(fields).encode()
    while len(data) > SLOT_BYTES:
        if fields[3]:
            fields[3] = fields[3][: max(0, len(fields[3]) - (len(data) - SLOT_BYTES) - 2)]
        else:
            fields[0] = "…" + fields[0][-(SLOT_BYTES // 2) :]
        data = json.dumps(fields).encode()
    return data.ljust(SLOT_BYTES, b"\0")


def unpack(slot: bytes | bytearray) -> Outcome:
    """The inverse of pack."""
    nodeid, when, kind, reason = json.loads(bytes(slot).rstrip(b"\0").decode())
    return Outcome(nodeid, when, kind, reason)


def combine(outcomes: Sequence[Outcome]) -> Verdict | None:
    """None when every rank saw the same outcome; else the verdict every rank must report."""
    size = len(outcomes)
    nodeids = {o.nodeid for o in outcomes}
    if len(nodeids) > 1:
        ran = "; ".join(f"rank {r} runs {o.nodeid}" for r, o in enumerate(outcomes))
        return Verdict(
            "failed",
            f"ranks disagree on which test runs ({ran}); every rank must collect "
            "the same tests in the same order (no rank-dependent parametrize or skips at collection)",
        )
    kinds = [o.kind for o in outcomes]
    if len(set(kinds)) == 1:
        return None
    by_kind: dict[str, list[int]] = {}
    for rank, kind in enumerate(kinds):
        by_kind.setdefault(kind, []).append(rank)
    when = outcomes[0].when
    others = "; ".join(f"{kind} on {ranks_text(r)}" for kind, r in by_kind.items() if kind not in ("failed", "skipped"))
    if "failed" in by_kind:
        first = by_kind["failed"][0]
        lines = [
            f"{when} failed on {ranks_text(by_kind['failed'])} of {size} "
            f"(rank {first}: {outcomes[first].reason or 'no message'}):"
        ]
        lines += [f"  rank {r}: {outcomes[r].reason or '(no message)'}" for r in by_kind["failed"]]
        lines += [f"  rank {r}: skipped: {outcomes[r].reason}" for r in by_kind.get("skipped", [])]
        if others:
            lines.append(f"  ({others})")
        return Verdict("failed", "\n".join(lines))
    if "skipped" in by_kind:
        lines = [
            f"{when} skipped on {ranks_text(by_kind['skipped'])} of {size} but not on the others; "
            "a test must run on every rank or be skipped on every rank:"
        ]
        lines += [f"  rank {r}: skipped: {outcomes[r].reason}" for r in by_kind["skipped"]]
        lines.append(f"  ({others})")
        return Verdict("failed", "\n".join(lines))
    # Only xfailed/xpassed/passed remain: the expected failure happened on some rank, so it happened.
    xfailed = by_kind.get("xfailed", [])
    return Verdict("xfailed", f"xfailed on {ranks_text(xfailed)} of {size}: {outcomes[xfailed[0]].reason}")


def apply_verdict(report: Any, verdict: Verdict) -> None:
    """Rewrite this rank's report to the agreed verdict; a rank's own failure keeps its traceback."""
    if verdict.kind == "failed":
        if report.outcome == "failed" and not hasattr(report, "wasxfail"):
            report.sections.append(("hpcdist: outcome across MPI ranks", verdict.message))
        else:
            report.outcome = "failed"
            report.longrepr = verdict.message
            if hasattr(report, "wasxfail"):
                del report.wasxfail
    elif verdict.kind == "xfailed" and not report.skipped:
        report.outcome = "skipped"
        report.wasxfail = verdict.message
        report.longrepr = None


def agree(comm: Any, outcome: Outcome) -> list[Outcome]:
    """Every rank's outcome: a reduction says whether all ranks saw this one; only if not, an allgather of them.

    So a test that passes on every rank costs each rank a few fixed-size messages, not one slot per rank.
    The waits themselves are unbounded: the test's deadline watchdog ends the job if a rank never arrives,
    after dumping every rank's stack (which then shows who sits in this agreement and who is stuck).
    """
    from mpi4py import MPI

    mine = _fingerprint(outcome)
    extremes = array("q", [*mine, *(-value for value in mine)])  # MAX of both: the largest and the smallest
    _poll(comm.Iallreduce(MPI.IN_PLACE, [extremes, MPI.INT64_T], MPI.MAX))
    if extremes[:2] == array("q", (-extremes[2], -extremes[3])):
        return [outcome] * comm.Get_size()
    send = bytearray(pack(outcome))
    recv = bytearray(SLOT_BYTES * comm.Get_size())
    _poll(comm.Iallgather([send, MPI.BYTE], [recv, MPI.BYTE]))
    return [unpack(recv[i : i + SLOT_BYTES]) for i in range(0, len(recv), SLOT_BYTES)]


def _fingerprint(outcome: Outcome) -> tuple[int, int]:
    """The test (a 63-bit digest of its nodeid) and the kind, as two numbers equal on ranks that agree."""
    digest = int.from_bytes(hashlib.blake2b(outcome.nodeid.encode(), digest_size=8).digest(), "big") >> 1
    return digest, _KINDS.index(outcome.kind) if outcome.kind in _KINDS else len(_KINDS)


def _poll(request: Any) -> None:
    """Poll a non-blocking collective to completion."""
    poll_until(request.Test, None, str, backoff=Backoff(0.0002, 0.01))
