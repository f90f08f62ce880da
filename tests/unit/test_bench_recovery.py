"""`hpcdist bench recovery`'s pure parts: a job's step log read around the kill, the options checked, the commands."""

from __future__ import annotations

import pytest

from hpcdist.bench.plan import BenchOptions
from hpcdist.bench.recovery import ROWS, job_argv, outcome, recovery_plan, table_lines
from hpcdist.errors import UsageError
from hpcdist.workloads.steplog import LoggedStep


def _log(*lines: tuple[int, int, int, float]) -> list[LoggedStep]:
    return [LoggedStep(*line) for line in lines]


def test_a_restart_is_timed_to_its_first_step_and_its_redone_steps_are_counted() -> None:
    steps = _log((1, 1, 4, 10.0), (1, 2, 4, 11.0), (2, 1, 4, 12.0), (2, 2, 4, 13.0), (2, 3, 4, 13.5),
                 (2, 1, 4, 20.0), (2, 2, 4, 21.0), (2, 3, 4, 22.0), (2, 4, 4, 23.0))  # fmt: skip
    # step 2 3 was logged after the kill, yet by the job that lost the rank (the victim had done its share of it):
    # it is the last step before the restart, and the restart does it again
    result = outcome("mpirun", 0, 0, 4.0, 30.0, steps, kill_time=13.25)
    assert (result.killed_after, result.recovered, result.caught_up, result.redone) == ((2, 3), 6.75, 9.75, 3)
    assert (result.first, result.steps, result.ranks_after, result.problem) == (6.0, 9, 4, "")
    assert result.step == 1.0  # the median of 1, 1, 0.5, 1, 1, 1 (the restart's gap is no step's)


def test_a_shrink_is_timed_to_the_first_step_on_fewer_ranks() -> None:
    steps = _log((2, 7, 4, 10.0), (2, 8, 4, 11.0), (2, 8, 3, 11.5), (2, 9, 3, 11.75))  # the cut step redone on 3
    result = outcome("shrink", 1, 0, 5.0, 20.0, steps, kill_time=11.25)
    assert (result.killed_after, result.recovered, result.caught_up, result.redone) == ((2, 8), 0.25, 0.5, 1)
    assert result.ranks_after == 3
    # the 4 ranks' step 2 9 logged after the kill (the victim's share was in): the survivors go on from it
    late = _log((2, 8, 4, 11.0), (2, 9, 4, 11.3), (2, 10, 3, 11.5))
    result = outcome("shrink", 0, 0, 5.0, 20.0, late, kill_time=11.25)
    assert (result.killed_after, result.recovered, result.caught_up, result.redone) == ((2, 9), 0.25, 0.25, 0)


def test_a_job_that_never_recovers_says_so_and_one_without_a_kill_has_no_recovery() -> None:
    steps = _log((2, 1, 4, 10.0), (2, 2, 4, 11.0))
    assert outcome("torchrun", 0, 1, 9.0, 5.0, steps, kill_time=11.5).problem == "no step after the kill"
    assert outcome("torchrun", 0, 1, 8.0, 5.0, steps, kill_time=9.0).problem == "no step before the kill"
    uncut = outcome("uncut", 0, 0, 9.0, 5.0, steps, kill_time=None)
    assert (uncut.recovered, uncut.killed_after, uncut.problem, uncut.ranks_after, uncut.first) == (
        None,
        None,
        "",
        4,
        1.0,
    )


def test_the_table_compares_the_rows_medians() -> None:
    fast = [outcome("shrink", r, 0, 0, 9, _log((2, 1, 4, 1), (2, 2, 3, 1 + s)), 1) for r, s in enumerate((0.5, 0.25))]
    slow = [outcome("mpirun", 0, 0, 0.0, 20.0, _log((2, 1, 4, 1.0), (2, 1, 4, 6.0)), 1.0)]
    lines = table_lines(["shrink", "mpirun", "torchrun"], [*fast, *slow])
    assert lines[2].split()[:4] == ["shrink", "0.38", "(0.25-0.50)", "0.38"]
    assert lines[4] == "torchrun  no job finished"
    assert lines[5] == "# shrink recovers 13.3x faster than mpirun (0.38 s against 5.00 s, medians)"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"ranks": "1"}, r"--ranks 1: bench recovery runs one rank count, from 2 to 64"),
        ({"ranks": "2,4"}, r"--ranks 2,4: bench recovery runs one rank count"),
        ({"rows": "shrink,elastic"}, r"unknown row 'elastic'; give one or more of shrink, mpirun, torchrun, uncut"),
        ({"minbytes": "8"}, r"bench recovery times whole jobs that lose a rank, so -b means nothing to it"),
        ({"repeats": 0}, r"--repeats 0 must be at least 1"),
    ],
)
def test_wrong_options_are_refused_before_a_job_starts(fields: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        recovery_plan(BenchOptions(collective="recovery", **fields))  # type: ignore[arg-type]


def test_every_row_trains_the_same_job_and_only_the_restarts_resume_from_a_checkpoint() -> None:
    plan = recovery_plan(BenchOptions(collective="recovery", ranks="3"))
    assert (plan.ranks, plan.rows, plan.repeats) == (3, ("shrink", "mpirun", "torchrun", "uncut"), 3)
    argvs = {name: job_argv(ROWS[name], 3, "hd", "tr", "S.log", "D") for name in plan.rows}
    training = ["run", "ddp", "--backend", "gloo", "--epochs", "3", "--samples", "16384", "--batch-size", "32",
                "--seed", "0", "--step-log", "S.log"]  # fmt: skip
    for name, argv in argvs.items():
        start = argv.index("run")
        assert argv[start : start + len(training)] == training, name
        assert ("--resume" in argv) == (name in ("mpirun", "torchrun")), name
    assert argvs["shrink"][:6] == ["hd", "mpirun", "-np", "3", "--on-failure", "shrink"]
    assert argvs["torchrun"][:8] == ["tr", "--nproc-per-node", "3", "--standalone", "--max-restarts", "1",
                                     "--no-python", "hd"]  # fmt: skip
