"""`hpcdist bench recovery`'s request and results (pure): the ways of recovering, their jobs, the step log's reading.

Every row runs the same job, `hpcdist run ddp` over gloo with a step log, and SIGKILLs the same rank at the same step
of epoch 2; a row differs only in how the job recovers: the survivors shrink and carry on, `hpcdist mpirun
--max-restarts 1` relaunches every rank from the last checkpoint, or torchrun's elastic agent does. The step log
says when each step completed, so recovery is timed from the kill to the next step completed. bench/recovery_run.py
launches the jobs and kills the rank.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..records import asdict, record
from ..workloads.steplog import LoggedStep
from .plan import COLLECTIVE_OPTIONS, BenchOptions, check_counts, parse_rows

__all__ = [
    "EPOCHS",
    "KILL_EPOCH",
    "KILL_STEP",
    "ROWS",
    "SAMPLES",
    "Outcome",
    "RecoveryPlan",
    "Row",
    "job_argv",
    "outcome",
    "recovery_plan",
    "table_lines",
]

SAMPLES = 16384  # 128 steps per epoch at 4 ranks: epoch 2 is still running when its step KILL_STEP is seen
BATCH = 32
EPOCHS = 3
KILL_EPOCH, KILL_STEP = 2, 32  # the victim (the last rank) is killed once rank 0 has logged this step
MAX_RANKS = 64


@record(frozen=True)
class Row:
    """One way of recovering: its launcher, whether a rank is killed at all, the variable naming a rank, a label."""

    name: str
    launcher: str  # "hpcdist" or "torchrun"
    kill: bool
    rank_var: str  # the rank's variable in its environment, by which its process is found
    label: str
    env: tuple[tuple[str, str], ...] = ()  # set for the launcher


ROWS = {
    row.name: row
    for row in (
        Row(
            "shrink",
            "hpcdist",
            True,
            "OMPI_COMM_WORLD_RANK",
            "hpcdist mpirun --on-failure shrink: the survivors agree, shrink and carry on from memory (ULFM)",
        ),
        Row(
            "mpirun",
            "hpcdist",
            True,
            "OMPI_COMM_WORLD_RANK",
            "hpcdist mpirun --max-restarts 1: every rank relaunched (after its 1 s pause), resumed from the "
            "epoch's checkpoint",
        ),
        Row(
            "torchrun",
            "torchrun",
            True,
            "RANK",
            "torchrun --max-restarts 1 --standalone: its agent restarts every worker, resumed from the checkpoint "
            "(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: on the agent's shared store a restarted gloo group can read its "
            "predecessor's addresses, pytorch/pytorch#135712)",
            (("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),),
        ),
        Row("uncut", "hpcdist", False, "OMPI_COMM_WORLD_RANK", "hpcdist mpirun, no rank killed: the job's own time"),
    )
}


@record(frozen=True)
class RecoveryPlan:
    """A checked `hpcdist bench recovery` request."""

    ranks: int
    rows: tuple[str, ...]
    repeats: int
    timeout: float  # seconds one job may take, from launch to exit
    json: bool = False


def recovery_plan(options: BenchOptions) -> RecoveryPlan:
    """Check `hpcdist bench recovery`'s options; every mistake is a UsageError."""
    foreign = [flag for flag, name in COLLECTIVE_OPTIONS if getattr(options, name) is not None]
    foreign += [flag for flag, on in (("--reference", options.reference), ("--report", options.report)) if on]
    foreign += ["--backend"] if options.backend != "auto" else []
    foreign += ["--plot"] if options.plot is not None else []
    foreign += ["--hosts"] if options.hosts is not None else []
    if foreign:
        raise UsageError(
            f"bench recovery times whole jobs that lose a rank, so {', '.join(foreign)} means nothing to it; drop it "
            "(it takes --ranks, --rows, --repeats, --timeout and --json)"
        )
    ranks = 4
    if options.ranks is not None:
        if not options.ranks.strip().isdigit() or not 2 <= int(options.ranks) <= MAX_RANKS:
            raise UsageError(
                f"--ranks {options.ranks}: bench recovery runs one rank count, from 2 to {MAX_RANKS} (one rank is "
                "killed, the others recover), e.g. --ranks 4"
            )
        ranks = int(options.ranks)
    rows = tuple(ROWS) if options.rows is None else parse_rows(options.rows, ROWS)
    repeats = 3 if options.repeats is None else options.repeats
    check_counts((("--repeats", repeats, 1),))
    timeout = 300.0 if options.timeout is None else options.timeout
    return RecoveryPlan(ranks, rows, repeats, timeout, options.json)


def job_argv(row: Row, ranks: int, hpcdist: str, torchrun: str, step_log: str, checkpoint_dir: str) -> list[str]:
    """The command of one job: the same training everywhere, launched and recovered as the row says."""
    training = ["run", "ddp", "--backend", "gloo", "--epochs", str(EPOCHS), "--samples", str(SAMPLES)]
    training += ["--batch-size", str(BATCH), "--seed", "0", "--step-log", step_log]
    resume = ["--checkpoint-dir", checkpoint_dir, "--resume"]
    if row.name == "shrink":
        # the ranks learn it from $HPCDIST_ON_FAILURE, which hpcdist mpirun sets
        return [hpcdist, "mpirun", "-np", str(ranks), "--on-failure", "shrink", "--", hpcdist, *training]
    if row.name == "mpirun":
        return [hpcdist, "mpirun", "-np", str(ranks), "--max-restarts", "1", "--", hpcdist, *training, *resume]
    if row.name == "torchrun":
        return [torchrun, "--nproc-per-node", str(ranks), "--standalone", "--max-restarts", "1", "--no-python",
                hpcdist, *training, *resume]  # fmt: skip
    return [hpcdist, "mpirun", "-np", str(ranks), "--", hpcdist, *training]


