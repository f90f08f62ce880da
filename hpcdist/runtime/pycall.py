"""The rank side of `hpcdist.launch`: load the call, initialise the process group, run it, write its outcome.

Each rank runs `python -m hpcdist.runtime.pycall CALL OUTCOME` under hpcdist's shim (`calling.calls` writes
CALL and reads the outcomes). The rank writes its outcome to OUTCOME with `{rank}` and `{task}` (the Slurm array
task id) replaced, atomically (a temporary file, then a rename), as a pickle of {"rank", "host", "ok": True,
"value", "time"} or {"rank", "host", "ok": False, "kind", "message", "traceback", "exception" (cloudpickle bytes of
the exception, or None), "time", "casualty" (its error said a peer had gone, or came out of a communication
call)}. After a failure it ends the whole job. A function that leaves by `sys.exit(0)`
(as `hpcdist.StopAtStepBoundary` does on preemption, before a requeue) writes no outcome.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import pickle
import socket
import sys
import time
import traceback
from typing import Any

from ..errors import UsageError
from ..settingtable import LAUNCH_DIR, SUBMIT_DIR
from ..values import ARRAY_TASK, RANK
from .bootstrap import Session, init, program_finished, shutdown, stacks_on_failure

__all__ = ["accept_own_init", "main"]


def main(argv: list[str]) -> int:
    """Run the call of CALL on this rank and write its outcome; 0 when it returned, 1 when it raised."""
    call_path, template = argv
    host = socket.gethostname().split(".")[0]
    rank = int(os.environ.get("RANK", "0"))
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "")
    try:
        with open(call_path, "rb") as handle:
            payload = pickle.load(handle)
    except OSError as exc:
        print(
            f"hpcdist: error: rank {rank} on {host} cannot read the call {call_path}: {exc.strerror}; every host "
            f"must see its directory: give hpcdist.launch a directory they share in {LAUNCH_DIR.name}, or "
            f"hpcdist.submit one as folder= (or {SUBMIT_DIR.name})",
            file=sys.stderr,
        )
        return 2
    sys.path.extend(p for p in payload["path"] if p not in sys.path)  # the caller's modules import here too
    try:
        session = init(payload["backend"])
        rank = session.rank
        with contextlib.suppress(FileNotFoundError):  # an earlier run's (a requeued or restarted job): not this one's
            os.unlink(template.format(rank=rank, task=task))
        fn, args, kwargs = pickle.loads(payload["call"])
        accept_own_init(session, chosen=payload["backend"] != "auto")
        args = tuple(_placed(arg, rank, task) for arg in args)
        kwargs = {key: _placed(arg, rank, task) for key, arg in kwargs.items()}
        value = fn(*args, **kwargs)
        program_finished()  # a peer failing from now on finds no stack of this rank's to show
        record = {"rank": rank, "host": host, "ok": True, "value": _dumps(value), "time": time.time()}
        _write(template.format(rank=rank, task=task), record)
    except SystemExit as exc:
        if exc.code not in (0, None):
            _write_failure(template.format(rank=rank, task=task), rank, host, exc)
            return 1
        print(f"hpcdist: rank {rank} on {host} left by sys.exit(0): no value to return", file=sys.stderr)
        return 0
    except BaseException as exc:  # noqa: BLE001 - any failure of the call travels back to the caller
        _write_failure(template.format(rank=rank, task=task), rank, host, exc)
        stacks_on_failure(rank, exc)  # the others' stacks, while they still wait where this rank left them
        return 1  # the shim ends the whole job; no shutdown, which could wait on a peer stuck in a collective
    shutdown()
    return 0


def _placed(arg: object, rank: int, task: str) -> object:
    """`arg`, or the rank for hpcdist.RANK and the array task id for hpcdist.ARRAY_TASK."""
    if arg is RANK:
        return rank
    if arg is ARRAY_TASK:
        if not task.isdigit():
            raise UsageError(
                "hpcdist.ARRAY_TASK stands for the task id of a Slurm job array, and this job is none "
                "(SLURM_ARRAY_TASK_ID is unset); submit with hpcdist.submit(..., array='0-3'), or pass the value"
            )
        return int(task)
    return arg


def _dumps(value: object, what: str = "its return value") -> bytes:
    """cloudpickle bytes of `value`.

    Raises:
        UsageError: it cannot be pickled; the message says what to return instead.
    """
    import cloudpickle

    try:
        return bytes(cloudpickle.dumps(value))
    except Exception as exc:  # noqa: BLE001 - pickle raises TypeError, PicklingError, AttributeError, ...
        raise UsageError(
            f"{what} ({type(value).__name__}) cannot be sent back to the caller: {exc}; return plain data "
            "instead (numbers, lists, dicts, tensors moved to the CPU)"
        ) from None


def _write_failure(path: str, rank: int, host: str, exc: BaseException) -> None:
    """Write a failed rank's outcome; if even that fails, print the traceback here so that it is not lost."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:  # start in the user's code
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    try:
        sent: bytes | None = _dumps(exc, "the exception")
    except UsageError:
        sent = None
    from ..forensics.cause import failed_call, peer_lost

    record = {
        "rank": rank,
        "host": host,
        "ok": False,
        "kind": type(exc).__name__,
        "message": str(exc),
        "traceback": text,
        "exception": sent,
        "time": time.time(),
        "casualty": peer_lost(str(exc)) or bool(failed_call(exc)),  # a peer went, or its call failed
    }
    try:
        _write(path, record)
    except OSError as problem:
        print(f"{text}hpcdist: rank {rank} could not write its outcome to {path}: {problem}", file=sys.stderr)
        return
    ending = (
        " in communication with its peers; the caller raises the failure that began it"  # calls.first_failure's
        if record["casualty"]
        else "; the caller raises it"
    )
    print(f"hpcdist: rank {rank} on {host} raised {type(exc).__name__}{ending}", file=sys.stderr)


