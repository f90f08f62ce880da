"""`hpcdist.launch`: run a Python function on N ranks through hpcdist's mpirun and return their values in rank order.

The function and its arguments travel by cloudpickle (so functions defined in `__main__` or a notebook work), in a
private directory: the caller writes the call, each rank writes its outcome atomically (see `runtime.pycall`,
which each rank runs under the shim). The caller pickles only; it never loads torch or MPI.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import tempfile
from collections.abc import Callable
from typing import Any

from .. import records, settings, settingtable
from ..errors import LaunchTimeout, RankFailed, UsageError, WaitTimeout
from ..launching.execute import execute
from ..launching.options import MpirunOptions
from ..launching.outcome import BLAMED_HOWS, LaunchOutcome
from ..launching.plan import LaunchPlan, plan
from ..launching.restarts import describe_end
from ..launching.world import World
from ..ranklist import ranks_text
from ..values import check_count, check_seconds
from .calls import first_failure, pack, read_outcomes, write_call

__all__ = ["launch", "launch_options"]

_RUNNER = ("-m", "hpcdist.runtime.pycall")
_CALLER = "hpcdist.launch"


def launch(
    fn: Callable[..., Any],
    *args: Any,
    np: int | None = None,
    backend: str = "auto",
    hostfile: str | None = None,
    timeout: float | None = None,
    trace: str | None = None,
    on_failure: str = "end",
    **kwargs: Any,
) -> list[Any]:
    """Run `fn(*args, **kwargs)` on `np` ranks with the process group initialised; return their values by rank.

    The ranks run on this machine, or on the hosts of `hostfile` (`np` defaults to its slots), started by the
    mpirun `hpcdist mpirun` uses, each with `hpcdist.init(backend)` done. An argument that is `hpcdist.RANK`
    reaches each rank as its own rank (mp.spawn's first argument). `timeout` (seconds, None: no limit) bounds
    the whole call; Ctrl-C ends the job and raises KeyboardInterrupt here. Every rank's value comes back, in rank
    order, as from `hpcdist.submit(...).result(all_ranks=True)` (whose plain `result()` is rank 0's value).
    `trace` (a file name) writes every rank's communication calls there, as `hpcdist mpirun --trace` does.
    `on_failure="shrink"` is `hpcdist mpirun --on-failure shrink` (Open MPI's ULFM): a rank that dies or raises
    ends alone, the others carry on, and when every other rank returns, its place in the list holds None.

    Raises:
        UsageError: `fn` or an argument cannot be sent to the ranks, or the launch options are wrong; raised
            before any process starts.
        RankFailed: a rank raised (the first to fail); the job was ended. Under shrink: no rank returned, or one
            that was not lost failed.
        LaunchTimeout: the ranks did not all return within `timeout`; the job was ended.
    """
    seconds = None if timeout is None else check_seconds(timeout, "hpcdist.launch's timeout", "e.g. timeout=600")
    if hostfile is None and np is None:
        raise UsageError("hpcdist.launch needs the number of ranks as np=N (N >= 1), or a hostfile; e.g. np=2")
    if np is not None:
        check_count(np, "hpcdist.launch's np", 1, "e.g. np=2")
    call = pack(fn, args, kwargs, _CALLER)
    name = getattr(fn, "__qualname__", repr(fn))
    world = World.current()
    options = launch_options(world.python, np=np, hostfile=hostfile, trace=trace, on_failure=on_failure)
    spread = plan(options, world, _CALLER).spec.keepalive  # on several hosts: a directory they all see
    parent = settings.launch_dir(world.environ) or (os.getcwd() if spread else None)  # all hosts must see it
    directory = tempfile.mkdtemp(prefix="hpcdist-launch-", dir=parent)  # mode 0700: private to this user
    try:
        call_path = os.path.join(directory, "call.pkl")
        write_call(call_path, call, backend)
        template = os.path.join(directory, "rank-{rank}.pkl")
        options = records.replace(options, program=(*options.program, call_path, template))
        return _run(plan(options, world, _CALLER), world, seconds, name, template, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def launch_options(
    python: str,
    *words: str,
    np: int | None = None,
    hostfile: str | None = None,
    trace: str | None = None,
    on_failure: str = "end",
) -> MpirunOptions:
    """The launch `hpcdist.launch` asks for: each rank runs `python -m hpcdist.runtime.pycall WORDS...` (the call's
    file and the outcomes' template) with hpcdist mpirun's defaults and no restarts; the ranks tag their lines for
    the router, which shows them untagged and keeps the launcher's failure banners (MPI_ABORT was invoked…) off the
    console: RankFailed reports (the DEBUG setting shows them)."""
    return MpirunOptions(
        program=(python, *_RUNNER, *words),
        np=np,
        hostfile=hostfile,
        tag=False,
        tail=0,
        trace=trace,
        on_failure=on_failure,
    )


def _run(
    launch: LaunchPlan, world: World, seconds: float | None, name: str, template: str, directory: str
) -> list[Any]:
    """Run the planned launch and read its ranks' outcomes back.

    Raises:
        KeyboardInterrupt: Ctrl-C ended the job.
        LaunchTimeout: past `seconds`; RankFailed: a rank failed (see launch).
    """
    size = launch.spec.np or 0
    try:
        ending = execute(launch, world, timeout=seconds, caller_reports=True)
    except WaitTimeout:
        done = sorted(read_outcomes(template, size))
        raise LaunchTimeout(
            f"hpcdist.launch waited {seconds:g} s for the {size} ranks of {name} to return; "
            f"{ranks_text(done)} returned, {ranks_text(sorted(set(range(size)) - set(done)))} did not; the job was "
            "ended (give a larger timeout, or find what those ranks wait for)"
        ) from None
    if signal.SIGINT in ending.outcome.signals:  # Ctrl-C: mpirun passed it on and ended the ranks
        raise KeyboardInterrupt
    outcomes = read_outcomes(template, size)
    if launch.spec.fault_tolerance and ending.status == 0 and any(o["ok"] for o in outcomes.values()):
        return _survivors(outcomes, size)
    return _results(outcomes, size, name, ending.outcome, directory)


def _results(
    outcomes: dict[int, dict[str, Any]], size: int, name: str, ended: LaunchOutcome, directory: str
) -> list[Any]:
    """The ranks' values in rank order.

    Raises:
        RankFailed: a rank raised (the earliest); the job hung (the rank the others waited for: kind "hang"); or a
            rank ended without writing its outcome.
    """
    failure = first_failure(outcomes)
    if failure is not None:
        raise failure
    missing = [rank for rank in range(size) if rank not in outcomes]
    hung = [rank for rank in ended.causes() if ended.failed.get(rank, "").startswith(BLAMED_HOWS)]
    if missing and hung:  # the hang report above says where each rank was; this says who the others waited for
        rank = hung[0]
        host = ended.hosts.get(rank) or "an unknown host"
        said = f"{name} hung: rank {rank} on {host} {ended.failed[rank]} (the hang report above shows every rank)"
        raise RankFailed(rank, host, "hang", said, "", what=said)
    end = describe_end(ended)
    if missing:
        said = (
            f"{ranks_text(missing)} of {name} ended without returning or raising (mpirun: {end}); its output above "
            f"says why (killed? sys.exit? a host that cannot see {directory}? then set {settingtable.LAUNCH_DIR.name} "
            "to a directory all hosts share)"
        )
        raise RankFailed(missing[0], "an unknown host", "no outcome", said, "", what=said)
    return [pickle.loads(outcomes[rank]["value"]) for rank in range(size)]


def _survivors(outcomes: dict[int, dict[str, Any]], size: int) -> list[Any]:
    """Under shrink, after every rank that was not lost returned: their values in rank order, None for the lost."""
    values = []
    for rank in range(size):
        outcome = outcomes.get(rank)
        values.append(pickle.loads(outcome["value"]) if outcome is not None and outcome["ok"] else None)
    return values
