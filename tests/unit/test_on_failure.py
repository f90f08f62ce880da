"""`hpcdist mpirun --on-failure shrink` without processes: the options, the argv, the ranks' variables, the watch."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcdist import records
from hpcdist.cli import build_parser, main
from hpcdist.cli.launch import mpirun_options
from hpcdist.contract import RankContract
from hpcdist.errors import UsageError
from hpcdist.events import Beat, Done, Event, Failed, Ready, Usage, Vanished, encode
from hpcdist.families.base import MpirunSpec
from hpcdist.launching import heartbeat
from hpcdist.launching.mpirun import build_mpirun_argv
from hpcdist.launching.options import MpirunOptions
from hpcdist.launching.plan import plan
from hpcdist.launching.shrink import ShrinkWatch
from hpcdist.launching.watch import LAUNCHER_GRACE, MpirunWatch
from hpcdist.launching.world import World

TOKEN = "0123456789abcdef"
ON_FAILURE_ENV, MIN_NP_ENV = RankContract.variable("on_failure"), RankContract.variable("min_np")
PROG = ("python", "train.py")
SHRINK = MpirunSpec(program=PROG, np=4, fault_tolerance=True)
HEAD = ["mpirun", "-np", "4", "--bind-to", "none", "--map-by", "slot"]


def _line(event: Event) -> bytes:
    return encode(event, TOKEN).encode()


AGREE = ["--mca", "coll_ftagree_agreement", "1"]  # the agreement by Early Returning Consensus


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, [*HEAD, "--with-ft", "ulfm", "--mca", "btl", "tcp,self", *AGREE, *PROG]),
        (  # a transport list of the user's own without shared memory is kept; other settings come first
            {"mca": (("pml", "ob1"), ("btl", "self,tcp")), "as_root": True},
            [*HEAD, "--allow-run-as-root", "--with-ft", "ulfm", "--mca", "pml", "ob1", "--mca", "btl", "self,tcp",
             *AGREE, *PROG],
        ),
        (  # the fabric probe's exclusion is moot: tcp,self names every transport used
            {"skip_fabric_probe": False, "env": (("HPCDIST_ON_FAILURE", "shrink"),)},
            [*HEAD, "--with-ft", "ulfm", "--mca", "btl", "tcp,self", *AGREE, "-x", "HPCDIST_ON_FAILURE=shrink",
             *PROG],
        ),
    ],
)  # fmt: skip
def test_open_mpi_gets_ulfm_over_tcp(changes: dict[str, Any], expected: list[str]) -> None:
    assert build_mpirun_argv(records.replace(SHRINK, **changes)) == expected


@pytest.mark.parametrize("btl", ["^ofi", "sm,self,tcp", "vader,self", "self, sm"])
def test_a_transport_list_with_shared_memory_is_refused_under_shrink(btl: str) -> None:
    with pytest.raises(UsageError, match=r"the survivors hang over shared memory .* --mca btl tcp,self"):
        build_mpirun_argv(records.replace(SHRINK, mca=(("btl", btl),)))


@pytest.mark.parametrize("family", ["mpich", "intel"])
def test_hydra_launchers_refuse_fault_tolerance(family: str) -> None:
    with pytest.raises(UsageError, match=r"^--on-failure shrink needs Open MPI's fault tolerance \(ULFM\)"):
        build_mpirun_argv(records.replace(SHRINK, family=family, mpirun="mpiexec"))


def test_the_cli_parses_on_failure_and_min_np_into_the_options() -> None:
    args = build_parser().parse_args(["mpirun", "-np", "4", "--on-failure", "shrink", "--min-np", "2", "--", "x"])
    assert mpirun_options(args) == MpirunOptions(program=("x",), np=4, on_failure="shrink", min_np=2)
    assert mpirun_options(build_parser().parse_args(["mpirun", "-np", "4", "--", "x"])).on_failure == "end"


def test_the_cli_takes_no_abbreviation_and_no_other_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mpirun", "--dry-run", "-np", "2", "--on-fail", "shrink", "--", "x"]) == 2
    assert main(["mpirun", "--dry-run", "-np", "2", "--on-failure", "restart", "--", "x"]) == 2
    err = capsys.readouterr().err
    assert "unknown option --on-fail for `hpcdist mpirun`; options are never abbreviated" in err
    assert "argument --on-failure: unknown value 'restart'; choose one of end, shrink" in err


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"on_failure": "restart"}, "--on-failure must be one of end, shrink, got 'restart'; e.g. --on-failure shrink"),
        ({"on_failure": None}, "--on-failure must be one of end, shrink, got None"),
        ({"min_np": 0}, "--min-np must be at least 1, got 0; e.g. --min-np 2"),
        ({"min_np": True}, "--min-np must be a whole number, got True"),
    ],
)
def test_the_options_refuse_what_the_cli_would(changes: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as info:
        MpirunOptions(program=("x",), **changes)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_every_rank_is_told_to_carry_on_and_down_to_how_few(tmp_path: Path) -> None:
    mpirun = tmp_path / "mpirun"
    mpirun.write_text("#!/bin/sh\n")
    mpirun.chmod(0o755)
    options = MpirunOptions(program=("x",), np=4, mpirun=str(mpirun), mpi="openmpi", on_failure="shrink")
    spec = plan(options, World()).spec
    assert spec.fault_tolerance
    assert dict(spec.env)[ON_FAILURE_ENV] == "shrink" and MIN_NP_ENV not in dict(spec.env)  # unset: down to 1
    spec = plan(records.replace(options, min_np=3), World()).spec
    assert dict(spec.env)[MIN_NP_ENV] == "3"
    spec = plan(records.replace(options, on_failure="end"), World()).spec
    assert not spec.fault_tolerance and ON_FAILURE_ENV not in dict(spec.env) and MIN_NP_ENV not in dict(spec.env)


@pytest.mark.parametrize("version", ["", "6.0.0"], ids=["the wheel's Open MPI", "Open MPI 6"])
def test_a_job_on_several_hosts_is_told_before_launch_whether_a_lost_host_ends_it(version: str, tmp_path: Path) -> None:
    # the wheel's real mpirun says its version; one that says 6.0.0 stands for Open MPI 6, which no release is yet
    real = Path(sys.executable).with_name("mpirun")
    mpirun = real if not version else tmp_path / "mpirun"
    if version:
        mpirun.write_text(f"#!/bin/sh\necho 'mpirun (Open MPI) {version}'\n")
        mpirun.chmod(0o755)
    options = MpirunOptions(
        program=("x",), np=4, mpirun=str(mpirun), mpi="openmpi", on_failure="shrink", hosts="a:2,b:2"
    )
    world = World(environ=dict(os.environ))  # Open MPI's mpirun needs HOME to say its version
    note = plan(options, world).note
    said = (
        "hpcdist mpirun: note: Open MPI 5.0.11's runtime ends the whole job when it loses a host, even under "
        "--on-failure shrink (which carries on after lost ranks, not hosts; from Open MPI 6 on, after lost hosts "
        "too); with --max-restarts N the job starts again without the host"
    )
    assert note == ("" if version else said)
    # on one host, or without shrink, nothing to say
    assert plan(records.replace(options, hosts="a:4"), world).note == ""
    assert plan(records.replace(options, on_failure="end"), world).note == ""


def test_the_dry_run_shows_the_ulfm_launch(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["mpirun", "--dry-run", "--mpirun", "mpirun", "--mpi", "openmpi", "-np", "4", "--on-failure", "shrink"]
    assert main([*argv, "--min-np", "2", "--", "python", "t.py"]) == 0
    out = capsys.readouterr().out
    # then the forwarded variables (the test's own first)
    assert " --with-ft ulfm --mca btl tcp,self --mca coll_ftagree_agreement 1 -x " in out
    assert " -x HPCDIST_ON_FAILURE=shrink -x HPCDIST_MIN_NP=2 " in out


@pytest.mark.parametrize(("mpi", "name"), [("mpich", "MPICH"), ("intel", "Intel MPI")])
def test_mpich_and_intel_mpi_are_refused_saying_what_was_found_and_what_to_do(
    capsys: pytest.CaptureFixture[str], mpi: str, name: str
) -> None:
    argv = ["mpirun", "--dry-run", "--mpirun", "mpiexec", "--mpi", mpi, "-np", "4", "--on-failure", "shrink"]
    assert main([*argv, "--", "python", "t.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"hpcdist: error: --on-failure shrink needs Open MPI's fault tolerance (ULFM); the launcher mpiexec is "
        f"{name}'s (as --mpi {mpi} says)"
    )
    assert "run Open MPI's mpirun" in err and "or drop --on-failure shrink" in err


def test_min_np_alone_needs_restarts_or_shrink_and_fits_np(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["mpirun", "--dry-run", "--mpirun", "mpirun", "--mpi", "openmpi", "-np", "4"]
    assert main([*argv, "--on-failure", "shrink", "--min-np", "3", "--", "x"]) == 0
    assert main([*argv, "--min-np", "3", "--", "x"]) == 2
    assert "give --max-restarts N (a restart leaves a lost host out) or --on-failure shrink" in capsys.readouterr().err


def test_each_loss_is_one_line_and_the_count_goes_down() -> None:
    watch = ShrinkWatch(np=4)
    hosts = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    watch.lose({2: "failed (killed by SIGKILL)"}, hosts)
    watch.lose({2: "lost (killed or exited abruptly)"}, hosts)  # heard again: said once
    assert watch.news() == ["hpcdist: rank 2 on n2 failed (killed by SIGKILL); 3 ranks carry on (--on-failure shrink)"]
    assert watch.news() == []
    watch.lose({3: "lost (no heartbeat for 30 s)", 1: "failed (exit code 1)"}, hosts)
    assert watch.news() == [
        "hpcdist: rank 3 on n2 lost (no heartbeat for 30 s); rank 1 on n1 failed (exit code 1); 1 rank carries on "
        "(--on-failure shrink)"
    ]
    assert not watch.finished_well(set(), None)
    assert watch.finished_well({0}, None)
    assert not ShrinkWatch(np=4).finished_well({0, 1, 3}, None)  # rank 2 neither lost nor done


def test_with_spares_the_line_counts_the_ranks_that_train_and_the_spares_left() -> None:
    watch = ShrinkWatch(np=6, spares=2)  # ranks 0-3 train, 4 and 5 wait
    hosts = dict.fromkeys(range(6), "n1")
    watch.lose({2: "failed (exit code 1)"}, hosts)
    watch.lose({5: "lost (killed or exited abruptly)"}, hosts)  # a spare that waited
    watch.lose({0: "failed (exit code 1)", 1: "failed (exit code 1)"}, hosts)
    assert watch.news() == [
        "hpcdist: rank 2 on n1 failed (exit code 1); 4 ranks carry on, a spare among them in a lost rank's place; "
        "1 spare left (--on-failure shrink)",
        "hpcdist: rank 5 on n1 lost (killed or exited abruptly); 4 ranks carry on, a spare among them in a lost "
        "rank's place; no spare left (--on-failure shrink)",
        "hpcdist: ranks 0-1 on n1 failed (exit code 1); 2 ranks carry on, a spare among them in a lost rank's "
        "place; no spare left (--on-failure shrink)",
    ]
    two = ShrinkWatch(np=6, spares=2)
    two.lose({0: "failed (exit code 1)", 3: "failed (exit code 1)"}, hosts)
    assert two.news() == [
        "hpcdist: ranks 0,3 on n1 failed (exit code 1); 4 ranks carry on, 2 spares among them in lost ranks' places; "
        "no spare left (--on-failure shrink)"
    ]


def test_under_shrink_a_killed_rank_is_named_once_and_the_survivors_status_is_the_jobs() -> None:
    watch = MpirunWatch(TOKEN, heartbeat=None, shrink=True, np=4)
    for rank in range(4):
        watch.feed("stderr", _line(Ready(rank, "n1", 4)))
    watch.feed("stderr", _line(Vanished(2, "n1")))
    watch.feed("stderr", b"prterun noticed that process rank 2 with PID 77 on node n1 exited on\nsignal 9 (Killed).\n")
    assert watch.news() == [
        "hpcdist: rank 2 on n1 lost (killed or exited abruptly); 3 ranks carry on (--on-failure shrink)"
    ]
    for rank in (0, 1, 3):
        watch.feed("stderr", _line(Done(rank)))
    outcome, problem = watch.outcome(137)
    assert (outcome.status, problem, outcome.ended) == (0, None, {})
    assert dict(outcome.failed) == {2: "killed by SIGKILL"}  # as mpirun told it, after the rank was named


def test_under_shrink_the_status_a_survivor_declared_is_the_jobs() -> None:
    # a survivor tells its program's status (sys.exit's) and exits 0, so that Open MPI does not end the others
    watch = MpirunWatch(TOKEN, heartbeat=None, shrink=True, np=3)
    for rank in range(3):
        watch.feed("stderr", _line(Ready(rank, "n1", 3)))
    watch.feed("stderr", _line(Vanished(2, "n1")) + _line(Done(1)) + _line(Done(0, status=3)))
    assert watch.news() == [
        "hpcdist: rank 2 on n1 lost (killed or exited abruptly); 2 ranks carry on (--on-failure shrink)"
    ]
    outcome, problem = watch.outcome(0)  # mpirun's status: each survivor exited 0
    assert (outcome.status, problem) == (3, None)


def test_under_shrink_the_job_fails_when_no_survivor_finishes_well() -> None:
    watch = MpirunWatch(TOKEN, shrink=True, np=3)
    watch.feed("stderr", _line(Failed(1, "exit code 3", "n1")))
    watch.feed("stderr", _line(Failed(0, "exit code 1", "n1")) + _line(Failed(2, "exit code 1", "n1")))
    assert watch.news() == [
        "hpcdist: rank 1 on n1 failed (exit code 3); 2 ranks carry on (--on-failure shrink)",
        "hpcdist: rank 0 on n1 failed (exit code 1); 1 rank carries on (--on-failure shrink)",
        "hpcdist: rank 2 on n1 failed (exit code 1); no rank is left (--on-failure shrink)",
    ]
    assert watch.outcome(3)[0].status == 3


def test_under_shrink_a_usage_error_every_rank_meets_is_said_once_and_no_rank_is_a_loss() -> None:
    watch = MpirunWatch(TOKEN, shrink=True, np=3)
    for rank in range(3):
        watch.feed("stderr", _line(Usage(rank, "--on-failure shrink does not take --report")))
        watch.feed("stderr", _line(Failed(rank, "exit code 2", "n1")))
    assert watch.news() == []
    outcome, _ = watch.outcome(2)
    assert (outcome.status, outcome.usage) == (2, "--on-failure shrink does not take --report")


def test_under_shrink_a_rank_lost_after_another_told_a_usage_error_is_no_loss_of_its_own() -> None:
    """Rank 0 met a syntax error in the program and left; rank 3, still starting, went with it: the usage error is
    the job's one story (measured: a loss line per such rank before)."""
    watch = MpirunWatch(TOKEN, shrink=True, np=4)
    watch.feed("stderr", _line(Usage(0, "model.py:3: SyntaxError: '(' was never closed; fix the code there")))
    watch.feed("stderr", _line(Failed(0, "exit code 2", "n1")))
    watch.feed("stderr", _line(Vanished(3, "n1")) + _line(Failed(2, "exit code 1", "n1", after_peer=True)))
    assert watch.news() == []
    assert watch.outcome(2)[0].status == 2


