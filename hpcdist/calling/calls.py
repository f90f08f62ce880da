"""A Python call sent to ranks and their outcomes read back: the files `hpcdist.launch` and `hpcdist.submit` share.

The caller writes CALL, a pickle of {"path": its sys.path, "backend": ..., "call": cloudpickle bytes of (fn, args,
kwargs), the code it ships by value named and with its source lines (`byvalue`)}; each rank (`runtime.pycall`) writes
its outcome atomically to a file of its own: a template with `{rank}` and `{task}` (the Slurm array task id, empty
outside job arrays). Pure: pickling and files only, never torch or MPI.
"""

from __future__ import annotations

import pickle
import re
import sys
from collections.abc import Callable
from typing import Any

from ..errors import RankFailed, UsageError
from ..ranklist import ranks_text
from .byvalue import dumps

__all__ = ["first_failure", "hint", "pack", "read_outcomes", "write_call"]

# (what torch says, what to change): shown with a rank's exception where it surfaces in the caller
_HINTS = (
    (
        re.compile(
            r"DistributedDataParallel device_ids and output_device arguments only work with .*\{device\(type='cpu'\)"
        ),
        "hpcdist: hint: the model is on the CPU, where DDP takes no device_ids: write DistributedDataParallel(model); "
        "device_ids=[rank] is for a model on GPU `rank` (model.to(rank) first, with backend='nccl')",
    ),
)


def pack(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], caller: str) -> bytes:
    """cloudpickle bytes of (fn, args, kwargs) by `byvalue.dumps`; `caller` (`hpcdist.launch`, …) names the API.

    Raises:
        UsageError: `fn` is not callable, or a part cannot be pickled; the message names the part and what to do.
    """
    if not callable(fn):
        raise UsageError(
            f"{caller} runs a function, but its first argument is {type(fn).__name__} {fn!r}; pass the "
            f"function itself, e.g. {caller}(train, world_size, ...)"
        )
    try:
        return dumps((fn, args, kwargs))
    except Exception:  # noqa: BLE001 - find the part that cannot be sent, below
        pass
    name = getattr(fn, "__qualname__", repr(fn))
    parts = [(f"the function {name}", fn)]
    parts += [(f"argument {index} of {name}", value) for index, value in enumerate(args)]
    parts += [(f"keyword argument {key}= of {name}", value) for key, value in kwargs.items()]
    for what, value in parts:
        try:
            dumps(value)
        except Exception as exc:  # noqa: BLE001 - pickle raises TypeError, PicklingError, AttributeError, ...
            fix = (
                "create such objects (locks, open files, sockets, CUDA state) inside the function, not around it"
                if value is fn
                else "pass what it is made from (a path, numbers, a config) and build it inside the function"
            )
            raise UsageError(
                f"{caller} cannot send {what} ({type(value).__name__}) to the ranks: {exc}; {fix}"
            ) from None
    raise UsageError(f"{caller} cannot send the call of {name} to the ranks; check that its parts pickle")


def write_call(path: str, call: bytes, backend: str) -> None:
    """Write CALL for the ranks: the packed call, the backend, and this process's sys.path."""
    with open(path, "wb") as handle:
        pickle.dump({"path": list(sys.path), "backend": backend, "call": call}, handle)


def read_outcomes(template: str, size: int, task: str = "") -> dict[int, dict[str, Any]]:
    """The outcomes the ranks wrote (`template` formatted with rank and task), by rank."""
    found = {}
    for rank in range(size):
        try:
            with open(template.format(rank=rank, task=task), "rb") as handle:
                found[rank] = pickle.load(handle)
        except FileNotFoundError:
            continue
    return found


def first_failure(outcomes: dict[int, dict[str, Any]]) -> RankFailed | None:
    """RankFailed for the rank that began the failure (its exception as the cause where it loads here), else None.

    That is the first to raise on its own; a rank whose error said a peer had gone, or came out of a communication
    call, is a casualty, named only when every failure was one. Then a rank that returned before the first casualty
    raised is named instead: the others waited for it in a collective.
    """
    failed = [o for o in outcomes.values() if not o["ok"]]
    if not failed:
        return None
    first = min(failed, key=lambda o: (o.get("casualty", False), o["time"], o["rank"]))
    early = [o for o in outcomes.values() if o["ok"] and o.get("time", first["time"]) < first["time"]]
    if first.get("casualty") and early:
        gone = min(early, key=lambda o: (o["time"], o["rank"]))
        error = RankFailed(
            gone["rank"], gone["host"], "", "", first["traceback"], what=f"rank {gone['rank']} on {gone['host']} "
            f"returned while {ranks_text(sorted(o['rank'] for o in failed))} still communicated with it; "
            f"then rank {first['rank']} raised {first['kind']}: {first['message']}",
        )  # fmt: skip
    else:
        error = RankFailed(
            first["rank"], first["host"], first["kind"], first["message"], first["traceback"], hint(first["message"])
        )
    error.exception = _load(first["exception"])
    error.__cause__ = error.exception
    return error


def _load(sent: bytes | None) -> BaseException | None:
    """The rank's exception itself, when it was sent and can be loaded here."""
    if sent is None:
        return None
    try:
        loaded = pickle.loads(sent)
    except Exception:  # noqa: BLE001 - e.g. a class the caller cannot import: the text still tells all
        return None
    return loaded if isinstance(loaded, BaseException) else None


def hint(message: str) -> str:
    """What hpcdist knows to change for a rank's error message, or ""."""
    return next((text for pattern, text in _HINTS if pattern.search(message)), "")
