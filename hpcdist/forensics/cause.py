"""What a rank tells `hpcdist mpirun` about its ending, so the launcher names the rank that began a failure first.

A rank whose peer went fails too: gloo's `Connection closed by peer`, or a communication call that errs. Its
`Failed` event says so: `after_peer` (its error says a peer's connection dropped: `peer_lost`) and `call` (the error
came out of a communication call: the ledger's call whose wrapper it passed through, or its pending call:
`failed_call`). A rank whose program ended well says `Finished` before it waits for the others; the hang report
says which ranks it blames (`Hang`). Each carries `at` (the rank's wall clock, seconds) for the launcher to order
them. Only ever called once a rank is ending: nothing here runs per call.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from ..commcall import Call
from ..contract import RankContract
from ..events import Finished, Hang
from .ledger import FINISHED, INITIALISING, RUNNING, Phase

__all__ = ["blame", "failed_call", "peer_lost", "said_finished", "tell_hang"]

# What a rank's error says when it failed because a peer went first: gloo's `[…/gloo/transport/tcp/pair.cc:553]
# Connection closed by peer [127.0.0.1]:64672` (or `Connection reset by peer`), NCCL's `remote process exited or
# there was a network error`, a send's `Broken pipe`.
_PEER_LOST = re.compile(
    r"[Cc]onnection (?:reset|closed) by peer|remote process exited or there was a network error|Broken pipe"
)


def peer_lost(error: str) -> bool:
    """Whether a rank's error text says that it failed because a peer's connection went (the peer failed first)."""
    return bool(_PEER_LOST.search(error))


def said_finished(contract: RankContract, rank: int) -> None:
    """Tell `hpcdist mpirun` that this rank's program ended well and it now waits for the others."""
    contract.tell(Finished(rank, at=time.time()))


def failed_call(exc: BaseException | None) -> str:
    """`all_reduce#2`: the recorded call an exception passed through, else the ledger's pending call, else ''."""
    wrappers = _wrapper_codes()
    called = ""  # a wrapper's call that recorded no entry (its backend records its own calls)
    tb = None if exc is None else exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code in wrappers:
            entry: Any = frame.f_locals.get("entry")  # the ledger's Call for the call, in the recording frame
            op = getattr(entry, "op", "") or str(frame.f_locals.get("name") or frame.f_code.co_name)
            seq = getattr(entry, "seq", None)
            if seq is not None:
                return f"{op}#{seq}"
            called = called or op
        tb = tb.tb_next
    if called:
        return called
    recording = sys.modules.get(f"{__package__}.recording")  # not loaded: no call was recorded (and no import cycle)
    pending = (
        None if recording is None else recording.LEDGER.pending()
    )  # a call torch issued (DDP), its error elsewhere
    return "" if pending is None else f"{pending.op}#{pending.seq}"


def _wrapper_codes() -> set[Any]:
    """The code objects of the ledger's wrappers around torch.distributed's calls, and of the functions that record
    them (none if torch is not loaded)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return set()
    pairs = [(value, getattr(value, "_hpcdist_ledger", None)) for value in list(vars(dist).values()) if callable(value)]
    return {getattr(f, "__code__", None) for value, recorder in pairs if recorder for f in (value, recorder)}


def blame(
    ledgers: Mapping[int, list[Call]], phases: Mapping[int, Phase]
) -> tuple[dict[int, str], dict[str, list[int]]]:
    """The ranks that wait in a call (rank -> `all_reduce#2`, or `init_process_group`), and those blamed by kind.

    A rank that waits in a call is a casualty; one that finished its program (`finished`), is in no call (`idle`)
    or never initialised (`uninit`) while others wait, is blamed.
    """
    waiting: dict[int, str] = {}
    blamed: dict[str, list[int]] = {"finished": [], "idle": [], "uninit": []}
    for who, calls in sorted(ledgers.items()):
        pending = next((call for call in calls if not call.done), None)
        phase = Phase(*phases[who]).name if who in phases else ""
        if pending is not None:
            waiting[who] = f"{pending.op}#{pending.seq}"
        elif phase == INITIALISING:
            waiting[who] = "init_process_group"
        elif phase == FINISHED:
            blamed["finished"].append(who)
        elif phase == RUNNING:
            blamed["uninit"].append(who)
        else:
            blamed["idle"].append(who)
    return waiting, blamed


def tell_hang(
    contract: RankContract, rank: int, ledgers: Mapping[int, list[Call]], phases: Mapping[int, Phase]
) -> None:
    """The hang report's verdict for `hpcdist mpirun`: the ranks it blames, those that waited, and in what (`blame`)."""
    waiting, blamed = blame(ledgers, phases)
    contract.tell(
        Hang(
            rank,
            finished=tuple(blamed["finished"]),
            idle=tuple(blamed["idle"]),
            uninit=tuple(blamed["uninit"]),
            waiting=tuple(waiting),
            call=waiting[min(waiting)] if waiting else "",
            at=time.time(),
        )
    )
