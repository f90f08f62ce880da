"""Hang forensics: record torch.distributed calls in a ledger; on a timeout gather all ledgers over MPI.

The ledger holds the dist.* calls; calls below them (DDP's, the object collectives') come from sources
(`sources.py`: the mpi backend's own records, torch's Flight Recorder), merged in when a rank answers and
polled with the ledger for a call older than the timeout.

Every rank runs a watchdog thread on its own duplicate of COMM_WORLD. When a rank's oldest
unfinished call is older than the job's timeout (or its init_process_group older than the start-up
timeout), it alarms rank 0, whose watchdog asks every rank for its phase and ledger (the threads
answer even while their main threads are blocked in a call), prints what each rank was doing and
the first divergence, and aborts the job; under --on-failure shrink, the ranks that never arrived end
themselves instead and the others carry on (`hung`). Under the shim, a rank whose program has ended keeps
answering until every rank's program has (`finish`), so the report can name it.
"""

from __future__ import annotations

import array
import contextlib
import functools
import inspect
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..abort import abort_job, before_finalize, shrinks
from ..commcall import Call
from ..errors import WaitTimeout
from ..ranklist import ranks_text
from ..waits import Backoff, poll_until
from . import frdump, hung, pyspy, sources, stacks
from .answers import MAX_ANSWER, bounded
from .cause import tell_hang
from .ledger import FINISHED, INITIALISING, Ledger, describe_hang

__all__ = [
    "LEDGER",
    "add_source",
    "ask_all",
    "contribute",
    "each_cycle",
    "finish",
    "instrument",
    "rebase",
    "reporter",
    "reserve",
    "start",
    "stop",
]

LEDGER = Ledger()
_PARTS: dict[str, Callable[[], Any]] = {}  # what a rank adds to its answer besides its phase and ledger
_CYCLES: list[Callable[[Any], None]] = []  # what else the watchdog thread does each cycle, given its communicator

_ALARM, _ASK, _ANSWER = 7301, 7302, 7303
_POLL = 0.1
_ANSWER_WINDOW = 3.0
_FINALIZE_WAIT = 2.0  # seconds MPI_Finalize waits for the thread to stop: it checks every _POLL

# name -> (index of the tensor argument, its keyword, index of the peer argument, its keyword,
#          the peer's label, its default, index of the group argument)
_CALLS: dict[str, tuple[int, str, int, str, str, Any, int]] = {
    "send": (0, "tensor", 1, "dst", "dst", None, 2),
    "recv": (0, "tensor", 1, "src", "src", "any", 2),
    "broadcast": (0, "tensor", 1, "src", "root", None, 2),
    "all_reduce": (0, "tensor", -1, "", "", None, 2),
    "reduce": (0, "tensor", 1, "dst", "root", None, 3),
    "all_gather": (1, "tensor", -1, "", "", None, 2),
    "gather": (0, "tensor", 2, "dst", "root", 0, 3),
    "scatter": (0, "tensor", 2, "src", "root", 0, 3),
    "reduce_scatter": (0, "output", -1, "", "", None, 3),
    "all_to_all": (1, "input_tensor_list", -1, "", "", None, 2),
    "all_gather_into_tensor": (1, "input_tensor", -1, "", "", None, 2),
    "reduce_scatter_tensor": (1, "input", -1, "", "", None, 3),
    "all_to_all_single": (1, "input", -1, "", "", None, 4),
    "barrier": (-1, "", -1, "", "", None, 0),
}
_state: dict[str, Any] = {}
_asks: list[Any] = []  # asks sent to ranks that have not answered: kept alive until the job ends


def instrument(dist: Any) -> None:
    """Wrap torch.distributed's user-facing calls so each records itself in LEDGER (once per process)."""
    for name, spec in _CALLS.items():
        original = getattr(dist, name)
        if not getattr(original, "_hpcdist_ledger", False):
            setattr(dist, name, _recorded(name, original, spec, dist))


