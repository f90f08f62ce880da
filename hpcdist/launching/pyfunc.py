"""`hpcdist.launch`: run a Python function on N ranks through hpcdist's mpirun and return their values in rank order.

The function and its arguments travel by cloudpickle (so functions defined in `__main__` or a notebook work), in a
private directory: the caller writes the call, each rank writes its outcome atomically (see `runtime.pycall`,
which each rank runs under the shim). The caller pickles only; it never loads torch or MPI.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from .. import control
from ..errors import LaunchTimeout, RankFailed, UsageError, WaitTimeout
from ..values import check_seconds
from .attempts import attempt_spec, describe_end
from .mpirun import build_mpirun_argv
from .spawn import run_mpirun
from .spec import spec_from_args

__all__ = ["DIR_ENV", "hint", "launch"]

DIR_ENV = "HPCDIST_LAUNCH_DIR"  # where the private launch directories go (all hosts must see it)
_RUNNER = ("-m", "hpcdist.runtime.pycall")
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


def launch(
    fn: Callable[..., Any],
    *args: Any,
    np: int | None = None,
    backend: str = "auto",
    hostfile: str | None = None,
    timeout: float | None = None,
    **kwargs: Any,
) -> list[Any]:
    """Run `fn(*args, **kwargs)` on `np` ranks with the process group initialised; return their values by rank.

    The ranks run on this machine, or on the hosts of `hostfile` (`np` defaults to its slots), started by the
    mpirun `hpcdist mpirun` uses, each with `hpcdist.init(backend)` done. An argument that is `hpcdist.RANK`
    reaches each rank as its own rank (mp.spawn's first argument). `timeout` (seconds, None: no limit) bounds
    the whole call; Ctrl-C ends the job and raises KeyboardInterrupt here.

    Raises:
        UsageError: `fn` or an argument cannot be sent to the ranks, or the launch options are wrong; raised
            before any process starts.
        RankFailed: a rank raised (the first to fail); the job was ended.
        LaunchTimeout: the ranks did not all return within `timeout`; the job was ended.
    """
    seconds = None if timeout is None else check_seconds(timeout, "hpcdist.launch's timeout", "e.g. timeout=600")
    if hostfile is None and not (isinstance(np, int) and not isinstance(np, bool) and np >= 1):
        raise UsageError(f"hpcdist.launch needs the number of ranks as np=N (N >= 1), got np={np!r}; e.g. np=2")
    call = _pack(fn, args, kwargs)
    name = getattr(fn, "__qualname__", repr(fn))
    spec, _ = spec_from_args(_options(np, hostfile, [sys.executable, *_RUNNER]))
    parent = os.environ.get(DIR_ENV) or (os.getcwd() if spec.keepalive else None)  # keepalive: several hosts
    directory = tempfile.mkdtemp(prefix="hpcdist-launch-", dir=parent)  # mode 0700: private to this user
    try:
        call_path = os.path.join(directory, "call.pkl")
        with open(call_path, "wb") as handle:
            pickle.dump({"path": list(sys.path), "backend": backend, "call": call}, handle)
        template = os.path.join(directory, "rank-{rank}.pkl")
        spec = dataclasses.replace(spec, program=(*spec.program, call_path, template))
        token = control.new_token()
        argv = build_mpirun_argv(attempt_spec(spec, None, token))
        size = spec.np or 0
        try:
            outcome = run_mpirun(argv, token, timeout=seconds)
        except WaitTimeout:
            done = sorted(_outcomes(template, size))
            raise LaunchTimeout(
                f"hpcdist.launch waited {seconds:g} s for the {size} ranks of {name} to return; "
                f"{_ranks(done)} returned, {_ranks(sorted(set(range(size)) - set(done)))} did not; the job was "
                "ended (give a larger timeout, or find what those ranks wait for)"
            ) from None
        if signal.SIGINT in outcome.signals:  # Ctrl-C: mpirun passed it on and ended the ranks
            raise KeyboardInterrupt
        return _results(_outcomes(template, size), size, name, describe_end(outcome), directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _pack(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """cloudpickle bytes of (fn, args, kwargs).

    Raises:
        UsageError: `fn` is not callable, or a part cannot be pickled; the message names the part and what to do.
    """
    import cloudpickle

    if not callable(fn):
        raise UsageError(
            f"hpcdist.launch runs a function, but its first argument is {type(fn).__name__} {fn!r}; pass the "
            "function itself, e.g. hpcdist.launch(train, world_size, np=2)"
        )
    try:
        return bytes(cloudpickle.dumps((fn, args, kwargs)))
    except Exception:  # noqa: BLE001 - find the part that cannot be sent, below
        pass
    name = getattr(fn, "__qualname__", repr(fn))
    parts = [(f"the function {name}", fn)]
    parts += [(f"argument {index} of {name}", value) for index, value in enumerate(args)]
    parts += [(f"keyword argument {key}= of {name}", value) for key, value in kwargs.items()]
    for what, value in parts:
        try:
            cloudpickle.dumps(value)
        except Exception as exc:  # noqa: BLE001 - pickle raises TypeError, PicklingError, AttributeError, ...
            fix = (
                "create such objects (locks, open files, sockets, CUDA state) inside the function, not around it"
                if value is fn
                else "pass what it is made from (a path, numbers, a config) and build it inside the function"
            )
            raise UsageError(
                f"hpcdist.launch cannot send {what} ({type(value).__name__}) to the ranks: {exc}; {fix}"
            ) from None
    raise UsageError(f"hpcdist.launch cannot send the call of {name} to the ranks; check that its parts pickle")


def _options(np: int | None, hostfile: str | None, program: list[str]) -> argparse.Namespace:
    """`hpcdist mpirun`'s options for this launch: its defaults, untagged output, and no restarts."""
    return argparse.Namespace(
        program=program,
        np=np,
        hostfile=hostfile,
        hosts=None,
        include=None,
        exclude=None,
        export=[],
        mca=[],
        bind_to="none",
        map_by="slot",
        bind="none",
        oversubscribe=False,
        probe_fabrics=False,
        no_shim=False,
        mpirun=None,
        mpi=None,
        tag=False,
        log_dir=None,
        ranks=None,
        tail=None,
    )


def _outcomes(template: str, size: int) -> dict[int, dict[str, Any]]:
    """The outcomes the ranks wrote, by rank."""
    found = {}
    for rank in range(size):
        try:
            with open(template.format(rank=rank), "rb") as handle:
                found[rank] = pickle.load(handle)
        except FileNotFoundError:
            continue
    return found


def _results(outcomes: dict[int, dict[str, Any]], size: int, name: str, end: str, directory: str) -> list[Any]:
    """The ranks' values in rank order.

    Raises:
        RankFailed: a rank raised (the earliest), or a rank ended without writing its outcome.
    """
    failed = [o for o in outcomes.values() if not o["ok"]]
    if failed:
        first = min(failed, key=lambda o: (o["time"], o["rank"]))
        error = RankFailed(
            first["rank"], first["host"], first["kind"], first["message"], first["traceback"], hint(first["message"])
        )
        error.exception = _load(first["exception"])
        raise error from error.exception
    missing = [rank for rank in range(size) if rank not in outcomes]
    if missing:
        raise RankFailed(
            missing[0],
            "?",
            "no outcome",
            f"{_ranks(missing)} of {name} ended without returning or raising (mpirun: {end}); its output above "
            f"says why (killed? a host that cannot see {directory}? then set {DIR_ENV} to a directory all hosts "
            "share)",
            "",
        )
    return [pickle.loads(outcomes[rank]["value"]) for rank in range(size)]


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


def _ranks(ranks: list[int]) -> str:
    """'rank 2', 'ranks 0, 1', 'no rank'."""
    if not ranks:
        return "no rank"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
