"""A submitted job of Grid Engine, PBS, LSF or Flux as its scheduler's commands show it: asked (with a timeout) in the
words its plug-in gives (`hpcdist.schedulers`), which also reads their answers.
"""

from __future__ import annotations

import shlex
import time

from ..errors import UsageError
from ..proctree import capture
from ..schedulers.base import Scheduler
from ..waits import Backoff, poll_until
from .slurmjob import FINAL_STATES, SCONTROL_SECONDS, UnknownJob

__all__ = ["cancel", "state", "wait"]


def _run(scheduler: Scheduler, argv: tuple[str, ...]) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of one of `scheduler`'s commands.

    Raises:
        UsageError: the command is missing or did not answer in time.
    """
    status, out, err = capture(argv, SCONTROL_SECONDS)
    if status is None:
        raise UsageError(
            f"`{shlex.join(argv)}` did not answer within {SCONTROL_SECONDS:g} s: {scheduler.title}'s server cannot be "
            f"reached; check `{scheduler.ping}`, then try again"
        )
    if status == 127:
        raise UsageError(f"{argv[0]} not found on PATH; run this where {scheduler.title}'s commands are (a login node)")
    return status, out, err


def state(scheduler: Scheduler, job_id: str) -> str:
    """The job's state now, in the handle's words (PENDING, RUNNING, COMPLETED, …).

    Raises:
        UnknownJob: the scheduler no longer knows the job (Grid Engine forgets one as it ends).
        UsageError: its command failed, or printed what its plug-in cannot read.
    """
    argv = scheduler.state_argv(job_id)
    found = scheduler.job_state(job_id, *_run(scheduler, argv))
    if found is None:
        raise UnknownJob(f"{scheduler.title} knows no job {job_id} any more")
    return found


def cancel(scheduler: Scheduler, job_id: str) -> None:
    """End the job, or take it out of the queue.

    Raises:
        UsageError: the command is missing, did not answer, or refused.
    """
    argv = scheduler.cancel_argv(job_id)
    status, _, err = _run(scheduler, argv)
    if status != 0:
        lines = err.strip().splitlines()
        raise UsageError(
            f"`{shlex.join(argv)}` failed ({lines[-1] if lines else f'exit status {status}'}); check the job with "
            f"`{shlex.join(scheduler.state_argv(job_id))}`"
        )


def wait(scheduler: Scheduler, job_id: str, timeout: float | None) -> str:
    """Poll the job's state until it has ended (None: no time limit); its last state.

    Raises:
        UnknownJob: the scheduler forgot the job (it has ended).
        WaitTimeout: `timeout` seconds passed first; the message names the job and its state.
        UsageError: as state.
    """
    latest: list[str] = []

    def ended() -> bool:
        latest[:] = [state(scheduler, job_id)]
        return latest[0] in FINAL_STATES

    poll_until(
        ended,
        None if timeout is None else time.monotonic() + timeout,
        lambda: (
            f"hpcdist waited {timeout or 0:g} s for {scheduler.title} job {job_id} to end; it is still "
            f"{latest[0] if latest else 'unknown'}; wait longer (a larger timeout)"
        ),
        backoff=Backoff(0.5, 5.0),
    )
    return latest[0]
