"""Restarts of `hpcdist mpirun`: run the launch up to 1 + N times, deciding after each attempt whether to go on.

The decision is pure (`decide`): never after success, a usage error (status 2), a signal to hpcdist mpirun
itself, or a job whose ranks did not all initialise (a restart cannot fix a start-up failure); a lost
host is left out of the next attempt when the other hosts' slots still hold the ranks. `run_attempts`
carries the decisions out, with one back-off (waits.Backoff) between attempts.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..control import CONTROL_ENV, MAX_RESTARTS_ENV, RESTART_VARS, RUN_ID_ENV, new_token
from ..errors import UsageError
from ..families.base import MpirunSpec
from ..hosts import HostSlots, hosts_text
from ..ranklist import ranks_text
from ..status import describe_status
from ..waits import Backoff
from .hostfile import parse_hostfile, read_hostfile_text, total_slots
from .outcome import USAGE_STATUS, LaunchOutcome

__all__ = [
    "Attempt",
    "Decision",
    "RestartPolicy",
    "attempt_spec",
    "check_policy",
    "decide",
    "describe_end",
    "job_hosts",
    "run_attempts",
    "summary",
]

INTERRUPTED_STATUS = 130  # a shell's status for a command ended by Ctrl-C (128 + SIGINT)
_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # sent to hpcdist mpirun: the user wants it to end


@dataclass(frozen=True)
class RestartPolicy:
    """--max-restarts, --min-np, and the back-off between attempts (seconds, doubling up to `max_pause`)."""

    max_restarts: int = 0
    min_np: int | None = None
    pause: float = 1.0
    max_pause: float = 30.0


@dataclass(frozen=True)
class Attempt:
    """One attempt that ran: its index, where it ran, and how it ended."""

    index: int
    np: int | None
    hosts: tuple[HostSlots, ...]
    outcome: LaunchOutcome


@dataclass(frozen=True)
class Decision:
    """What to do after an attempt: restart with `spec`, or stop, saying `why` when that is worth saying."""

    restart: bool
    why: str = ""
    spec: MpirunSpec | None = None


def check_policy(policy: RestartPolicy, np: int | None, on_failure: str = "end") -> None:
    """Raise UsageError for --max-restarts/--min-np values that cannot work together with -np and --on-failure.

    --min-np is the floor of both ways to go on without a lost rank: a restart that leaves a lost host out, and the
    survivors' shrink (below it they end the job, which --max-restarts then starts again).
    """
    if policy.min_np is None:
        return
    if policy.max_restarts == 0 and on_failure != "shrink":
        raise UsageError(
            "--min-np only matters when the job goes on without a lost rank; give --max-restarts N (a restart leaves "
            "a lost host out) or --on-failure shrink (the survivors carry on) too"
        )
    if np is not None and policy.min_np > np:
        raise UsageError(f"--min-np {policy.min_np} is more than -np {np}; give --min-np at most {np}")


def attempt_spec(
    spec: MpirunSpec, index: int | None, token: str | None, run_id: str | None = None, max_restarts: int = 0
) -> MpirunSpec:
    """`spec` with the restart counters (index None: none), the run id and the control token exported to every rank."""
    ours = {name: str(index) for name in RESTART_VARS if index is not None} | ({CONTROL_ENV: token} if token else {})
    ours |= ({RUN_ID_ENV: run_id} if run_id else {}) | ({MAX_RESTARTS_ENV: str(max_restarts)} if max_restarts else {})
    kept = tuple((name, value) for name, value in spec.env if name not in ours)
    return replace(spec, env=kept + tuple(ours.items()))


def describe_end(outcome: LaunchOutcome) -> str:
    """'exit code 0', 'exit code 137 (rank 1 on n1 killed by SIGKILL)', '… (lost host n2)'.

    The ranks named are the failure's causes: a rank that failed because a peer had gone is left out when the
    peer is known (its own lines follow in the failure summary).
    """
    details = [outcome.failures(outcome.causes())] if outcome.failed else []
    if outcome.lost_hosts:
        details.append(f"lost host {', '.join(outcome.lost_hosts)}")
    return describe_status(outcome.status) + (f" ({'; '.join(details)})" if details else "")


def decide(
    spec: MpirunSpec, hosts: Sequence[HostSlots], outcome: LaunchOutcome, index: int, policy: RestartPolicy
) -> Decision:
    """Whether to run attempt `index + 1` after attempt `index` ended with `outcome`, and with which spec."""
    if outcome.status == 0:
        return Decision(False)
    stop = [sig for sig in outcome.signals if sig in _STOPS]
    if stop:
        return Decision(False, f"not restarting: hpcdist mpirun was sent {signal.Signals(stop[0]).name}")
    if outcome.status == USAGE_STATUS:
        return Decision(False, "not restarting: exit status 2 is a usage error; a restart cannot fix that")
    if index >= policy.max_restarts:
        return Decision(False, f"not restarting: --max-restarts {policy.max_restarts} used up")
    if outcome.lost_hosts:
        return _without_lost(spec, hosts, outcome.lost_hosts, policy)
    missing = _not_ready(outcome, spec.np)
    if missing:
        return Decision(False, f"not restarting: {missing}; a restart cannot fix that")
    return Decision(True, spec=spec)


def _not_ready(outcome: LaunchOutcome, np: int | None) -> str:
    """'rank 2 never initialised (rank 2 on n1 failed with exit code 3)' when some rank never said ready, else ''."""
    size = outcome.world_size or np
    if size is None:
        return "" if outcome.ready else "no rank initialised its process group (none said so before the job ended)"
    missing = [rank for rank in range(size) if rank not in outcome.ready]
    if not missing:
        return ""
    failed = [rank for rank in missing if rank in outcome.failed]
    if not failed:
        they = "it" if len(missing) == 1 else "they"
        return f"{ranks_text(missing)} never initialised (the job ended before {they} did)"
    others = len(missing) - len(failed)
    more = f"; {others} other rank{'s' if others > 1 else ''} did not initialise either" if others else ""
    return f"{ranks_text(failed)} never initialised ({outcome.failures(failed)} first{more})"


def _without_lost(spec: MpirunSpec, hosts: Sequence[HostSlots], lost: Sequence[str], policy: RestartPolicy) -> Decision:
    """Restart on the hosts that are left when their slots hold -np (or --min-np) ranks; else stop, saying why."""
    gone = ", ".join(lost)
    if not hosts:
        return Decision(
            False,
            f"not restarting: host {gone} was lost, and mpirun reads the Slurm allocation's hosts itself, so hpcdist "
            "cannot leave it out; give the hosts with --hostfile or -H to let a restart run without it",
        )
    left = tuple(h for h in hosts if h.host not in lost)
    if len(left) == len(hosts):
        return Decision(
            False,
            f"not restarting: host {gone} was lost but is not one of the hosts given "
            f"({', '.join(h.host for h in hosts)}), so it cannot be left out; check the host names",
        )
    if not left:
        return Decision(False, f"not restarting: every host was lost ({gone})")
    slots = total_slots(left)
    np = spec.np if spec.np is not None else total_slots(hosts)
    if slots < np and not spec.oversubscribe:
        if policy.min_np is None or slots < policy.min_np:
            floor = f"--min-np {policy.min_np}" if policy.min_np is not None else f"-np {np}"
            hint = "" if policy.min_np is not None else " (give --min-np M to go on with fewer ranks)"
            return Decision(
                False,
                f"not restarting: host {gone} was lost and the {slots} slots left on "
                f"{', '.join(h.host for h in left)} cannot hold {floor}{hint}",
            )
        np = slots
    note = f"leaving out host {gone}" + (f", with {np} ranks instead of {spec.np}" if np != spec.np else "")
    return Decision(True, note, replace(spec, np=np, hostfile=None, hosts=left))


def job_hosts(spec: MpirunSpec) -> tuple[HostSlots, ...]:
    """The hosts the launch may use: -H's, or the hostfile's (read again), or none (a Slurm allocation)."""
    if spec.hosts or spec.hostfile is None:
        return spec.hosts
    return parse_hostfile(read_hostfile_text(spec.hostfile), spec.hostfile)


def summary(attempts: Sequence[Attempt], total: int) -> list[str]:
    """One line per attempt: where it ran and how it ended."""
    lines = [f"hpcdist: {len(attempts)} attempts (of up to {total}):"]
    for attempt in attempts:
        where = hosts_text(attempt.hosts)
        ranks = f"{attempt.np} ranks" if attempt.np is not None else "every slot"
        lines.append(
            f"hpcdist:   attempt {attempt.index + 1}/{total}: {describe_end(attempt.outcome)}; "
            f"{ranks}{f' on {where}' if where else ''}"
        )
    return lines


def run_attempts(
    spec: MpirunSpec,
    policy: RestartPolicy,
    build: Callable[[MpirunSpec], list[str]],
    run: Callable[[list[str], str], LaunchOutcome],
) -> int:
    """Run the launch, restarting it as `decide` says; return the last attempt's status.

    `build` turns a spec into the mpirun argv and `run` runs it with a control token (spawn.run_mpirun).
    """
    total = policy.max_restarts + 1
    backoff = Backoff(policy.pause, policy.max_pause)
    attempts: list[Attempt] = []
    current, hosts = spec, job_hosts(spec) if policy.max_restarts else spec.hosts
    run_id = new_token()  # TORCHELASTIC_RUN_ID: one for the launch, as torchrun keeps its own over restarts
    while True:
        index = len(attempts)
        counted = index if policy.max_restarts else None  # without restarts, the counters are left unset
        spec_now = attempt_spec(current, counted, token := new_token(), run_id, policy.max_restarts)
        outcome = run(build(spec_now), token)
        attempts.append(Attempt(index, current.np, hosts, outcome))
        if signal.SIGINT in outcome.signals:
            ranks = f"all {current.np} ranks" if current.np is not None else "every rank"
            _say(
                f"hpcdist: interrupted (Ctrl-C); ended {ranks} of the job (attempt {index + 1} of {total})"
                if policy.max_restarts
                else f"hpcdist: interrupted (Ctrl-C); ended {ranks} of the job"
            )
            return INTERRUPTED_STATUS
        decision = decide(current, hosts, outcome, index, policy)
        if policy.max_restarts and (outcome.status != 0 or index > 0):
            ending = f"hpcdist: attempt {index + 1}/{total} ended with {describe_end(outcome)}"
            if decision.restart:
                note = f" ({decision.why})" if decision.why else ""
                _say(f"{ending}; restarting in {backoff.upcoming():.1f} s{note}")
            else:
                _say(f"{ending}{'; ' + decision.why if decision.why else ''}")
        if not decision.restart or decision.spec is None:
            break
        try:
            backoff.pause()
        except KeyboardInterrupt:
            _say("hpcdist: interrupted during the back-off; not restarting")
            return INTERRUPTED_STATUS
        current = decision.spec
        hosts = current.hosts or hosts
    if len(attempts) > 1:
        _say("\n".join(summary(attempts, total)))
    return attempts[-1].outcome.status


def _say(text: str) -> None:
    """A line of hpcdist mpirun's own on stderr."""
    print(text, file=sys.stderr, flush=True)