def _recorded(name: str, call: Callable[..., Any], spec: tuple, dist: Any) -> Callable[..., Any]:
    """`call`, recording its operation, peer, shape, dtype and group around each blocking use."""
    t_index, t_key, p_index, p_key, p_label, p_default, g_index = spec

    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        group = args[g_index] if g_index < len(args) else kwargs.get("group")
        known = _NAMES.get(id(group)) or _name_group(group, dist)
        if known[2]:  # its backend records the call itself
            return call(*args, **kwargs)
        tensor = args[t_index] if 0 <= t_index < len(args) else kwargs.get(t_key)
        if type(tensor) is list or type(tensor) is tuple:
            tensor = tensor[0] if tensor else None
        peer = ""
        if p_label:
            value = args[p_index] if p_index < len(args) else kwargs.get(p_key, p_default)
            peer = f"{p_label}={'any' if value is None else value}"
        entry = LEDGER.start(
            name,
            peer,
            () if tensor is None else tensor.shape,  # torch.Size is a tuple; the dtype is named when sent
            "" if tensor is None else tensor.dtype,
            known[1],
        )
        try:
            return call(*args, **kwargs)
        finally:
            entry.finish()  # async calls count as done once issued

    fast = _forwarding(name, call, g_index, wrapper, dist)
    fast._hpcdist_ledger = wrapper  # the recording function (forensics' cause.py looks for its frame)
    return fast


def _forwarding(name: str, call: Callable[..., Any], g_index: int, recorded: Callable[..., Any], dist: Any) -> Any:
    """`recorded` behind a function with `call`'s own parameters, which hands a group whose backend records its calls
    straight to `call`: positional arguments instead of `*args, **kwargs` save ~0.1 µs a call (the mpi backend's
    8-byte all_reduce takes ~5 µs). `recorded` itself where the parameters are not all plain positional-or-keyword."""
    params = list(inspect.signature(call).parameters.values())
    names = [p.name for p in params]
    scope: dict[str, Any] = {"call": call, "recorded": recorded, "_NAMES": _NAMES, "_name_group": _name_group,
                             "dist": dist}  # fmt: skip
    plain = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params) and not set(names) & {*scope, "id", "known"}
    if not plain or g_index >= len(names) or names[g_index] != "group":
        return recorded
    signature = []
    for i, p in enumerate(params):
        if p.default is p.empty:
            signature.append(p.name)
        else:
            scope[f"_default{i}"] = p.default
            signature.append(f"{p.name}=_default{i}")
    passed = ", ".join(names)
    source = (
        f"def {name}({', '.join(signature)}):\n"
        f"    known = _NAMES.get(id(group)) or _name_group(group, dist)\n"
        f"    return (call if known[2] else recorded)({passed})\n"
    )
    exec(compile(source, f"<hpcdist ledger: dist.{name}>", "exec"), scope)  # built from `call`'s own parameters
    return functools.wraps(call)(scope[name])


# id(group) -> (group, its name, whether its backend records its calls); the group is kept so its id stays its own
_NAMES: dict[int, tuple[Any, str, bool]] = {}


def _name_group(group: Any, dist: Any) -> tuple[Any, str, bool]:
    """The world ("world"; group None) or a subgroup named by its global ranks, e.g. `[0, 1]`, and whether its
    backend records its calls (a dict by id: hashing a ProcessGroup costs more)."""
    name = "world" if group is None else str(dist.get_process_group_ranks(group))
    try:
        covered = dist.is_initialized() and sources.covers(str(dist.get_backend(group)))
    except (RuntimeError, ValueError):  # a group this rank is not in: the call itself says so
        covered = False
    known = _NAMES[id(group)] = (group, name, covered)
    return known


def add_source(
    backend: str,
    calls: Callable[[], list[Call]],
    oldest: Callable[[], float | None],
    keep: Callable[[int], None],
) -> None:
    """A backend that records its own calls (see `sources.register`): the dist.* wrapper leaves its groups to it."""
    sources.register(backend, calls, oldest, keep)
    _NAMES.clear()


def contribute(name: str, part: Callable[[], Any]) -> None:
    """Add `part()` to every answer this rank gives, under `name` (called on the watchdog thread when asked)."""
    _PARTS[name] = part


def each_cycle(work: Callable[[Any], None]) -> None:
    """Have the watchdog thread call `work(comm)` each cycle (every 0.1 s), after answering a request."""
    if work not in _CYCLES:
        _CYCLES.append(work)


