"""A LaunchPlan carried out: the one attempts loop (run, watch, outcome, decision), and the dry run and script.

`execute` runs the plan's launch for `hpcdist mpirun` and `hpcdist.launch` alike: each attempt gets a fresh control
token (one run id for them all), its command line built by `attempt_spec` and `build_mpirun_argv`, run and watched
by `spawn.run_mpirun` with the plan's watch options (its heartbeat, shrink, the family's quirks), and after it the
restart policy decides (restarts.py). `dry_run` is the text `hpcdist mpirun --dry-run` prints: the command the first
attempt runs, its values made per run shown as named placeholders (PLACEHOLDERS); `script` is what `--script` writes.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from collections.abc import Callable

from .. import proctree, schedulers
from ..contract import DRY_RUN_TOKEN, new_token
from ..errors import UsageError
from ..families.base import MpirunSpec
from ..hosts import hosts_text
from ..records import record
from .hostnames import check_names_resolve
from .mpirun import build_mpirun_argv
from .outcome import LaunchOutcome
from .output import OutputRouter, shows_banners
from .plan import LaunchPlan, attempt_spec
from .restarts import INTERRUPTED_STATUS, Attempt, decide, describe_end, job_hosts, said, summary
from .world import World

__all__ = ["PLACEHOLDERS", "DryRun", "Ending", "Script", "command", "dry_run", "execute", "script"]

# the values made afresh for each run, as the dry run shows them: still one shell word each, whatever surrounds them
_STOPPED: dict[int, str] = {  # how hpcdist mpirun was told to end the job: said in its one line
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGTERM: "got SIGTERM and passed it on",
    signal.SIGHUP: "got SIGHUP and passed SIGTERM on",
}
PLACEHOLDERS = {"token": DRY_RUN_TOKEN, "run_id": "<per-launch run id>"}  # a rank takes the token's for none
Runner = Callable[..., LaunchOutcome]  # spawn.run_mpirun, or a test's stand-in


@record(frozen=True)
class Ending:
    """How a launch ended: its status (hpcdist mpirun's), and its attempts, the last one's outcome last."""

    status: int
    attempts: tuple[Attempt, ...]

    @property
    def outcome(self) -> LaunchOutcome:
        """The last attempt's outcome."""
        return self.attempts[-1].outcome

    def as_dict(self) -> dict[str, object]:
        """How the launch ended, for tools (`--outcome FILE.json`): its status, the last attempt's outcome, and every
        attempt's (one, without --max-restarts)."""
        attempts = [
            {"attempt": a.index + 1, "np": a.np, "hosts": hosts_text(a.hosts), **a.outcome.as_dict()}
            for a in self.attempts
        ]
        return {"status": self.status, **attempts[-1], "attempts": attempts}


@record(frozen=True)
class DryRun:
    """What `--dry-run` prints: the command line (stdout), and a note about it (stderr; empty: none)."""

    line: str
    note: str = ""


@record(frozen=True)
class Script:
    """What `--script` writes: the launch's argv, the variables the script exports, and how it takes arguments."""

    argv: tuple[str, ...]
    exports: tuple[tuple[str, str], ...]
    append: bool  # arguments given to the script are appended to the program's (not with app contexts)
    root_check: bool  # the script lets Open MPI run as root when whoever runs it is root


def command(
    launch: LaunchPlan,
    token: str | None = None,
    run_id: str | None = None,
    *,
    spec: MpirunSpec | None = None,
    index: int = 0,
) -> list[str]:
    """The command line of attempt `index` of `launch` (run as `spec`: the plan's, or a restart's), with its control
    token and the run id (None: a launch hpcdist does not watch, such as a probe job's or a batch script's)."""
    return build_mpirun_argv(attempt_spec(launch, spec or launch.spec, index, token, run_id))


def dry_run(launch: LaunchPlan) -> DryRun:
    """The command the launch's first attempt runs, exactly, with PLACEHOLDERS for the values made per run."""
    argv = command(launch, PLACEHOLDERS["token"], PLACEHOLDERS["run_id"])
    note = ""
    if launch.policy.max_restarts:
        note = (
            f"hpcdist: note: this is attempt 1 of up to {launch.policy.attempts}; hpcdist mpirun itself runs the "
            "restarts (exporting the attempt's index in both counters), so run it, not this line, to get them"
        )
    return DryRun(shlex.join(argv) + "\n", note)


def script(launch: LaunchPlan) -> Script:
    """The launch as a reusable script runs it: one mpirun command, the contract exported by the script.

    Raises:
        UsageError: the launch restarts, which only a running hpcdist mpirun does.
    """
    if launch.policy.max_restarts:
        raise UsageError(
            "--max-restarts is carried out by hpcdist mpirun while it runs, and --script writes a single mpirun "
            "command; put `hpcdist mpirun --max-restarts N ...` in your script instead (or use `hpcdist sbatch "
            "--max-restarts N`)"
        )
    argv = build_mpirun_argv(launch.spec)
    return Script(tuple(argv), launch.exports, not launch.spec.contexts, launch.root_check)


def _ended(launch: LaunchPlan, ending: Ending) -> Ending:
    """`ending`, written first as JSON to the launch's --outcome file when it asks for one.

    Raises:
        UsageError: the file cannot be written (said after the job ended, which it did).
    """
    path = launch.options.outcome
    if path is not None:
        try:
            with open(path + ".tmp", "w") as handle:
                json.dump(ending.as_dict(), handle, indent=1)
            os.replace(path + ".tmp", path)
        except OSError as exc:
            raise UsageError(
                f"cannot write --outcome {path}: {exc.strerror or exc}; give a file in a writable directory"
            ) from None
    return ending


def execute(
    launch: LaunchPlan,
    world: World,
    timeout: float | None = None,
    caller_reports: bool = False,
    run: Runner | None = None,
) -> Ending:
    """Run the launch, restarting it as the policy decides; return how it ended.

    `timeout` (seconds, None: none) bounds each attempt; `caller_reports` (hpcdist.launch): the caller tells the
    failure itself, so no failure summary and no line about Ctrl-C are printed here. `run` runs one attempt's
    command line (None: spawn.run_mpirun, loaded here: the dry run never starts a process).

    Raises:
        UsageError: a host of the launch does not resolve here.
        WaitTimeout: an attempt ran past `timeout`; it was ended.
    """
    from . import spawn

    check_names_resolve(launch.options, world)  # a misspelt host is named here, not as a daemon that died
    run = run or spawn.run_mpirun
    policy = launch.policy
    attempts: list[Attempt] = []
    current = launch.spec
    hosts = job_hosts(current) if policy.max_restarts else current.hosts
    # TORCHELASTIC_RUN_ID: one for the launch, as torchrun keeps its own over restarts; in a scheduler's job, the
    # job's id, the same for each step a batch script runs (its restarts) and after a requeue
    run_id = schedulers.job_id(world.environ) or new_token()
    if launch.note:
        world.say(launch.note)
    while True:
        index = len(attempts)
        token = new_token()
        router = None
        if launch.routed:
            router = OutputRouter(launch.output, current.np, hide_banners=not shows_banners(world.environ))
            router.caller_reports = caller_reports
        outcome = run(
            command(launch, token, run_id, spec=current, index=index),
            token,
            router,
            timeout=timeout,
            heartbeat=launch.heartbeat,
            startup=launch.startup,
            shrink=current.fault_tolerance,
            np=current.np,
            family=current.family,
            world=world,
            scheduler_signals=current.slurm,
            spares=launch.contract.spares,
        )
        attempts.append(Attempt(index, current.np, hosts, outcome))
        stop = next((sig for sig in outcome.signals if sig in proctree.STOPS), None)
        if stop is not None:
            if not caller_reports:
                ranks = f"all {current.np} ranks" if current.np is not None else "every rank"
                which = f" (attempt {index + 1} of {policy.attempts})" if policy.max_restarts else ""
                how = _STOPPED[stop]
                if current.slurm and stop != signal.SIGINT:  # Slurm signals every process of the job itself
                    how = f"got {signal.Signals(stop).name}, as the ranks did from Slurm"
                world.say(f"hpcdist: {how}; ended {ranks} of the job{which}")
            return _ended(launch, Ending(128 + stop, tuple(attempts)))
        decision = decide(current, hosts, outcome, index, policy, launch.options.min_np)
        if policy.max_restarts and (outcome.status != 0 or index > 0):
            world.say(said(index, policy, describe_end(outcome), decision))
        if not decision.restart or decision.spec is None:
            break
        try:
            time.sleep(policy.pause_after(index))
        except KeyboardInterrupt:
            world.say("hpcdist: interrupted during the back-off; not restarting")
            return _ended(launch, Ending(INTERRUPTED_STATUS, tuple(attempts)))
        current = decision.spec
        hosts = current.hosts or hosts
    if len(attempts) > 1:
        world.say("\n".join(summary(attempts, policy.attempts)))
    return _ended(launch, Ending(attempts[-1].outcome.status, tuple(attempts)))
