"""The one restart policy: whether a failed attempt runs again, after how long, and what hpcdist says about it.

`hpcdist mpirun --max-restarts N` asks `decide` after each attempt (execute.py carries it out); a generated batch
script's loop asks the same policy through `python -m hpcdist.launching.restarts ATTEMPT STATUS MAX_RESTARTS`, which
prints the one line about the attempt and, when it is to run again, the seconds to pause first. The rules, for both:
never after success or a usage error (status 2), never past N restarts, pausing 1 s, 2 s, 4 s ... at most 30 s.
Only `hpcdist mpirun` knows more (it heard the ranks): it never restarts after a signal to itself or when some rank
never initialised (a restart cannot fix a start-up failure), and it leaves a lost host out of the next attempt when
the other hosts' slots still hold the ranks (`min_np`: --min-np, the fewest it may go on with).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import proctree
from ..errors import UsageError
from ..families.base import MpirunSpec
from ..hosts import HostSlots, hosts_text
from ..ranklist import ranks_text
from ..records import record, replace
from ..status import describe_status
from ..values import parse_whole
from .hostfile import parse_hostfile, read_hostfile_text, total_slots
from .outcome import USAGE_STATUS, LaunchOutcome

if TYPE_CHECKING:
    from .world import World

__all__ = [
    "INTERRUPTED_STATUS",
    "Attempt",
    "Decision",
    "RestartPolicy",
    "check_restarts",
    "decide",
    "describe_end",
    "job_hosts",
    "main",
    "said",
    "summary",
    "verdict",
]

INTERRUPTED_STATUS = 130  # a shell's status for a command ended by Ctrl-C (128 + SIGINT)


@record(frozen=True)
class RestartPolicy:
    """How many restarts (--max-restarts), and the pauses before them: `pause` seconds, doubling up to `max_pause`."""

    max_restarts: int = 0
    pause: float = 1.0
    max_pause: float = 30.0

    @property
    def attempts(self) -> int:
        """The most attempts the launch runs: the first and its restarts."""
        return self.max_restarts + 1

    def pause_after(self, index: int) -> float:
        """The seconds to pause after attempt `index` (0 first) before the next: 1, 2, 4 ... at most 30."""
        return min(self.max_pause, self.pause * 2 ** min(index, 64))


@record(frozen=True)
class Attempt:
    """One attempt that ran: its index, where it ran, and how it ended."""

    index: int
    np: int | None
    hosts: tuple[HostSlots, ...]
    outcome: LaunchOutcome


@record(frozen=True)
class Decision:
    """What to do after an attempt: restart with `spec`, or stop, saying `why` when that is worth saying."""

    restart: bool
    why: str = ""
    spec: MpirunSpec | None = None


def check_restarts(max_restarts: int, min_np: int | None, np: int | None, on_failure: str = "end") -> None:
    """Raise UsageError for --max-restarts/--min-np values that cannot work together with -np and --on-failure.

    --min-np is the floor of both ways to go on without a lost rank: a restart that leaves a lost host out, and the
    survivors' shrink (below it they end the job, which --max-restarts then starts again).
    """
    if min_np is None:
        return
    if max_restarts == 0 and on_failure != "shrink":
        raise UsageError(
            "--min-np only matters when the job goes on without a lost rank; give --max-restarts N (a restart leaves "
            "a lost host out) or --on-failure shrink (the survivors carry on) too"
        )
    if np is not None and min_np > np:
        raise UsageError(f"--min-np {min_np} is more than -np {np}; give --min-np at most {np}")


def verdict(status: int, index: int, policy: RestartPolicy) -> Decision:
    """The rules every launch keeps, by the status alone: stop after success, a usage error or the last restart."""
    if status == 0:
        return Decision(False)
    if status == USAGE_STATUS:
        return Decision(False, "not restarting: exit status 2 is a usage error; a restart cannot fix that")
    if index >= policy.max_restarts:
        return Decision(False, f"not restarting: --max-restarts {policy.max_restarts} used up")
    return Decision(True)


def decide(
    spec: MpirunSpec,
    hosts: Sequence[HostSlots],
    outcome: LaunchOutcome,
    index: int,
    policy: RestartPolicy,
    min_np: int | None = None,
) -> Decision:
    """Whether `hpcdist mpirun` runs attempt `index + 1` after attempt `index` ended with `outcome`, with which spec."""
    stop = [sig for sig in outcome.signals if sig in proctree.STOPS]
    if outcome.status != 0 and stop:
        return Decision(False, f"not restarting: hpcdist mpirun was sent {signal.Signals(stop[0]).name}")
    ruled = verdict(outcome.status, index, policy)
    if not ruled.restart:
        return ruled
    if outcome.lost_hosts:
        return _without_lost(spec, hosts, outcome.lost_hosts, min_np)
    missing = _not_ready(outcome, spec.np)
    if missing:
        return Decision(False, f"not restarting: {missing}; a restart cannot fix that")
    return Decision(True, spec=spec)


def said(index: int, policy: RestartPolicy, end: str, decision: Decision) -> str:
    """The one line about attempt `index` that ended with `end` ('exit code 1 (…)'), and what comes next."""
    ending = f"hpcdist: attempt {index + 1}/{policy.attempts} ended with {end}"
    if decision.restart:
        note = f" ({decision.why})" if decision.why else ""
        return f"{ending}; restarting in {policy.pause_after(index):.1f} s{note}"
    return f"{ending}; {decision.why}" if decision.why else ending


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


def _without_lost(spec: MpirunSpec, hosts: Sequence[HostSlots], lost: Sequence[str], min_np: int | None) -> Decision:
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
        if min_np is None or slots < min_np:
            floor = f"--min-np {min_np}" if min_np is not None else f"-np {np}"
            hint = "" if min_np is not None else " (give --min-np M to go on with fewer ranks)"
            return Decision(
                False,
                f"not restarting: host {gone} was lost and the {slots} slots left on "
                f"{', '.join(h.host for h in left)} cannot hold {floor}{hint}",
            )
        np = slots
    note = f"leaving out host {gone}" + (f", with {np} ranks instead of {spec.np}" if np != spec.np else "")
    return Decision(True, note, replace(spec, np=np, hostfile=None, hosts=left))


def describe_end(outcome: LaunchOutcome) -> str:
    """'exit code 0', 'exit code 137 (rank 1 on n1 killed by SIGKILL)', '… (lost host n2)'.

    The ranks named are the failure's causes: a rank that failed because a peer had gone is left out when the
    peer is known (its own lines follow in the failure summary).
    """
    details = [outcome.failures(outcome.causes())] if outcome.failed else []
    if outcome.lost_hosts:
        details.append(f"lost host {', '.join(outcome.lost_hosts)}")
    return describe_status(outcome.status) + (f" ({'; '.join(details)})" if details else "")


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


def main(argv: Sequence[str], world: World) -> int:
    """A batch script's restart loop asks here after an attempt ended: `ATTEMPT STATUS MAX_RESTARTS` (whole numbers,
    the attempt 0 first, the step's exit status); says the one line about it on stderr, and for a restart prints the
    seconds to pause on stdout and returns 0; returns 1 to stop (2 for arguments that are not three whole numbers)."""
    numbers = [parse_whole(word) for word in argv]
    if len(numbers) != 3 or None in numbers:
        world.say("usage: python -m hpcdist.launching.restarts ATTEMPT STATUS MAX_RESTARTS (whole numbers)")
        return 2
    index, status, max_restarts = (number or 0 for number in numbers)
    policy = RestartPolicy(max_restarts)
    decision = verdict(status, index, policy)
    if status != 0:
        world.say(said(index, policy, describe_status(status), decision))
    if not decision.restart:
        return 1
    world.show(f"{policy.pause_after(index):g}\n")
    return 0


if __name__ == "__main__":
    from .world import World

    sys.exit(main(sys.argv[1:], World.current()))