def ask_all() -> dict[int, dict[str, Any]] | None:
    """Every rank's answer, as the hang report gathers them (waiting a few seconds at most); None without a watchdog."""
    comm = _state.get("comm")
    return None if comm is None else _gather(comm)


def _answer() -> dict[str, Any]:
    """What this rank tells the rank that asks: its phase, its ledger, and every contributed part."""
    calls, void = sources.snapshot(LEDGER), time.monotonic() - _state.get("since", 0.0)
    for call in calls:
        if call.age > void:  # it started before a rebase: the recovery voided it
            call.done = True
    answer: dict[str, Any] = {"phase": LEDGER.state(), "ledger": calls}
    for name, part in _PARTS.items():
        answer[name] = part()
    return bounded(answer)


def reserve(timeout: float, init_timeout: float) -> bool:
    """Duplicate COMM_WORLD for this rank's watchdog now (collective), so that `start` and `finish` are local.

    The shim calls this while every rank is in step, before the program runs; the timeouts are those a
    thread started by `finish` uses. False when MPI cannot host a watchdog thread.
    """
    from mpi4py import MPI

    if "comm" not in _state:
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return False
        _state["comm"] = MPI.COMM_WORLD.Dup()
        before_finalize(lambda: stop(_FINALIZE_WAIT))  # the thread stops before the program's own MPI.Finalize()
    _state["limits"] = (timeout, init_timeout)
    return True


def start(timeout: float, init_timeout: float | None = None) -> bool:
    """Start this rank's watchdog thread, or give the running one these timeouts; True when this call started it.

    A call older than `timeout`, or a wait in init_process_group older than `init_timeout` (default:
    `timeout`), sets off the hang report. Collective over COMM_WORLD unless `reserve` ran; False if MPI
    cannot host the thread.
    """
    limits = (timeout, init_timeout or timeout)
    contribute(frdump.PART, frdump.local_part)
    if "thread" in _state:
        _state["limits"] = limits
        return False
    if not reserve(*limits):
        return False
    stopping = threading.Event()
    thread = threading.Thread(target=_watch, args=(_state["comm"], stopping), name="hpcdist-watchdog", daemon=True)
    _state.update(thread=thread, stopping=stopping)
    thread.start()
    return True


def finish() -> None:
    """This rank's program has ended: say so in its ledger, and wait, still answering, until every rank's has.

    The wait has no deadline of its own, like MPI_Finalize after it: a rank still running either finishes,
    or waits in a call that its watchdog times out, and then the report names this rank as finished.
    A no-op without a reserved communicator, or when the program finalised MPI itself.
    """
    from mpi4py import MPI

    LEDGER.enter(FINISHED)
    if "comm" not in _state or MPI.Is_finalized():
        return
    if "thread" not in _state:
        start(*_state["limits"])
    done = _state["finishing"] = threading.Event()
    done.wait()
    stop()


def stop(wait: float | None = None) -> None:
    """Stop this rank's watchdog thread, waiting `wait` seconds at most (None: until it ends); local, and the
    duplicate communicator is left to MPI_Finalize."""
    if "thread" in _state:
        _state.pop("stopping").set()
        _state.pop("thread").join(wait)
    _state.pop("comm", None)
    _state.pop("finishing", None)


def _watch(comm: Any, stopping: threading.Event) -> None:
    """The watchdog thread; it lets a finishing main thread go on if it ends for any reason."""
    try:
        _serve(comm, stopping)
    finally:
        finishing = _state.get("finishing")
        if finishing is not None:
            finishing.set()


def rebase(comm: Any) -> None:
    """After a recovery under --on-failure shrink: watch over the survivors' `comm` from now on (a Dup: collective
    over it), its ranks numbered as in it, calls still in flight from before void; a no-op without a watchdog."""
    if "comm" in _state:
        for entry in list(LEDGER.entries):
            if not entry.done:
                entry.finish()  # the call that failed: the recovery voided it
        _state.update(comm=comm.Dup(), lost=set(), quiet_until=0.0, since=time.monotonic())