def _write(path: str, record: dict[str, Any]) -> None:
    """Write `record` to `path` atomically: the caller sees a whole file or none."""
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "wb") as handle:
        pickle.dump(record, handle)
    os.replace(partial, path)


def accept_own_init(session: Session, chosen: bool = True) -> None:
    """Let the function's own `init_process_group` (as code written for mp.spawn has) use the group in place.

    A call that agrees with it (rank, world size and backend, where given) returns at once. One that asks for
    another backend gets it when the caller left the backend to hpcdist (`chosen` False: "auto"): the group is
    made again with it, on a fresh rendezvous (every rank makes the call, as code for mp.spawn does). Otherwise a
    disagreement is a UsageError saying what to change. Once the group is destroyed, calls go to torch again.
    """
    import torch.distributed as dist

    previous = dist.init_process_group
    signature = inspect.signature(previous)
    current = [session]

    @functools.wraps(previous)
    def init_process_group(*args: Any, **kwargs: Any) -> None:
        if not dist.is_initialized():
            previous(*args, **kwargs)
            return
        given = signature.bind(*args, **kwargs).arguments
        wanted = given.get("backend")
        if wanted is not None and not chosen and not _same_backend(wanted, current[0].backend):
            shutdown()
            current[0] = init(str(wanted).lower())
        _check_agrees(current[0], given)

    init_process_group._hpcdist_original = getattr(previous, "_hpcdist_original", previous)  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group


def _same_backend(wanted: object, ours: str) -> bool:
    """Whether an init_process_group backend argument names the group's backend (mpi is hpcdist's mpi4py one)."""
    name = str(wanted).lower()
    return name == ours or (name == "mpi" and ours == "mpi4py")


def _check_agrees(session: Session, given: dict[str, Any]) -> None:
    """Raise UsageError when an init_process_group call asks for another group than hpcdist.launch's."""
    backend = given.get("backend")
    if backend is not None and not _same_backend(backend, session.backend):
        raise UsageError(
            f"the function calls init_process_group(backend={backend!r}), but hpcdist.launch already initialised "
            f"the process group with backend {session.backend!r}; pass backend={backend!r} to hpcdist.launch, "
            "or drop the call"
        )
    for name, ours in (("rank", session.rank), ("world_size", session.world_size)):
        value = given.get(name, -1)
        if value not in (-1, ours):
            raise UsageError(
                f"the function calls init_process_group({name}={value!r}) on rank {session.rank}, but "
                f"hpcdist.launch's process group has {name}={ours}; pass the rank and world size hpcdist.launch "
                "gives (dist.get_rank(), dist.get_world_size()), or drop the arguments"
            )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