def test_under_shrink_a_rank_that_left_after_a_peers_loss_is_named_so() -> None:
    watch = MpirunWatch(TOKEN, shrink=True, np=3)
    watch.feed("stderr", _line(Vanished(2, "n1")) + _line(Failed(0, "exit code 1", "n1", after_peer=True)))
    assert watch.news() == [
        "hpcdist: rank 2 on n1 lost (killed or exited abruptly); 2 ranks carry on (--on-failure shrink)",
        "hpcdist: rank 0 on n1 left after a peer's loss (exit code 1); 1 rank carries on (--on-failure shrink)",
    ]


def test_under_shrink_the_launcher_is_not_ended_for_running_on(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("hpcdist.launching.watch.time.monotonic", lambda: now[0])
    watch = MpirunWatch(TOKEN, shrink=True, np=2)
    watch.feed("stderr", _line(Failed(1, "exit code 1", "n1")))
    now[0] += LAUNCHER_GRACE + 1
    watch.check()  # without shrink: LauncherStalled
    assert watch.stalled is None


def test_under_shrink_a_silent_host_loses_its_ranks_instead_of_ending_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(heartbeat.time, "monotonic", lambda: now[0])
    watch = MpirunWatch(TOKEN, heartbeat=6, shrink=True, np=4)
    for _ in range(8):
        watch.feed("stderr", b"".join(_line(Beat(r, "n2" if r > 1 else "n1")) for r in range(4)))
        watch.check()
        now[0] += 1
    for _ in range(8):  # n2's ranks fall silent
        watch.feed("stderr", _line(Beat(0, "n1")) + _line(Beat(1, "n1")))
        watch.check()
        now[0] += 1
    assert watch.news() == [
        "hpcdist: ranks 2-3 on n2 lost (no heartbeat for 6 s); 2 ranks carry on (--on-failure shrink)"
    ]
    for rank in (0, 1):
        watch.feed("stderr", _line(Done(rank)))
    assert watch.outcome(0)[0].status == 0


def test_hpcdist_launch_takes_on_failure_as_the_cli_does() -> None:
    import hpcdist

    with pytest.raises(UsageError, match=r"^--on-failure must be one of end, shrink, got 'restart'"):
        hpcdist.launch(lambda: 0, np=2, on_failure="restart")


def test_survivors_too_few_to_go_on_are_said_once_and_named_as_no_failure() -> None:
    # ranks 0 and 1 outlived rank 2 but are fewer than --min-np: each tells it (status 1), then ends with exit code 1
    watch = MpirunWatch(TOKEN, shrink=True, np=3)
    events: list[Event] = [Ready(0, world=3), Ready(1, world=3), Ready(2, world=3), Vanished(2)]
    said = "rank 2 on n1 was lost (process failed): 2 ranks are left, fewer than --min-np 3; the job ends (…)"
    events += [Usage(0, said, status=1), Usage(1, said, status=1), Failed(0, how="exit code 1")]
    events += [Failed(1, how="exit code 1")]
    watch.feed("stdout", b"".join(_line(event) for event in events))
    assert watch.news() == ["hpcdist: rank 2 lost (killed or exited abruptly); 2 ranks carry on (--on-failure shrink)"]
    outcome, _ = watch.outcome(1)
    assert (outcome.status, outcome.usage) == (1, said)
    assert sorted(outcome.failed) == [2]  # the survivors ended with the job's one error, not a failure of their own


def test_spares_launch_that_many_more_ranks_and_each_rank_is_told_how_many(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["mpirun", "--dry-run", "--mpirun", "mpirun", "--mpi", "openmpi", "-np", "4", "--on-failure", "shrink"]
    assert main([*argv, "--spares", "1", "--", "python", "t.py"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mpirun -np 5 ") and " -x HPCDIST_ON_FAILURE=shrink -x HPCDIST_SPARES=1 " in out
    assert main([*argv, "--spares", "1", "--min-np", "5", "--", "x"]) == 2  # the spares are not counted in -np
    assert "--min-np 5 is more than -np 4" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"spares": 1}, "--spares 1 replaces lost ranks of a shrinking job; add --on-failure shrink, or drop --spares"),
        ({"spares": -1, "on_failure": "shrink"}, "--spares must be at least 0, got -1; e.g. --spares 1"),
    ],
)
def test_spares_are_refused_without_shrink_or_below_zero(changes: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as info:
        MpirunOptions(program=("x",), **changes)  # type: ignore[arg-type]
    assert message in str(info.value)
    with pytest.raises(UsageError, match=r"^HPCDIST_SPARES=1 needs HPCDIST_ON_FAILURE=shrink; unset it"):
        RankContract.from_environ({"HPCDIST_SPARES": "1"})
    assert RankContract.from_environ({"HPCDIST_SPARES": "2", "HPCDIST_ON_FAILURE": "shrink"}).spares == 2
