"""The merged timeline at run time: align every rank's clock to rank 0's over MPI, keep every call, write the file.

`begin` (collective, while the ranks are in step) estimates each rank's clock offset to rank 0 by ping-pongs on
its own duplicate of COMM_WORLD, keeping the sample with the smallest round trip (the offset is then known to
within half that round trip), and from then on keeps every ledger entry and every `region` in bounded buffers.
`collect` (collective) brings every rank's buffers to rank 0 on one clock; `end` writes the Chrome-trace file
and prints the straggler table. Nothing here runs per call: the ledger itself appends each entry to the buffer.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, TextIO

from ..commcall import Call
from ..errors import UsageError, WaitTimeout
from ..records import field, record
from ..settingtable import FORENSICS
from ..waits import Backoff, poll_until
from . import sources
from .chrome import RankTrace, Trace, build_document
from .recording import LEDGER
from .stragglers import format_summary, summarize

__all__ = ["LIMIT", "begin", "collect", "end", "region", "reporting", "tracing"]

LIMIT = 200_000  # calls, and regions, each rank keeps: past it the oldest go, and the file counts them as dropped
_PINGS = 50  # per rank: the sample with the shortest round trip is kept
_PING, _PONG, _SEND = 7311, 7312, 7313


@record
class _Timeline:
    """This rank's part of the trace once `begin` ran: its clock against rank 0's, and the calls and regions kept.

    One per process (`_TIMELINE`): `hpcdist.region` is called anywhere in the program, with nothing to hand it.
    """

    comm: Any = None  # its duplicate of COMM_WORLD; None: tracing is off
    offset: float = 0.0  # add it to this rank's clock for rank 0's
    residual: float = 0.0  # the bound on that offset's error
    origin: float = 0.0  # rank 0's clock when the trace began
    seconds: float = 0.0  # how long each wait of the trace may take
    first: int = 0  # the ledger's sequence number of the first call kept
    rank: int = 0
    began: float = 0.0  # this rank's clock when it began
    calls: deque[Call] = field(default_factory=lambda: deque(maxlen=LIMIT))
    regions: deque[tuple[str, float, float]] | None = None  # None: `region` records nothing


_TIMELINE = _Timeline()


def begin(seconds: float) -> None:
    """Align this rank's clock to rank 0's and start keeping every call (collective over COMM_WORLD; once).

    Each wait lasts at most `seconds`.

    Raises:
        WaitTimeout: a rank did not answer the clock exchange within `seconds` (the message names it).
    """
    if _TIMELINE.comm is not None:
        return
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    offset, residual, origin = _align(comm, seconds)
    trace = _TIMELINE
    trace.offset, trace.residual, trace.origin, trace.seconds = offset, residual, origin, seconds
    trace.first, trace.rank, trace.began = LEDGER.seq + 1, comm.rank, time.monotonic()
    trace.regions = deque(maxlen=LIMIT)
    trace.comm = comm
    LEDGER.keep(trace.calls)
    sources.keep(LIMIT)  # a backend that records its own calls (the mpi backend's) keeps as many


def tracing(on: bool) -> None:
    """Keep calls (True) or stop keeping them (False) after `begin`, e.g. to time a call both ways."""
    LEDGER.keep(_TIMELINE.calls if on else None)


@contextlib.contextmanager
def region(name: str) -> Iterator[None]:
    """Mark a region of this rank's program on its track of the trace file, e.g. `with hpcdist.region("forward"):`.

    Recorded only while the job is traced (`hpcdist mpirun --trace`, or `--report`); otherwise it does nothing.
    """
    regions = _TIMELINE.regions
    if regions is None:
        yield
        return
    start = time.monotonic()
    try:
        yield
    finally:
        regions.append((name, start, time.monotonic()))


def _align(comm: Any, seconds: float) -> tuple[float, float, float]:
    """This rank's offset to rank 0's clock (add it to a reading), the bound on its error, and the trace's origin
    (rank 0's clock when it began), in seconds."""
    if comm.rank == 0:
        origin = time.monotonic()
        for peer in range(1, comm.size):
            samples = []
            for _ in range(_PINGS):
                sent = time.monotonic()
                comm.send(None, dest=peer, tag=_PING)
                theirs = _receive(comm, peer, _PONG, seconds, "its clock reading (aligning the trace's clocks)")
                back = time.monotonic()
                samples.append((back - sent, (sent + back) / 2 - theirs))
            rtt, offset = min(samples)
            comm.send((offset, rtt / 2, origin), dest=peer, tag=_PONG)
        return 0.0, 0.0, origin
    for ping in range(_PINGS):
        _receive(
            comm, 0, _PING, seconds, "a clock ping (aligning the trace's clocks)", spin=ping > 0
        )  # sleeps while rank 0 pings the others
        comm.send(time.monotonic(), dest=0, tag=_PONG)
    offset, residual, origin = _receive(comm, 0, _PONG, seconds, "its clock offset (aligning the trace's clocks)")
    return offset, residual, origin


def _receive(comm: Any, source: int, tag: int, seconds: float, what: str, spin: bool = True) -> Any:
    """A message from `source`; `spin`: spin briefly first, so that a ping-pong is timed by the network, not sleeps.

    Raises:
        WaitTimeout: nothing came within `seconds`.
    """
    got: list[Any] = []

    def arrived() -> bool:
        message = comm.improbe(source=source, tag=tag)  # a matched probe: a message of any size is received whole
        if message is not None:
            got.append(message.recv())
        return message is not None

    poll_until(
        arrived,
        time.monotonic() + seconds,
        lambda: f"rank {comm.rank} waited {seconds:g} s for {what} from rank {source}",
        backoff=Backoff(1e-4, 0.01, yielding=0.5) if spin else Backoff(),
    )
    return got[0]


def _payload() -> dict[str, Any]:
    """This rank's buffers as plain values on its own clock."""
    kept = _TIMELINE.calls
    own = [call.copy() for call in list(kept)]  # a copy: the main thread appends
    dropped = own[0].seq - _TIMELINE.first if own and len(own) == kept.maxlen else 0
    calls = own + sources.timed(_TIMELINE.began, own)  # DDP's among them
    calls.sort(key=lambda call: call.started)
    for seq, call in enumerate(calls, 1):
        call.seq = seq
    regions = list(_TIMELINE.regions or ())
    return {
        "host": socket.gethostname().split(".")[0],
        "offset": _TIMELINE.offset,
        "residual": _TIMELINE.residual,
        "calls": calls,
        "regions": regions,
        "dropped": max(dropped, 0),
    }


def collect() -> Trace | None:
    """Every rank's calls and regions on rank 0's clock, at rank 0 (None elsewhere); collective after `begin`.

    Raises:
        WaitTimeout: rank 0 did not hear from a rank, or a rank's buffers were not taken, within the job's timeout.
    """
    comm, seconds = _TIMELINE.comm, _TIMELINE.seconds
    if comm.rank != 0:
        request = comm.isend(_payload(), dest=0, tag=_SEND)
        poll_until(
            lambda: bool(request.test()[0]),
            time.monotonic() + seconds,
            lambda: f"rank {comm.rank} waited {seconds:g} s for rank 0 to take its trace",
        )
        return None
    payloads = {0: _payload()}
    for peer in range(1, comm.size):
        payloads[peer] = _receive(comm, peer, _SEND, seconds, "its trace (collecting the trace at the end)", spin=False)
    origin = _TIMELINE.origin
    return Trace(
        tuple(
            RankTrace(
                rank,
                p["host"],
                p["residual"],
                tuple(call.moved(p["offset"] - origin) for call in p["calls"]),  # onto rank 0's clock, from `origin`
                tuple((name, a + p["offset"] - origin, b + p["offset"] - origin) for name, a, b in p["regions"]),
                p["dropped"],
            )
            for rank, p in sorted(payloads.items())
        )
    )


def end(path: str, out: TextIO = sys.stderr) -> None:
    """Collect every rank's trace; rank 0 writes it to `path`, says so, and prints the straggler table."""
    from mpi4py import MPI

    if MPI.Is_finalized():
        if _TIMELINE.rank == 0:
            print(f"hpcdist: no trace written to {path}: the program finalised MPI itself", file=out, flush=True)
        return
    try:
        trace = collect()
    except WaitTimeout as exc:
        print(f"hpcdist: no trace written to {path}: {exc}", file=out, flush=True)
        return
    if trace is None:
        return
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(build_document(trace), handle)
    calls = sum(len(r.calls) for r in trace.ranks)
    dropped = sum(r.dropped for r in trace.ranks)
    lost = f", {dropped} older calls dropped at the {LIMIT}-call bound" if dropped else ""
    print(
        f"hpcdist: wrote the trace of {len(trace.ranks)} ranks ({calls} calls{lost}) to {path}; clocks aligned within "
        f"{trace.residual * 1e6:.0f} us",
        file=out,
    )
    print("\n".join(format_summary(summarize(trace))), file=out, flush=True)


@contextlib.contextmanager
def reporting(recorded: bool, seconds: float, out: TextIO | None = None) -> Iterator[None]:
    """Trace the block (collective); at its end rank 0 prints the straggler table (`--report` of bench and run).

    `recorded`: whether the ledger records this job's calls (hang forensics run: an MPI launch).

    Raises:
        UsageError: the ledger does not record (`recorded` is False).
        WaitTimeout: a rank did not take part in the clock exchange or the collection within `seconds`.
    """
    if not recorded:
        raise UsageError(
            "--report reads every rank's calls from hang forensics, which run under an MPI launch unless "
            f"{FORENSICS.name}=0; run it under hpcdist mpirun (or srun with MPI) without {FORENSICS.name}=0"
        )
    begin(seconds)
    yield
    trace = collect()
    if trace is not None:
        print("\n".join(format_summary(summarize(trace))), file=out or sys.stdout, flush=True)