def _serve(comm: Any, stopping: threading.Event) -> None:
    """Answer ledger requests; alarm the reporter once when this rank waits too long; once finishing, await the others.

    Under --on-failure shrink (`hung`), a rank that failed is acknowledged and left out from then on, the lowest live
    rank reports, a later hang alarms again, and a rank told that it never arrived ends itself; after a recovery
    the thread goes on over the survivors' communicator (`rebase`).
    """
    shrinking = shrinks()
    seen: dict[str, Any] = {"alarmed": None, "sent": [], "barrier": None}
    while not stopping.wait(_POLL):
        if _state.get("comm", comm) is not comm:  # rebased on the survivors of a failure
            comm, seen = _state["comm"], {"alarmed": None, "sent": [], "barrier": None}
        try:
            if _cycle(comm, seen, shrinking):
                return
        except Exception as exc:
            if not (shrinking and hung.is_failure(exc)):
                raise
            _acknowledge(comm)
            seen["barrier"] = None  # a finishing agreement starts again among the survivors


def _acknowledge(comm: Any) -> None:
    """Note the ranks of `comm` that failed (acknowledged: receives from any source work again), unless it was
    replaced meanwhile."""
    lost = hung.acknowledge(comm)
    if _state.get("comm") is comm:
        _state["lost"] = lost


def _cycle(comm: Any, seen: dict[str, Any], shrinking: bool) -> bool:
    """One turn of the watchdog thread; True when it is done (every rank has finished, or the job ends)."""
    from mpi4py import MPI

    status = _status()
    message = comm.improbe(source=MPI.ANY_SOURCE, tag=_ASK, status=status)
    if message is not None:
        message.recv()
        comm.send(_answer(), dest=status.Get_source(), tag=_ANSWER)
    if shrinking and (word := comm.improbe(source=MPI.ANY_SOURCE, tag=hung.END_TAG)) is not None:
        hung.heard(comm.rank, word.recv(), sources.snapshot(LEDGER))
    for work in _CYCLES:
        work(comm)
    late, reports = _late(*_state["limits"]), reporter(comm)
    if shrinking and not late:
        seen["alarmed"] = None  # its call ended (or failed): a later hang alarms again
    if late and (seen["alarmed"] is None or (shrinking and seen["alarmed"] != (late, reports))):
        seen["alarmed"] = (late, reports)  # under shrink, alarmed again if the reporter failed
        if comm.rank != reports:
            seen["sent"].append(comm.isend(late, dest=reports, tag=_ALARM))
        else:
            seen["own"] = late
    if comm.rank == reports and time.monotonic() >= _state.get("quiet_until", 0.0):
        alarm = comm.improbe(source=MPI.ANY_SOURCE, tag=_ALARM)
        heard = alarm.recv() if alarm is not None else ""  # a matched alarm is received, even when this rank's own
        kind = seen.pop("own", "") or heard
        if kind and _report(comm, kind, shrinking):
            return True
    if "finishing" in _state:
        if seen["barrier"] is None:
            seen["flag"] = array.array("i", [1])  # kept alive while the agreement runs
            seen["barrier"] = comm.Iagree(seen["flag"]) if shrinking else comm.Ibarrier()
        elif seen["barrier"].Test():
            return True
    return False


def reporter(comm: Any) -> int:
    """The rank that reports a hang: rank 0, or under shrink the lowest rank that has not failed."""
    lost = _state.get("lost", set())
    return next(rank for rank in range(comm.size) if rank not in lost)


def _late(timeout: float, init_timeout: float) -> str:
    """Why this rank waits too long: 'call' (a pending call), 'init' (init_process_group), or '' if it does not."""
    now, pending, below = time.monotonic(), LEDGER.pending(), sources.oldest_pending(_state.get("since", 0.0))
    if pending is not None or below is not None:
        oldest = min(pending.started if pending is not None else now, below if below is not None else now)
        return "call" if now - oldest > timeout else ""
    return "init" if LEDGER.phase == INITIALISING and now - LEDGER.since > init_timeout else ""


