"""The merged timeline as a Chrome-trace JSON document (what Perfetto and chrome://tracing open), and back (pure)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..commcall import Call
from ..records import record

__all__ = ["RankTrace", "Trace", "build_document", "load_trace", "parse_document"]

_CALLS, _REGIONS = 0, 1  # the thread ids of a rank's two tracks: its communication calls and its marked regions
_NO_END = " (end not recorded)"


@record(frozen=True)
class RankTrace:
    """One rank's calls and regions (name, start, end) on the aligned clock (seconds since the trace's origin), with
    its host and clock bound."""

    rank: int
    host: str
    residual: float  # seconds: this rank's clock is within this of rank 0's
    calls: tuple[Call, ...]
    regions: tuple[tuple[str, float, float], ...] = ()
    dropped: int = 0  # calls recorded before the trace buffer's oldest, which it no longer holds


@record(frozen=True)
class Trace:
    """Every rank's trace, and the bound on the clocks' misalignment (the largest rank's)."""

    ranks: tuple[RankTrace, ...]

    @property
    def residual(self) -> float:
        """Seconds: any two ranks' clocks agree within twice this (each is within it of rank 0's)."""
        return max((r.residual for r in self.ranks), default=0.0)


def build_document(trace: Trace) -> dict[str, Any]:
    """The Chrome-trace JSON object: one process per rank, "rank N (host)", calls as complete events (µs)."""
    events: list[dict[str, Any]] = []
    for rank in trace.ranks:
        events += [
            _meta("process_name", rank.rank, {"name": f"rank {rank.rank} ({rank.host})"}),
            _meta("process_sort_index", rank.rank, {"sort_index": rank.rank}),
            _meta("thread_name", rank.rank, {"name": "communication"}, _CALLS),
        ]
        if rank.regions:
            events.append(_meta("thread_name", rank.rank, {"name": "regions"}, _REGIONS))
        events += (_call_event(rank.rank, call) for call in rank.calls)
        events += (
            {"ph": "X", "cat": "region", "name": name, "pid": rank.rank, "tid": _REGIONS, **_span(start, end)}
            for name, start, end in rank.regions
        )
    other = {
        "tool": "hpcdist",
        "clock": "time.monotonic() of each rank, shifted onto rank 0's through MPI ping-pongs",
        "clock_residual_us": round(trace.residual * 1e6, 1),
        "ranks": {
            str(r.rank): {"host": r.host, "clock_residual_us": round(r.residual * 1e6, 1), "dropped_calls": r.dropped}
            for r in trace.ranks
        },
    }
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _meta(name: str, pid: int, args: dict[str, Any], tid: int = _CALLS) -> dict[str, Any]:
    """A metadata event naming or ordering a track."""
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _span(start: float, end: float) -> dict[str, float]:
    """ts and dur in microseconds (Chrome's unit)."""
    return {"ts": round(start * 1e6, 3), "dur": round(max(end - start, 0.0) * 1e6, 3)}


def _call_event(pid: int, call: Call) -> dict[str, Any]:
    """A complete event, or an instant event labelled as such when the call's end was not recorded."""
    args = {"seq": call.seq, "peer": call.peer, "shape": list(call.shape), "dtype": call.dtype, "group": call.group}
    args["gseq"] = call.gseq
    cat = "collective" if call.gseq else "p2p"
    if call.ended is None:
        return {
            "ph": "i",
            "s": "t",
            "cat": cat,
            "name": call.op + _NO_END,
            "pid": pid,
            "tid": _CALLS,
            "ts": round(call.started * 1e6, 3),
            "args": args,
        }
    return {
        "ph": "X",
        "cat": cat,
        "name": call.op,
        "pid": pid,
        "tid": _CALLS,
        **_span(call.started, call.ended),
        "args": args,
    }


def parse_document(doc: Mapping[str, Any], where: str) -> Trace:
    """The Trace a document built by `build_document` holds.

    Raises:
        ValueError: the document is not an hpcdist trace (`where` names it in the message).
    """
    other = doc.get("otherData") if isinstance(doc, Mapping) else None
    if not isinstance(other, Mapping) or other.get("tool") != "hpcdist" or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{where} is not a trace written by hpcdist mpirun --trace (no hpcdist metadata)")
    try:
        return _parse(doc["traceEvents"], other["ranks"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: malformed hpcdist trace ({exc!r})") from None


def _parse(events: Iterable[Mapping[str, Any]], ranks: Mapping[str, Mapping[str, Any]]) -> Trace:
    """Rebuild every rank's calls and regions from the events."""
    calls: dict[int, list[Call]] = {int(r): [] for r in ranks}
    regions: dict[int, list[tuple[str, float, float]]] = {int(r): [] for r in ranks}
    for e in events:
        if e["ph"] == "X" and e["tid"] == _REGIONS:
            start = e["ts"] / 1e6
            regions[e["pid"]].append((e["name"], start, start + e["dur"] / 1e6))
        elif e["ph"] in ("X", "i") and e["tid"] == _CALLS:
            a, start = e["args"], e["ts"] / 1e6
            end = start + e["dur"] / 1e6 if e["ph"] == "X" else None
            op, shape = e["name"].removesuffix(_NO_END), tuple(a["shape"])
            calls[e["pid"]].append(
                Call(op, a["peer"], shape, a["dtype"], a["group"], a["gseq"], start, end, end is not None, seq=a["seq"])
            )
    return Trace(
        tuple(
            RankTrace(
                int(r),
                info["host"],
                info["clock_residual_us"] / 1e6,
                tuple(sorted(calls[int(r)], key=lambda c: c.seq)),
                tuple(regions[int(r)]),
                info["dropped_calls"],
            )
            for r, info in sorted(ranks.items(), key=lambda item: int(item[0]))
        )
    )


def load_trace(path: str) -> Trace:
    """Read a trace file.

    Raises:
        ValueError: it cannot be read, or is not an hpcdist trace (the message says which and how to fix).
    """
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}; give a file written by hpcdist mpirun --trace") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc}); give a file written by hpcdist mpirun --trace") from None
    return parse_document(doc, path)