@record(frozen=True)
class Outcome:
    """One job's times, in seconds, read from its step log around the kill; None where it has no such time."""

    row: str
    repeat: int
    status: int  # the launcher's exit status
    total: float  # launch to exit
    first: float | None  # launch -> the first step completed (start-up: launch, import, rendezvous, one step)
    steps: int  # lines in the step log
    step: float | None  # the median time between two steps in a row (same epoch and world size), in seconds
    killed_after: tuple[int, int] | None  # (epoch, step): the last step the job completed before it recovered
    recovered: float | None  # kill -> the first step of the recovered job completed
    caught_up: float | None  # kill -> a step past the killed-after step completed (work redone included)
    redone: int | None  # steps completed again after the recovery, at or before the killed-after step
    ranks_after: int | None  # the world size of the last logged step
    problem: str = ""  # why a kill row has no recovery time

    def as_json(self) -> dict[str, Any]:
        """A plain dict for the JSON document."""
        return asdict(self)


def outcome(
    row: str,
    repeat: int,
    status: int,
    launched: float,
    total: float,
    steps: Sequence[LoggedStep],
    kill_time: float | None,
) -> Outcome:
    """Read a job's step log, launched at `launched`, around its kill at `kill_time` (time.time(); None: no kill).

    The recovered job's first step is the first one logged after the kill that starts anew: a world size other
    than the line before's, or an (epoch, step) not after it (a restart goes back to its checkpoint). The killed-after
    step is the line before it, the last step the job completed whole: the victim may have done its share of the next
    step before the kill landed, and rank 0 then logs that step just after the kill (under load, tens of ms after).
    """
    last = steps[-1].world_size if steps else None
    gaps = [
        b.time - a.time
        for a, b in itertools.pairwise(steps)
        if (b.epoch, b.step - 1, b.world_size) == (a.epoch, a.step, a.world_size)
    ]
    pace = statistics.median(gaps) if gaps else None
    job = (row, repeat, status, total, steps[0].time - launched if steps else None, len(steps), pace)
    if kill_time is None:
        return Outcome(*job, None, None, None, None, last)
    before = [s for s in steps if s.time <= kill_time]
    if not before:
        return Outcome(*job, None, None, None, None, last, "no step before the kill")
    start = None
    for index in range(len(before), len(steps)):
        previous, step = steps[index - 1], steps[index]
        if step.world_size != previous.world_size or (step.epoch, step.step) <= (previous.epoch, previous.step):
            start = index
            break
    if start is None:
        return Outcome(*job, (steps[-1].epoch, steps[-1].step), None, None, None, last, "no step after the kill")
    killed_after = (steps[start - 1].epoch, steps[start - 1].step)
    after = steps[start:]
    redone = sum(1 for s in after if (s.epoch, s.step) <= killed_after)
    past = next((s for s in after if (s.epoch, s.step) > killed_after), None)
    return Outcome(
        *job,
        killed_after,
        after[0].time - kill_time,
        past.time - kill_time if past is not None else None,
        redone,
        last,
    )


def table_lines(rows: Sequence[str], outcomes: Sequence[Outcome]) -> list[str]:
    """The table: per row the median (min to max) of each time over its repeats, then how the rows compare."""
    head = f"{'row':<9} {'death -> next step':>22} {'death -> past the kill':>22} {'redone':>7}"
    head += f" {'launch -> 1st step':>20} {'job':>20} {'ms/step':>8} {'ranks':>6}"
    lines = [head, "-" * len(head)]
    medians: dict[str, float] = {}
    for name in rows:
        mine = [o for o in outcomes if o.row == name]
        if not mine:
            lines.append(f"{name:<9} no job finished")
            continue
        recovered = [o.recovered for o in mine if o.recovered is not None]
        if recovered:
            medians[name] = statistics.median(recovered)
        redone = [o.redone for o in mine if o.redone is not None]
        per = [o.step for o in mine if o.step is not None]
        after = sorted({o.ranks_after for o in mine if o.ranks_after is not None})
        lines.append(
            f"{name:<9} {_spread(recovered):>22} {_spread([o.caught_up for o in mine if o.caught_up is not None]):>22} "
            f"{(str(int(statistics.median(redone))) if redone else '-'):>7} "
            f"{_spread([o.first for o in mine if o.first is not None]):>20} {_spread([o.total for o in mine]):>20} "
            f"{(f'{statistics.median(per) * 1000:.1f}' if per else '-'):>8} {','.join(map(str, after)) or '-':>6}"
        )
        lines += [f"{'':<9} repeat {o.repeat + 1}: {o.problem} (exit status {o.status})" for o in mine if o.problem]
    if "shrink" in medians:
        for other in ("mpirun", "torchrun"):
            if other in medians and medians["shrink"] > 0:
                lines.append(
                    f"# shrink recovers {medians[other] / medians['shrink']:.1f}x faster than {other} "
                    f"({medians['shrink']:.2f} s against {medians[other]:.2f} s, medians)"
                )
    return lines


def _spread(values: Sequence[float]) -> str:
    """`median (min-max)` in seconds, or `-` without values."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
