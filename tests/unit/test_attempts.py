"""Restarts of `hpcdist mpirun`: decisions, lost-host exclusion, the attempts loop, messages, the control-line filter.

The rules it shares with a batch script's loop (status alone) are tested once for both in test_restart_policy.py.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hpcdist import records, restart_count
from hpcdist.cli import main
from hpcdist.contract import new_token
from hpcdist.errors import UsageError
from hpcdist.events import Failed, Ready, encode
from hpcdist.families.base import MpirunSpec
from hpcdist.hosts import HostSlots
from hpcdist.launching.execute import execute
from hpcdist.launching.options import DRY_RUN, MpirunOptions
from hpcdist.launching.outcome import LaunchOutcome
from hpcdist.launching.plan import LaunchPlan, attempt_spec, plan
from hpcdist.launching.restarts import Attempt, RestartPolicy, check_restarts, decide, describe_end, summary
from hpcdist.launching.watch import MpirunWatch
from hpcdist.launching.world import World

HOSTS = (HostSlots("n1", 2), HostSlots("n2", 2), HostSlots("n3", 2))
SPEC = MpirunSpec(program=("python", "train.py"), np=4, hosts=HOSTS)
ALL_READY = frozenset(range(4))
POLICY = RestartPolicy(max_restarts=2)


def _ended(status: int, **kw: object) -> LaunchOutcome:
    return LaunchOutcome(status=status, **{"ready": ALL_READY, "world_size": 4, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("outcome, index, restart, why", [
    (_ended(0), 0, False, ""),
    (_ended(1, failed={1: "killed by SIGKILL"}), 0, True, ""),
    (_ended(1), 1, True, ""),
    (_ended(1), 2, False, "not restarting: --max-restarts 2 used up"),
    (_ended(2), 0, False, "not restarting: exit status 2 is a usage error; a restart cannot fix that"),
    (_ended(130, signals=(signal.SIGINT,)), 0, False, "not restarting: hpcdist mpirun was sent SIGINT"),
    (_ended(1, signals=(signal.SIGUSR1,)), 0, True, ""),  # Slurm's preemption warning is no reason to stop
    (_ended(3, ready=frozenset({0, 2, 3}), failed={1: "exit code 3"}, hosts={1: "n1"}), 0, False,
     "not restarting: rank 1 never initialised (rank 1 on n1 failed with exit code 3 first); "
     "a restart cannot fix that"),
    (_ended(3, ready=frozenset({0}), failed={1: "exit code 3"}), 0, False,
     "not restarting: rank 1 never initialised (rank 1 failed with exit code 3 first; 2 other ranks did not initialise "
     "either); a restart cannot fix that"),
    (_ended(1, ready=frozenset(), world_size=None), 0, False,
     "not restarting: ranks 0-3 never initialised (the job ended before they did); a restart cannot fix that"),
])  # fmt: skip
def test_decisions(outcome: LaunchOutcome, index: int, restart: bool, why: str) -> None:
    decision = decide(SPEC, HOSTS, outcome, index, POLICY)
    assert (decision.restart, decision.why) == (restart, why)
    assert decision.spec == (SPEC if restart else None)


def test_a_lost_host_is_left_out_when_the_others_hold_np() -> None:
    decision = decide(SPEC, HOSTS, _ended(1, lost_hosts=("n2",)), 0, POLICY)
    assert (decision.restart, decision.why) == (True, "leaving out host n2")
    assert decision.spec is not None
    assert (decision.spec.np, decision.spec.hosts) == (4, (HOSTS[0], HOSTS[2]))


def test_a_hostfile_job_restarts_on_a_host_list_without_the_lost_host() -> None:
    spec = MpirunSpec(program=("x",), np=2, hostfile="hosts.txt")
    decision = decide(spec, HOSTS, _ended(1, lost_hosts=("n1",), ready=frozenset({0, 1}), world_size=2), 0, POLICY)
    assert decision.spec is not None
    assert (decision.spec.hostfile, decision.spec.hosts) == (None, HOSTS[1:])


@pytest.mark.parametrize("lost, min_np, restart, np, why", [
    (("n2", "n3"), None, False, None, "not restarting: host n2, n3 was lost and the 2 slots left on n1 cannot hold "
                                      "-np 4 (give --min-np M to go on with fewer ranks)"),
    (("n2", "n3"), 2, True, 2, "leaving out host n2, n3, with 2 ranks instead of 4"),
    (("n2", "n3"), 3, False, None, "not restarting: host n2, n3 was lost and the 2 slots left on n1 cannot hold "
                                   "--min-np 3"),
    (("n1", "n2", "n3"), 1, False, None, "not restarting: every host was lost (n1, n2, n3)"),
    (("n9",), None, False, None, "not restarting: host n9 was lost but is not one of the hosts given (n1, n2, n3), so "
                                 "it cannot be left out; check the host names"),
])  # fmt: skip
def test_lost_hosts_and_min_np(
    lost: tuple[str, ...], min_np: int | None, restart: bool, np: int | None, why: str
) -> None:
    decision = decide(SPEC, HOSTS, _ended(1, lost_hosts=lost), 0, RestartPolicy(2), min_np)
    assert (decision.restart, decision.why) == (restart, why)
    assert (decision.spec.np if decision.spec else None) == np


def test_a_lost_host_in_a_slurm_allocation_cannot_be_left_out() -> None:
    spec = MpirunSpec(program=("x",), np=None)
    decision = decide(spec, (), _ended(1, lost_hosts=("n2",)), 0, POLICY)
    assert not decision.restart
    assert decision.why.startswith("not restarting: host n2 was lost, and mpirun reads the Slurm allocation's hosts")


def _plan(max_restarts: int = 0, export: tuple[str, ...] = ()) -> LaunchPlan:
    """The plan of a launch of `x` on 4 ranks of HOSTS, in a world of plain values."""
    options = MpirunOptions(
        program=("x",), hosts="n1:2,n2:2,n3:2", np=4, mpirun="mpirun", mpi="openmpi", export=export, launch_agent="ssh",
        max_restarts=max_restarts, heartbeat_timeout=0,
    )  # fmt: skip
    return plan(options, World(python="/venv/bin/python"))


def test_attempt_spec_exports_both_counters_and_the_token_replacing_the_users() -> None:
    launch = _plan(2, ("HPCDIST_RESTART_COUNT=7", "A"))
    assert attempt_spec(launch, launch.spec, 3, "ab" * 8, "cd" * 8).env[-8:] == (
        ("HPCDIST_OUTPUT_RATE", "2097152"),  # each of the 4 ranks: a quarter of the job's 8 MiB/s
        ("HPCDIST_MPI", "openmpi"),  # the ranks read Open MPI's variables alone
        ("HPCDIST_SCHEDULER", "none"),  # and no scheduler's
        ("A", None),
        ("HPCDIST_CONTROL", "ab" * 8),
        ("HPCDIST_RUN_ID", "cd" * 8),
        ("HPCDIST_RESTART_COUNT", "3"),
        ("TORCHELASTIC_RESTART_COUNT", "3"),
    )
    launch = _plan(0, ("HPCDIST_RESTART_COUNT=7",))  # without --max-restarts the counters are the user's
    assert ("HPCDIST_RESTART_COUNT", "7") in attempt_spec(launch, launch.spec, 0, None, None).env


def test_messages() -> None:
    outcome = _ended(137, failed={1: "killed by SIGKILL", 0: "exit code 1"}, hosts={1: "n1"}, lost_hosts=("n2",))
    assert (
        describe_end(outcome) == "exit code 137 (rank 1 on n1 killed by SIGKILL; rank 0 failed with exit code 1; "
        "lost host n2)"
    )
    assert describe_end(_ended(-9)) == "killed by SIGKILL"
    after = _ended(137, failed={1: "killed by SIGKILL", 0: "exit code 1"}, hosts={1: "n1"}, after_peer=frozenset({0}))
    assert describe_end(after) == "exit code 137 (rank 1 on n1 killed by SIGKILL)"  # rank 0 failed because it went
    assert after.failures() == "rank 1 on n1 killed by SIGKILL; rank 0 failed with exit code 1"
    assert summary([Attempt(0, 4, HOSTS[:2], _ended(1)), Attempt(1, 2, HOSTS[:1], _ended(0))], 3) == [
        "hpcdist: 2 attempts (of up to 3):",
        "hpcdist:   attempt 1/3: exit code 1; 4 ranks on n1:2,n2:2",
        "hpcdist:   attempt 2/3: exit code 0; 2 ranks on n1:2",
    ]


def _runner(ends: list[LaunchOutcome], runs: list[tuple[list[str], str]]) -> Callable[..., LaunchOutcome]:
    """A stand-in for spawn.run_mpirun that notes each command line and token and ends as `ends` say."""
    left = iter(ends)

    def run(argv: list[str], token: str, router: object, **watch: object) -> LaunchOutcome:
        assert watch["world"] is not None and watch["heartbeat"] is None and watch["family"] == "openmpi"
        runs.append((argv, token))
        return next(left)

    return run


def test_execute_restarts_with_a_new_token_each_time_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    runs: list[tuple[list[str], str]] = []
    launch = records.replace(_plan(2), policy=RestartPolicy(2, pause=0.0))
    ends = [_ended(1, failed={1: "killed by SIGKILL"}, hosts={1: "n1"}), _ended(0)]
    ending = execute(launch, World(stderr=sys.stderr), run=_runner(ends, runs))
    assert ending.status == 0 and len(ending.attempts) == 2
    contract = [[word for word in argv if word.startswith(("HPCDIST_", "TORCHELASTIC_"))] for argv, _ in runs]
    run_id = contract[0][-3]  # one run id for every attempt of the launch, as torchrun keeps its own
    assert run_id.startswith("HPCDIST_RUN_ID=") and len(run_id) == len("HPCDIST_RUN_ID=") + 16
    assert [words[-4:] for words in contract] == [
        [f"HPCDIST_CONTROL={token}", run_id, f"HPCDIST_RESTART_COUNT={n}", f"TORCHELASTIC_RESTART_COUNT={n}"]
        for n, (_, token) in enumerate(runs)
    ]
    assert "HPCDIST_MAX_RESTARTS=2" in contract[0] and runs[0][1] != runs[1][1]
    assert capsys.readouterr().err.splitlines() == [
        "hpcdist: attempt 1/3 ended with exit code 1 (rank 1 on n1 killed by SIGKILL); restarting in 0.0 s",
        "hpcdist: attempt 2/3 ended with exit code 0",
        "hpcdist: 2 attempts (of up to 3):",
        "hpcdist:   attempt 1/3: exit code 1 (rank 1 on n1 killed by SIGKILL); 4 ranks on n1:2,n2:2,n3:2",
        "hpcdist:   attempt 2/3: exit code 0; 4 ranks on n1:2,n2:2,n3:2",
    ]


@pytest.mark.parametrize("argv, message", [
    (["--min-np", "2"], "--min-np only matters when the job goes on without a lost rank; give --max-restarts N"),
    (["--on-failure", "shrink", "--min-np", "5"], "--min-np 5 is more than -np 4; give --min-np at most 4"),
    (["--max-restarts", "1", "--min-np", "5"], "--min-np 5 is more than -np 4; give --min-np at most 4"),
    (["--max-restarts", "1", "--script", "-"], "--max-restarts is carried out by hpcdist mpirun while it runs"),
    (["--max-restarts", "-1"], "--max-restarts '-1' is not a whole number"),
])  # fmt: skip
def test_restart_options_that_cannot_work(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(["mpirun", "--mpirun", "mpirun", "-np", "4", *argv, "--", "x"]) == 2
    assert message in capsys.readouterr().err


def test_dry_run_shows_attempt_one_and_says_the_launcher_restarts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mpirun", "--dry-run", "--mpirun", "mpirun", "-np", "2", "--max-restarts", "3", "--", "x"]) == 0
    out, err = capsys.readouterr()
    assert "-x HPCDIST_MAX_RESTARTS=3 " in out
    assert " -x HPCDIST_RESTART_COUNT=0 -x TORCHELASTIC_RESTART_COUNT=0 " in out
    assert "-x 'HPCDIST_CONTROL=<per-launch token>' -x 'HPCDIST_RUN_ID=<per-launch run id>' " in out
    assert "this is attempt 1 of up to 4; hpcdist mpirun itself runs the restarts" in err


def test_check_restarts_accepts_min_np_without_np() -> None:
    check_restarts(1, 2, None)
    with pytest.raises(UsageError):
        check_restarts(0, 2, None)


def test_the_watch_hides_control_lines_whole_however_the_chunks_fall() -> None:
    token = new_token()
    foreign = encode(Ready(0), "0" * 16)  # another launch's token: an ordinary line
    text = (
        f"loss 0.5\n{encode(Ready(1, 'n1', 2), token)}progress 10%\rprogress 20%"
        f"\r\n{encode(Failed(1, 'killed by SIGKILL', 'n1'), token)}{foreign}end"
    )
    data = text.encode()
    for size in (1, 3, 7, len(data)):
        watch = MpirunWatch(token)
        shown = b"".join(watch.feed("stderr", data[i : i + size]) for i in range(0, len(data), size))
        shown += watch.feed("stderr", b"")
        assert shown.decode() == f"loss 0.5\nprogress 10%\rprogress 20%\r\n{foreign}end"
        outcome, problem = watch.outcome(137)
        assert (outcome.ready, outcome.world_size, dict(outcome.failed), problem) == (
            frozenset({1}),
            2,
            {1: "killed by SIGKILL"},
            None,
        )
        assert outcome.failures() == "rank 1 on n1 killed by SIGKILL"
    tagged = MpirunWatch(token)  # a tag before the control line goes with it (when the line comes in one piece)
    assert tagged.feed("stdout", f"a\n[n1:3] {encode(Ready(3), token)}b\n".encode()) == b"a\nb\n"


def test_the_watch_passes_a_progress_bar_at_once_and_holds_only_a_possible_control_line() -> None:
    watch = MpirunWatch(new_token())
    assert watch.feed("stdout", b"\rstep 3/10") == b"\rstep 3/10"
    assert watch.feed("stdout", b" mail me@host @@hpc") == b" mail me@host "
    assert watch.feed("stdout", b"x is not one\n") == b"@@hpcx is not one\n"


def test_the_watch_reads_prrtes_banner_of_a_killed_rank() -> None:
    watch = MpirunWatch("")
    watch.feed(
        "stderr", b"prterun noticed that process rank 3 with PID 24671 on node n2 exited on\nsignal 9 (Killed).\n"
    )
    outcome, _ = watch.outcome(137)
    assert outcome.failures() == "rank 3 on n2 killed by SIGKILL"


def test_restart_count(monkeypatch: pytest.MonkeyPatch) -> None:
    assert restart_count({}) == 0
    assert restart_count({"TORCHELASTIC_RESTART_COUNT": "2"}) == 2
    assert restart_count({"HPCDIST_RESTART_COUNT": "1", "TORCHELASTIC_RESTART_COUNT": "2"}) == 1
    monkeypatch.setenv("HPCDIST_RESTART_COUNT", "4")
    monkeypatch.setattr("hpcdist.runtime.process._PROCESS", [])  # this process's contract, read afresh
    from hpcdist import StopAtStepBoundary

    assert StopAtStepBoundary().restart_count == 4


@pytest.mark.parametrize(
    ("max_restarts", "line"),
    [
        (0, "hpcdist: interrupted (Ctrl-C); ended all 4 ranks of the job"),
        (2, "hpcdist: interrupted (Ctrl-C); ended all 4 ranks of the job (attempt 1 of 3)"),
    ],
)
def test_ctrl_c_ends_the_launch_with_130_and_one_line(
    capsys: pytest.CaptureFixture[str], max_restarts: int, line: str
) -> None:
    runs: list[tuple[list[str], str]] = []
    run = _runner([_ended(1, signals=(signal.SIGINT,))], runs)
    assert execute(_plan(max_restarts), World(stderr=sys.stderr), run=run).status == 130
    assert len(runs) == 1  # no restart after Ctrl-C
    assert capsys.readouterr().err.splitlines() == [line]


@pytest.mark.parametrize(
    ("signum", "slurm", "line"),
    [
        (signal.SIGTERM, False, "hpcdist: got SIGTERM and passed it on; ended all 4 ranks of the job (attempt 1 of 3)"),
        (
            signal.SIGHUP,
            False,
            "hpcdist: got SIGHUP and passed SIGTERM on; ended all 4 ranks of the job (attempt 1 of 3)",
        ),
        (
            signal.SIGTERM,
            True,
            "hpcdist: got SIGTERM, as the ranks did from Slurm; ended all 4 ranks of the job (attempt 1 of 3)",
        ),
    ],
)
def test_sigterm_or_sighup_ends_the_launch_with_128_and_the_signal_and_one_line(
    capsys: pytest.CaptureFixture[str], signum: int, slurm: bool, line: str
) -> None:
    runs: list[tuple[list[str], str]] = []
    plan = _plan(2)
    plan = records.replace(plan, spec=records.replace(plan.spec, slurm=slurm))
    run = _runner([_ended(1, signals=(signum,))], runs)
    assert execute(plan, World(stderr=sys.stderr), run=run).status == 128 + signum
    assert len(runs) == 1  # no restart after a scheduler's end
    assert capsys.readouterr().err.splitlines() == [line]


def test_the_outcome_file_says_how_the_launch_ended_attempt_by_attempt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "outcome.json"
    launch = records.replace(_plan(2), policy=RestartPolicy(2, pause=0.0))
    launch = records.replace(launch, options=records.replace(launch.options, outcome=str(path)))
    killed = _ended(1, failed={1: "killed by SIGKILL", 0: "exit code 1"}, hosts={1: "n1", 0: "n1"}, after_peer={0})
    runs: list[tuple[list[str], str]] = []
    assert execute(launch, World(stderr=sys.stderr), run=_runner([killed, _ended(0)], runs)).status == 0
    written = json.loads(path.read_text())
    assert (written["status"], written["attempt"], written["failed"]) == (0, 2, {})
    first = written["attempts"][0]
    assert (first["exit_status"], first["first_failure"], first["hosts"]) == (1, [1], "n1:2,n2:2,n3:2")
    assert first["failed"] == {
        "1": {"host": "n1", "how": "killed by SIGKILL"},
        "0": {"host": "n1", "how": "exit code 1"},
    }
    assert capsys.readouterr().err  # the restart was said as ever


def test_an_outcome_file_with_a_dry_run_is_refused() -> None:
    with pytest.raises(UsageError, match=r"^--outcome is written as the job ends, and --dry-run"):
        MpirunOptions(program=("x",), outcome="o.json", mode=DRY_RUN)
