"""What a rank tells `hpcdist mpirun` about its ending, so the launcher names the rank that began a failure first.

A rank whose peer went fails too: gloo's `Connection closed by peer`, or a communication call that errs. Its
`failed` control line says so: `after=peer` (its error says a peer's connection dropped) and `in=OP#SEQ` (the error
came out of a communication call: the ledger's call whose wrapper it passed through, or its pending call). A rank
whose program ended well says `finished` before it waits for the others; the hang report says which ranks it
blames (`hang`). Every such line carries `at=` (the rank's wall clock, seconds) for the launcher to order them.
Only ever called once a rank is ending: nothing here runs per call.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from .. import control
from ..commcall import Call
from .ledger import FINISHED, INITIALISING, RUNNING, Phase

__all__ = ["blame", "failure_words", "said_finished", "stamp", "tell_hang"]


def failure_words(exc: BaseException | None) -> str:
    """`in=all_reduce#2 at=<seconds>` for a failure: the communication call it came out of (if any), and when."""
    call = _failed_call(exc)
    return f"in={call} {stamp()}" if call else stamp()


def stamp() -> str:
    """`at=<seconds>`: when, by this rank's wall clock (hosts' clocks agree to NTP's precision)."""
    return f"at={time.time():.3f}"


def said_finished(rank: int) -> None:
    """Tell `hpcdist mpirun` that this rank's program ended well and it now waits for the others."""
    control.emit("finished", rank, stamp())


def _failed_call(exc: BaseException | None) -> str:
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
    watchdog = sys.modules.get(f"{__package__}.watchdog")  # not loaded: no call was recorded (and no import cycle)
    pending = None if watchdog is None else watchdog.LEDGER.pending()  # a call torch issued (DDP), its error elsewhere
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


def tell_hang(rank: int, ledgers: Mapping[int, list[Call]], phases: Mapping[int, Phase]) -> None:
    """The hang report's verdict for `hpcdist mpirun`: the ranks it blames, those that waited, and in what.

    `finished=1 idle=4 uninit=5 waiting=0,2,3 in=all_reduce#2 at=<seconds>` (see `blame`).
    """
    waiting, blamed = blame(ledgers, phases)
    words = [f"{kind}={','.join(map(str, ranks))}" for kind, ranks in blamed.items() if ranks]
    if waiting:
        words.append(f"waiting={','.join(map(str, waiting))} in={waiting[min(waiting)]}")
    control.emit("hang", rank, " ".join([*words, stamp()]))
