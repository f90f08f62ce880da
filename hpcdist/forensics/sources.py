"""Calls recorded below torch.distributed's Python API, merged into a rank's ledger when it answers.

Two kinds: a backend that records its own calls (the mpi backend's, registered with `register`), and torch's
Flight Recorder, which records gloo's and nccl's collectives, DDP's included (`enable_flight_recorder` turns it
on). The ledger's own entries (the `dist.*` calls) are kept where they say more (peers, roots); a Flight
Recorder entry that repeats one of them is dropped, so each call appears once.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Callable
from operator import attrgetter

from ..commcall import Call, dtype_name
from .ledger import Ledger, sent

__all__ = ["FR_BUFFER", "covers", "enable_flight_recorder", "keep", "oldest_pending", "register", "snapshot", "timed"]

FR_BUFFER = "TORCH_FR_BUFFER_SIZE"  # torch's Flight Recorder records this many calls per process when set
_FR_SIZE = "2000"
_MATCH_WINDOW = 1.0  # seconds from a dist.* call's start within which torch records the same call
_BACKWARD = "_engine_run_backward"  # the Python frame below every call autograd's backward pass makes
# Flight Recorder's operation names (after "gloo:" or "nccl:") that differ from torch.distributed's
_FR_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "alltoall_base": "all_to_all_single",
    "alltoall": "all_to_all",
}

_STARTED = attrgetter("started")
# backend name -> (its calls, the start of its oldest call that someone waits on, keep the last N calls)
_SOURCES: dict[str, tuple[Callable[[], list[Call]], Callable[[], float | None], Callable[[int], None]]] = {}


def register(
    backend: str,
    calls: Callable[[], list[Call]],
    oldest: Callable[[], float | None],
    keep: Callable[[int], None],
) -> None:
    """A backend that records its own calls: `calls()` lists them (copies, oldest first, dtypes named), `oldest()`
    says when the oldest one still waited on started (monotonic seconds) or None, `keep(n)` has it keep its last n
    calls."""
    _SOURCES[backend] = (calls, oldest, keep)


def keep(size: int) -> None:
    """Have every backend that records its own calls keep its last `size` from now on (the trace's bound)."""
    for _, _, keep_calls in _SOURCES.values():
        keep_calls(size)


def timed(since: float, own: list[Call]) -> list[Call]:
    """The calls recorded below dist.* that started after `since`, for the trace; a Flight Recorder call that repeats
    one of `own` (the dist.* calls; left as they are) is left out, and torch's recorder times no call's end."""
    calls = [call for listed, _, _ in _SOURCES.values() for call in listed() if call.started >= since]
    recorded = [call for call in _flight_recorder(active=False) if call.started >= since]
    if recorded:
        calls += _unmatched([call.copy() for call in own], recorded)
    return calls


def covers(backend: str) -> bool:
    """Whether the backend records its own calls (then the dist.* wrapper leaves them to it)."""
    return backend in _SOURCES


def enable_flight_recorder() -> None:
    """Turn torch's Flight Recorder on for process groups created from now on, unless the user set its size
    (under either of torch's names)."""
    if "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ:
        os.environ.setdefault(FR_BUFFER, _FR_SIZE)


def oldest_pending(since: float = 0.0) -> float | None:
    """When the oldest call in flight that a source knows started (monotonic seconds), or None: polled, so cheap.

    Calls that started before `since` are left out (a recovery voided them: a failed call may stay in flight in a
    backend's record); the sources' rows are read then, which costs more.
    """
    starts = [start for _, oldest, _ in _SOURCES.values() if (start := oldest()) is not None]
    if starts and min(starts) < since:
        starts = [c.started for calls, _, _ in _SOURCES.values() for c in calls() if c.started >= since and not c.done]
    starts += [c.started for c in _flight_recorder(active=True) if not c.done and c.started >= since]
    return min(starts) if starts else None


def snapshot(ledger: Ledger) -> list[Call]:
    """The ledger's entries and every source's calls as a rank's answer sends them (`ledger.sent`), oldest first,
    each call once.

    Numbered on from the ledger's own numbering, so that a rank without other sources keeps its numbers.
    """
    extra = [call for calls, _, _ in _SOURCES.values() for call in calls()]
    recorded = _flight_recorder(active=False)
    if not extra and not recorded:
        return ledger.snapshot()
    own = [entry.copy() for entry in list(ledger.entries)]  # a copy: the main thread appends
    calls = own + _unmatched(own, recorded) + extra
    calls.sort(key=_STARTED)
    for seq, call in enumerate(calls, ledger.seq - len(own) + 1):
        call.seq = seq
    return sent(calls, time.monotonic())


def _unmatched(own: list[Call], recorded: list[Call]) -> list[Call]:
    """The Flight Recorder calls that repeat no dist.* call of `own`; a repeated one lends that call its group
    number, its completion and whether autograd's backward pass issued it (`own` updated in place)."""
    taken: set[int] = set()
    extra = []
    for fr in sorted(recorded, key=_STARTED):
        for i, call in enumerate(own):
            if (
                i not in taken
                and call.op == fr.op
                and call.group == fr.group
                and 0 <= fr.started - call.started + 0.01 < _MATCH_WINDOW
            ):
                taken.add(i)
                call.gseq = fr.gseq or call.gseq
                call.done = call.done and fr.done
                call.backward = fr.backward
                break
        else:
            extra.append(fr)
    return extra


def _flight_recorder(active: bool) -> list[Call]:
    """torch's Flight Recorder entries as calls (only those in flight when `active`); [] when it is off.

    Its stack traces are not asked for (their first dump took 2-7 s here): a call still in flight while a thread
    of this process is in autograd's backward pass is taken as issued by it (DDP's all-reduces are; it waits
    for them before the pass ends).
    """
    if os.environ.get(FR_BUFFER, "0").strip() in ("", "0") or "torch.distributed" not in sys.modules:
        return []
    from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined]  # not in torch's stubs

    dump = pickle.loads(_dump_fr_trace(True, False, active))
    backward = False if active else _in_backward()
    names = {name: str(config.get("ranks", "")) for name, config in dump.get("pg_config", {}).items()}
    offset = time.monotonic() - time.time_ns() / 1e9  # the recorder's clock is the wall clock
    calls = []
    for entry in dump.get("entries", []):
        name, desc = entry["process_group"]
        group = "world" if desc == "default_pg" else _ranks_name(names.get(name, name))
        op = entry["profiling_name"].split(":")[-1]
        op = _FR_OPS.get(op, op)
        sizes, dtypes = entry.get("input_sizes") or [[]], entry.get("input_dtypes") or [""]
        gseq = 0 if entry.get("is_p2p") else entry["collective_seq_id"]
        started = entry["time_created_ns"] / 1e9 + offset
        retired = bool(entry["retired"])
        shape, dtype = tuple(sizes[0]), dtype_name(dtypes[0])
        calls.append(Call(op, "", shape, dtype, group, gseq, started, None, retired, backward and not retired))
    return calls


def _in_backward() -> bool:
    """Whether a thread of this process is in autograd's backward pass now."""
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code.co_name == _BACKWARD:
                return True
            frame = frame.f_back  # type: ignore[assignment]
    return False


def _ranks_name(ranks: str) -> str:
    """A subgroup as the ledger names it, "[0, 1]", from the recorder's "[0, 1]" or "0,1"."""
    digits = [part.strip(" []") for part in ranks.split(",")]
    return "[" + ", ".join(d for d in digits if d) + "]"