def _report(comm: Any, kind: str, shrinking: bool) -> bool:
    """The reporter: gather every rank's ledger (waiting briefly) and print the hang report; under shrink, the ranks
    that never arrived end themselves and the job goes on (False); otherwise, or when that cannot be, the job ends."""
    answers = _gather(comm)
    ledgers = {rank: answer["ledger"] for rank, answer in answers.items()}
    phases = {rank: answer["phase"] for rank, answer in answers.items()}
    lost = _state.get("lost", set())
    missing = [rank for rank in range(comm.size) if rank not in answers and rank not in lost]
    timeout, init_timeout = _state["limits"]
    ending: list[int] = []
    why = ""
    if shrinking:
        if kind == "call":
            ending, why = hung.verdict(ledgers, phases, missing, timeout, renumbered=bool(lost))
        else:
            why = "the ranks wait in start-up, where there is no group to shrink yet"
        if not ending and not why:
            return False  # the call that alarmed has ended since
    if kind == "init":
        headline = f"init_process_group waited longer than its {init_timeout:g} s start-up timeout for the other ranks"
    else:
        headline = f"a communication call exceeded the {timeout:g} s timeout (HPCDIST_TIMEOUT)"
    print(f"hpcdist: {headline}", file=sys.stderr)
    print(describe_hang(ledgers, missing, phases), file=sys.stderr, flush=True)
    trimmed = [rank for rank, answer in answers.items() if "trimmed" in answer]
    if trimmed:
        most = max(answers[rank]["trimmed"] for rank in trimmed)
        said = f"{ranks_text(trimmed)}: answers of up to {most:,} bytes trimmed to {MAX_ANSWER:,} (oldest calls first)"
        print(f"hpcdist: {said}", file=sys.stderr, flush=True)
    if ending:
        _asks.extend(hung.tell(comm, ending, ledgers, why))
        one = len(ending) == 1
        print(
            f"hpcdist: {ranks_text(ending)} never arrived and {'ends itself' if one else 'end themselves'} "
            "(--on-failure shrink): the others' call fails with a process failure, and they carry on without "
            f"{'it' if one else 'them'}",
            file=sys.stderr,
            flush=True,
        )
        _state["quiet_until"] = time.monotonic() + _ANSWER_WINDOW  # alarms sent before the verdict took effect wait
        if comm.rank in ending:
            hung.heard(comm.rank, (hung.progress(ledgers[comm.rank]), why), sources.snapshot(LEDGER))
        return False
    if shrinking:
        print(f"hpcdist: the job ends instead of shrinking: {why}", file=sys.stderr, flush=True)
    try:
        tell_hang(comm.rank, ledgers, phases)  # hpcdist mpirun names the ranks it blames first, this rank's abort after
        print(frdump.save(answers, comm.size, timeout), file=sys.stderr, flush=True)
        found, finished = stacks.in_answers(answers)
        if found:
            print(stacks.report(found, pyspy.fill(found, missing), finished=finished), file=sys.stderr, flush=True)
    finally:
        abort_job(1)  # whatever happened to the dumps and the stacks
    return True


def _gather(comm: Any) -> dict[int, dict[str, Any]]:
    """Ask every other rank for its answer and wait briefly: rank -> answer, this rank's own included.

    A rank that does not answer within the window is left out (the caller names it); so is one that failed (under
    shrink). The asks are kept alive until the job ends, as a rank that never answers never receives its ask.
    """
    for rank in range(comm.size):
        if rank != comm.rank and rank not in _state.get("lost", set()):
            try:
                _asks.append(comm.isend(None, dest=rank, tag=_ASK))
            except Exception as exc:  # the rank failed (ULFM): it is not waited for
                if not hung.is_failure(exc):
                    raise
                _acknowledge(comm)
    answers = {comm.rank: _answer()}

    def answered() -> bool:
        status = _status()
        try:
            message = comm.improbe(tag=_ANSWER, status=status)
        except Exception as exc:  # a rank failed meanwhile (ULFM): it is not waited for
            if not hung.is_failure(exc):
                raise
            _acknowledge(comm)
            message = None
        if message is not None:
            answers[status.Get_source()] = message.recv()
        return len(answers.keys() | _state.get("lost", set())) == comm.size

    with contextlib.suppress(WaitTimeout):  # a rank that does not answer is named in the report
        poll_until(answered, time.monotonic() + _ANSWER_WINDOW, str, backoff=Backoff(0.01, 0.01))
    return answers


def _status() -> Any:
    """A fresh MPI status object."""
    from mpi4py import MPI

    return MPI.Status()
